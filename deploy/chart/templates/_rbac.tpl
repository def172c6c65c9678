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

{{/*
Leader election (src/modelplane/operator/leader.py), in the release
namespace: a candidate reads the Lease, creates it when it is missing, and
takes, renews or releases it with a replace at the resourceVersion read
(update). Nothing lists, watches or patches Leases. RBAC cannot limit create
to a name (the name is not known when create is authorized), so get and
update are held to the one Lease and create stands alone
(https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources).
*/}}
{{- define "modelplane.rules.leases" -}}
# Leader election: the first candidate creates the Lease.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
# Leader election: read, take, renew and release the release's own Lease.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "modelplane.leaseName" . | quote }}]
  verbs: [get, update]
{{- end -}}


{{/*
Who may read /metrics (src/modelplane/operator/metrics_auth.py): the operator
asks the hub who a scraper's token is (a TokenReview) and whether that user
may get /metrics (a SubjectAccessReview). Both are create-only, cluster-scoped
reviews that read or write nothing stored.
*/}}
{{- define "modelplane.rules.metricsAuth" -}}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end -}}

{{/* What a scraper needs: get on the non-resource URL /metrics, nothing else. */}}
{{- define "modelplane.rules.metricsReader" -}}
- nonResourceURLs: [/metrics]
  verbs: [get]
{{- end -}}
