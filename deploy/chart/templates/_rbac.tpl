{{/*
The operator's permissions on the hub, in one place. Each rule is what the
operator or kopf actually calls; add a rule here (or through
.Values.rbac.extraRules), never in the templates that bind them.
*/}}

{{/* In each watched namespace (a Role), or in all of them (the ClusterRole). */}}
{{- define "modelplane.rules.stacks" -}}
# kopf lists and watches ServingStacks and patches their metadata (the
# finalizer and its progress annotations). Nothing gets or updates them.
- apiGroups: [infrastructure.modelplane.ai]
  resources: [servingstacks]
  verbs: [list, watch, patch]
# The operator's report: a merge patch of the status subresource.
- apiGroups: [infrastructure.modelplane.ai]
  resources: [servingstacks/status]
  verbs: [patch]
# Kubeconfig Secrets are read by the name a ServingStack gives, one at a
# time: never listed or watched.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# Events on ServingStacks: kopf posts each as a new core/v1 Event and never
# patches one.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- with .Values.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* kopf peering between replicas: one KopfPeering per watched namespace. */}}
{{- define "modelplane.rules.peering" -}}
# kopf peering: replicas see each other through a KopfPeering here.
- apiGroups: [kopf.dev, zalando.org]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end -}}

{{/* kopf peering for all namespaces: the cluster-scoped ClusterKopfPeering. */}}
{{- define "modelplane.rules.clusterPeering" -}}
# kopf peering: replicas see each other through a ClusterKopfPeering.
- apiGroups: [kopf.dev, zalando.org]
  resources: [clusterkopfpeerings]
  verbs: [get, list, watch, patch]
{{- end -}}

{{/* Leader election: Leases in the release's namespace. */}}
{{- define "modelplane.rules.leases" -}}
# Leader election: one replica holds the Lease, the others wait for it.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
{{- end -}}
