"""Fixture charts and manifests that stand in for the real substrate.

Each chart has the real chart's name and the catalog's pinned version, renders
its values into a ConfigMap (so tests read back exactly what the operator
installed) and brings minimal CRDs of the APIs the real component serves, so
the plan's gates open as they would on a real cluster. The CRDs are the
project's own (schemaless, one served version), made from the kind and scope
the catalog's requirements give, so a new component brings its own. With
``workloads=True`` (a simulated cluster) each also runs what the real chart
runs, its images and pull secrets where the real chart has them (``STAND_INS``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from tests.serving import serve_directory
from tests.testenv import find_binaries, helm_environ

from modelplane.catalog import components as catalog
from modelplane.catalog.types import Component, CrdPlacement, CRDServes, ObjectExists

DEVICE_CLASS = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")

# CRDs each fixture chart brings: (group, version, plural, kind, namespaced).
Crd = tuple[str, str, str, str, bool]

# APIs the product's own configuration uses that no requirement checks: the
# chart that serves them brings them too, or the configuration stays held back.
EXTRA_CRDS: dict[str, list[Crd]] = {
    "cert-manager": [("cert-manager.io", "v1", "issuers", "Issuer", True)],
}


def required_crds(component: Component) -> list[Crd]:
    """The stand-in CRDs of what the component's requirements check, and its extras."""
    out = [
        (r.api.group, r.version, r.api.resource, r.kind, r.namespaced)
        for r in component.requirements
        if isinstance(r, CRDServes)
    ]
    return out + EXTRA_CRDS.get(component.name, [])


def _stand_in_spec(kind: str, name: str) -> dict[str, Any]:
    # A DeviceClass is named after its driver and selects that driver's
    # devices only, as the DRA driver's own does.
    if kind == "DeviceClass":
        return {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]}
    return {}


def required_objects(component: Component) -> list[dict[str, Any]]:
    """Stand-ins for the objects the component's requirements check (the DeviceClass)."""
    return [
        {
            "apiVersion": r.api.group_version,
            "kind": r.kind,
            "metadata": {"name": r.name},
            "spec": _stand_in_spec(r.kind, r.name),
        }
        for r in component.requirements
        if isinstance(r, ObjectExists)
    ]


# From the catalog, so that every chart's fixture serves what its component is
# checked by, and a Managed install reaches Ready (keyed by chart, as helm is).
CHART_CRDS: dict[str, list[Crd]] = {
    c.chart.chart: required_crds(c) for c in catalog.COMPONENTS if c.chart is not None
}
MANIFEST_CRDS: dict[str, list[Crd]] = {
    c.name: required_crds(c) for c in catalog.COMPONENTS if c.manifests is not None
}
# The CRDs a fetched file brings beside those its requirements check
# (``ManifestSource.other_crds``), as the real files hold them (upstream-facts
# §9, §14): served in the file, so the product applies and removes them as it
# would the real ones.
OTHER_MANIFEST_CRDS: dict[str, list[Crd]] = {
    "gaie-crds": [
        ("inference.networking.x-k8s.io", "v1alpha2", "inferencepools", "InferencePool", True),
        (
            "inference.networking.x-k8s.io",
            "v1alpha2",
            "inferenceobjectives",
            "InferenceObjective",
            True,
        ),
    ],
    "modelexpress-crds": [
        ("modelexpress.nvidia.com", "v1alpha1", "modelcacheentries", "ModelCacheEntry", True)
    ],
}


def _other_crds_stood_in() -> None:
    """Every other CRD the catalog names has its stand-in: a new one fails here, not later."""
    for c in catalog.COMPONENTS:
        if c.manifests is not None:
            stood_in = {f"{s[2]}.{s[0]}" for s in OTHER_MANIFEST_CRDS.get(c.name, [])}
            assert stood_in == set(c.manifests.other_crds), (
                f"{c.name}: its other CRDs need a stand-in in OTHER_MANIFEST_CRDS"
            )


_other_crds_stood_in()
_CHART_OBJECTS: dict[str, list[dict[str, Any]]] = {
    c.chart.chart: required_objects(c) for c in catalog.COMPONENTS if c.chart is not None
}


def provided_crd_specs(stack: catalog.Stack = catalog.Stack.STANDARD) -> list[Crd]:
    """The stand-in CRDs a Provided ``stack`` checks for: its charts' and the GAIE manifests'."""
    charts = {c.chart.chart for c in catalog.components_of_stack(stack) if c.chart is not None}
    specs = [s for chart, specs in CHART_CRDS.items() if chart in charts for s in specs]
    return specs + MANIFEST_CRDS["gaie-crds"]


def provide_substrate(client: Client, stack: catalog.Stack = catalog.Stack.STANDARD) -> None:
    """What a cluster owner brings in Provided mode: ``stack``'s CRDs and the GPU DeviceClass."""
    for spec in provided_crd_specs(stack):
        client.apply(CustomResourceDefinition.from_dict(crd(*spec)), field_manager="owner")
    client.apply(
        DEVICE_CLASS.from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": catalog.GPU_DEVICE_CLASS},
                "spec": {},
            }
        ),
        field_manager="owner",
    )


# Versions besides the pins, for upgrade tests. The DRA driver's run a
# kubelet plugin image of their own version (its stand-in's appVersion
# follows the chart's), so an upgrade changes the plugin DaemonSet's template.
EXTRA_VERSIONS = {
    "kube-prometheus-stack": ["84.5.0"],
    "nvidia-dra-driver-gpu": ["0.4.2", "0.4.3"],
    "kai-scheduler": ["v0.16.9"],
}
# Where each real chart keeps its CRDs (the catalog's, from upstream-facts.md).
CRD_PLACEMENT: dict[str, CrdPlacement] = {
    c.chart.chart: c.chart.crds for c in catalog.COMPONENTS if c.chart is not None
}
# The field every fixture CRD declares under its top-level ``fixture`` object:
# the version before the pin declares only the first, so an object's
# ``fixture.after`` is pruned for as long as the cluster keeps that CRD.
FIXTURE_FIELDS = ("before", "after")


def previous_version(pin: str) -> str:
    """A fixture version before ``pin``: a patch down, else a minor, else a major."""
    prefix = "v" if pin.startswith("v") else ""
    major, minor, patch = (int(p) for p in pin.removeprefix("v").split("-")[0].split(".")[:3])
    if patch:
        return f"{prefix}{major}.{minor}.{patch - 1}"
    if minor:
        return f"{prefix}{major}.{minor - 1}.0"
    return f"{prefix}{major - 1}.0.0"


def crd(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    *,
    fields: tuple[str, ...] = FIXTURE_FIELDS,
) -> dict[str, Any]:
    """A fixture CRD: anything goes, but under ``fixture``, only ``fields``."""
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if group.endswith(".k8s.io"):
        # The API server protects *.k8s.io groups; upstream CRDs carry this.
        metadata["annotations"] = {"api-approved.kubernetes.io": "unapproved, fixture"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "plural": plural,
                "kind": kind,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                            "properties": {
                                "fixture": {
                                    "type": "object",
                                    "properties": {f: {"type": "string"} for f in fields},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


# Hooks of the real charts that outlive their release, as the pinned version
# renders them (gateway-helm v1.8.4, templates/certgen-rbac.yaml and
# envoy-proxy-topology-injector-webhook.yaml): no delete policy, so Helm
# deletes one only before making it again. The webhook's object selector
# matches nothing: no webhook answers here.
_HOOK_MARKS = """  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/managed-by: {{ .Release.Service }}
  annotations:
    helm.sh/hook: pre-install, pre-upgrade
    helm.sh/hook-weight: "-1"
"""
RELEASE_HOOKS: dict[str, str] = {
    "gateway-helm": f"""---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{{{ .Release.Name }}}}-certgen:{{{{ .Release.Namespace }}}}
{_HOOK_MARKS}rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{{{ .Release.Name }}}}-certgen:{{{{ .Release.Namespace }}}}
{_HOOK_MARKS}roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{{{ .Release.Name }}}}-certgen:{{{{ .Release.Namespace }}}}
subjects:
- kind: ServiceAccount
  name: {{{{ .Release.Name }}}}-certgen
  namespace: {{{{ .Release.Namespace }}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: envoy-gateway-topology-injector.{{{{ .Release.Namespace }}}}
{_HOOK_MARKS}webhooks:
- name: topology.webhook.gateway.envoyproxy.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service:
      name: envoy-gateway
      namespace: {{{{ .Release.Namespace }}}}
      path: /inject-pod-topology
      port: 9443
  objectSelector:
    matchLabels: {{fixture.modelplane.ai/matches: nothing}}
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods/binding]
""",
}


_VALUES_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
  namespace: {{ .Release.Namespace }}
data:
  chart: {{ .Chart.Name | quote }}
  version: {{ .Chart.Version | quote }}
  values.json: {{ .Values | toJson | quote }}
"""


# ---- stand-ins of the real charts' images -------------------------------------
#
# With ``workloads=True`` each stand-in runs what its real chart runs with the
# product's values, its images set at the values paths the real chart reads,
# its defaults the real chart's at the pinned version and each reference built
# the way the real chart's template builds it (shared/docs/images.md gives the
# source of each). They are written from that page, not from the catalog's
# image data: an air-gapped install on the simulated cluster then checks the
# catalog against the charts, not against itself. Workloads a real operator
# creates at run time from the chart's values (KAI's operands, the Prometheus
# StatefulSet) are rendered by the stand-in itself, from the same values.
# Parts the product turns off (grafana, alertmanager, KAI's autoscaler,
# trust-manager's default package) keep their switch, so turning one on
# brings its images.

# Container args and env entries that name an image a controller runs later:
# an air-gapped install must move them too (images.md's runtime images).
RUNTIME_IMAGE_FLAGS = (
    "--acme-http01-solver-image",
    "--prometheus-config-reloader",
    "--thanos-default-base-image",
    "--extProcImage",
)
RUNTIME_IMAGE_ENV = ("IMAGE_NAME", "GROVE_INIT_CONTAINER_IMAGE", "MS_REPOSITORY")
# Where a container passes pull-secret names on to the pods its controller starts.
RUNTIME_PULL_SECRET_FLAGS = ("--extProcImagePullSecrets",)


@dataclass(frozen=True)
class Container:
    """One container; ``image`` and each arg are Go template expressions giving a string.

    ``env`` is an expression giving the env list as JSON; ``when`` a condition.
    """

    name: str
    image: str
    args: tuple[str, ...] = ()
    env: str | None = None
    when: str | None = None


@dataclass(frozen=True)
class PodWorkload:
    """A Deployment, DaemonSet, StatefulSet or (hook) Job of a stand-in chart.

    ``pull_secrets`` is an expression giving the pod's imagePullSecrets as
    JSON (None: the chart puts none on the pod); ``hook`` the Helm hook of a Job.
    """

    kind: str
    name: str
    containers: tuple[Container, ...]
    pull_secrets: str | None
    init_containers: tuple[Container, ...] = ()
    service_account: str | None = None
    hook: str | None = None
    when: str | None = None
    # A DaemonSet's: the values key its chart renders whole as spec.updateStrategy.
    update_strategy: str | None = None
    # YAML of the pod's affinity, as the real chart renders it.
    affinity: str | None = None


@dataclass(frozen=True)
class StandIn:
    """How one real chart sets its images: its defaults, template helpers and workloads."""

    app_version: str  # the chart's appVersion, the default tag of several
    values: dict[str, Any]  # the real chart's image and pull-secret defaults
    helpers: str = ""  # _helpers.tpl: how the chart builds a reference
    workloads: tuple[PodWorkload, ...] = ()
    extra: str = ""  # more template text (a ServiceAccount, a ConfigMap)
    # The chart's appVersion is its version (the DRA driver's), not ``app_version``.
    app_version_follows_chart: bool = False


def _lines(block: str, indent: int) -> list[str]:
    return [" " * indent + line for line in block.splitlines()]


def _container(c: Container) -> list[str]:
    out = []
    if c.when:
        out.append(f"{{{{- if {c.when} }}}}")
    out += [f"- name: {c.name}", f"  image: {{{{ {c.image} | quote }}}}"]
    if c.args:
        out.append("  args:")
        out += [f"  - {{{{ {a} | quote }}}}" for a in c.args]
    if c.env:
        out.append(f"  env: {{{{ {c.env} }}}}")
    if c.when:
        out.append("{{- end }}")
    return out


def _containers(key: str, containers: tuple[Container, ...]) -> list[str]:
    if not containers:
        return []
    out = [f"{key}:"]
    for c in containers:
        out += _container(c)
    conditions = [c.when for c in containers]
    if all(conditions):
        # Every one is switched: no key at all rather than a null list.
        either = " ".join(f"({c})" for c in conditions)
        out = [f"{{{{- if or {either} false }}}}", *out, "{{- end }}"]
    return out


def _pod_workload(w: PodWorkload) -> str:
    """The workload's template text, for a simulated cluster's kwok to run.

    It tolerates the GPU taint (as the real DRA and NFD DaemonSets do) and is
    never pulled: kwok runs pods without a kubelet.
    """
    labels = f"{{app.kubernetes.io/name: {w.name}}}"
    pod = ["restartPolicy: Never"] if w.kind == "Job" else []
    pod.append(f"tolerations: [{{key: {catalog.GPU_TAINT_KEY}, operator: Exists}}]")
    if w.service_account:
        pod.append(f"serviceAccountName: {w.service_account}")
    if w.pull_secrets is not None:
        pod.append(f"imagePullSecrets: {{{{ {w.pull_secrets} }}}}")
    if w.affinity:
        pod += ["affinity:", *_lines(w.affinity, 2)]
    pod += _containers("initContainers", w.init_containers)
    pod += _containers("containers", w.containers)
    out = []
    if w.when:
        out.append(f"{{{{- if {w.when} }}}}")
    out += ["---", "apiVersion: " + ("batch/v1" if w.kind == "Job" else "apps/v1")]
    out += [f"kind: {w.kind}", "metadata:", f"  name: {w.name}", f"  labels: {labels}"]
    if w.hook:
        # Kept after it succeeds (the real charts delete theirs), so a test
        # can read the pod spec it ran with.
        out += [
            "  annotations:",
            f"    helm.sh/hook: {w.hook}",
            "    helm.sh/hook-delete-policy: before-hook-creation",
        ]
    out.append("spec:")
    if w.kind in ("Deployment", "StatefulSet"):
        out.append("  replicas: 1")
    if w.kind == "StatefulSet":
        out.append(f"  serviceName: {w.name}")
    if w.kind == "Job":
        out.append("  backoffLimit: 0")
    else:
        out.append(f"  selector: {{matchLabels: {labels}}}")
    if w.update_strategy:
        out.append(f"  updateStrategy: {{{{- toYaml {w.update_strategy} | nindent 4 }}}}")
    out += ["  template:", f"    metadata: {{labels: {labels}}}", "    spec:"]
    out += _lines("\n".join(pod), 6)
    if w.when:
        out.append("{{- end }}")
    return "\n".join(out) + "\n"


def standin_templates(standin: StandIn) -> dict[str, str]:
    """The stand-in's template files (name -> text)."""
    out = {}
    if standin.helpers:
        out["_helpers.tpl"] = standin.helpers
    body = "".join(_pod_workload(w) for w in standin.workloads) + standin.extra
    if body:
        out["workloads.yaml"] = body
    return out


def _flag(flag: str, expr: str) -> str:
    return f'printf "{flag}=%s" ({expr})'


# cert-manager and trust-manager: ``repository`` if set, else
# imageRegistry/imageNamespace/name; the deprecated ``registry`` is put in
# front of either; then :tag@digest, :tag, @digest, or the default tag.
_JETSTACK_IMAGE = """{{- define "jetstack.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $defaultTag := index . 2 -}}
{{- $ref := $image.repository -}}
{{- if not $ref -}}
{{- $parts := list $root.Values.imageRegistry $root.Values.imageNamespace $image.name -}}
{{- $ref = $parts | compact | join "/" -}}
{{- end -}}
{{- if $image.registry -}}
{{- $ref = printf "%s/%s" $image.registry $ref -}}
{{- end -}}
{{- if and $image.tag $image.digest -}}
{{- printf "%s:%s@%s" $ref $image.tag $image.digest -}}
{{- else if $image.tag -}}
{{- printf "%s:%s" $ref $image.tag -}}
{{- else if $image.digest -}}
{{- printf "%s@%s" $ref $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref $defaultTag -}}
{{- end -}}
{{- end -}}
"""


def _cm_image(key: str) -> str:
    return f'include "jetstack.image" (list $ {key} $.Chart.AppVersion)'


_CM_SECRETS = ".Values.global.imagePullSecrets | default list | toJson"

# What the real chart installs beside its workloads, as far as the drift tests
# read it: the webhook's Service and configuration, a ServiceAccount with
# its RBAC, a ConfigMap, and the webhook's CA Secret, created empty here for
# the tests to fill as the webhook fills its own. The configuration's object
# selector matches nothing: kwok runs no webhook to answer it.
CERT_MANAGER_OBJECTS = """---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cert-manager-webhook
---
apiVersion: v1
kind: Service
metadata:
  name: cert-manager-webhook
spec:
  type: ClusterIP
  selector: {app.kubernetes.io/name: cert-manager-webhook}
  ports:
  - {name: https, port: 443, protocol: TCP, targetPort: 10250}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cert-manager-webhook
data:
  config.yaml: "kind: WebhookConfiguration"
---
apiVersion: v1
kind: Secret
metadata:
  name: cert-manager-webhook-ca
type: Opaque
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .Release.Name }}-webhook:subjectaccessreviews
rules:
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .Release.Name }}-webhook:subjectaccessreviews
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .Release.Name }}-webhook:subjectaccessreviews
subjects:
- {kind: ServiceAccount, name: cert-manager-webhook, namespace: {{ .Release.Namespace }}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ .Release.Name }}-webhook
  annotations:
    cert-manager.io/inject-ca-from-secret: {{ .Release.Namespace }}/cert-manager-webhook-ca
webhooks:
- name: webhook.cert-manager.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  objectSelector:
    matchLabels: {modelplane.test/never: "true"}
  rules:
  - apiGroups: [cert-manager.io]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: ["*/*"]
  clientConfig:
    service: {name: cert-manager-webhook, namespace: {{ .Release.Namespace }}, path: /validate}
"""

CERT_MANAGER = StandIn(
    app_version="v1.20.2",
    values={
        "global": {"imagePullSecrets": []},
        "imageRegistry": "quay.io",
        "imageNamespace": "jetstack",
        "image": {
            "name": "cert-manager-controller",
            "repository": "",
            "pullPolicy": "IfNotPresent",
        },
        "webhook": {"image": {"name": "cert-manager-webhook", "repository": ""}},
        "cainjector": {
            "enabled": True,
            "image": {"name": "cert-manager-cainjector", "repository": ""},
        },
        "acmesolver": {"image": {"name": "cert-manager-acmesolver", "repository": ""}},
        "startupapicheck": {
            "enabled": True,
            "image": {"name": "cert-manager-startupapicheck", "repository": ""},
        },
    },
    helpers=_JETSTACK_IMAGE,
    workloads=(
        PodWorkload(
            "Deployment",
            "cert-manager-controller",
            (
                Container(
                    "cert-manager-controller",
                    _cm_image(".Values.image"),
                    args=(
                        _flag("--acme-http01-solver-image", _cm_image(".Values.acmesolver.image")),
                    ),
                ),
            ),
            _CM_SECRETS,
        ),
        PodWorkload(
            "Deployment",
            "cert-manager-webhook",
            (Container("cert-manager-webhook", _cm_image(".Values.webhook.image")),),
            _CM_SECRETS,
        ),
        PodWorkload(
            "Deployment",
            "cert-manager-cainjector",
            (Container("cert-manager-cainjector", _cm_image(".Values.cainjector.image")),),
            _CM_SECRETS,
            when=".Values.cainjector.enabled",
        ),
        PodWorkload(
            "Job",
            "cert-manager-startupapicheck",
            (
                Container(
                    "cert-manager-startupapicheck", _cm_image(".Values.startupapicheck.image")
                ),
            ),
            _CM_SECRETS,
            hook="post-install",
            when=".Values.startupapicheck.enabled",
        ),
    ),
    extra=CERT_MANAGER_OBJECTS,
)

# kube-prometheus-stack and its subcharts: global.imageRegistry, else the
# image's registry, then /repository:tag and @sha256:sha (node-exporter: @digest).
_KPS_HELPERS = """{{- define "kps.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $defaultTag := index . 2 -}}
{{- $registry := $root.Values.global.imageRegistry | default $image.registry -}}
{{- $ref := printf "%s/%s:%s" $registry $image.repository ($image.tag | default $defaultTag) -}}
{{- if $image.sha -}}
{{- $ref = printf "%s@sha256:%s" $ref $image.sha -}}
{{- end -}}
{{- if $image.digest -}}
{{- $ref = printf "%s@%s" $ref $image.digest -}}
{{- end -}}
{{- $ref -}}
{{- end -}}
{{- define "kps.pullSecrets" -}}
{{- $out := list -}}
{{- range . -}}
{{- if kindIs "map" . -}}
{{- $out = append $out (dict "name" .name) -}}
{{- else -}}
{{- $out = append $out (dict "name" .) -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}
"""


def _kps_image(key: str, tag: str = "$.Chart.AppVersion") -> str:
    return f'include "kps.image" (list $ {key} {tag})'


def _kps_secrets(subchart: str | None = None) -> str:
    own = "$.Values.global.imagePullSecrets | default list"
    if subchart:
        own = f'concat ({own}) (index $.Values "{subchart}" "imagePullSecrets" | default list)'
    return f'include "kps.pullSecrets" ({own})'


def _registry_image(registry: str, repository: str, tag: str = "", **more: str) -> dict[str, str]:
    return {"registry": registry, "repository": repository, "tag": tag, **more}


_RELOADER = _kps_image(".Values.prometheusOperator.prometheusConfigReloader.image")
_WEBHOOKS = ".Values.prometheusOperator.admissionWebhooks"

KUBE_PROMETHEUS_STACK = StandIn(
    app_version="v0.90.1",
    values={
        "global": {"imageRegistry": "", "imagePullSecrets": []},
        "prometheusOperator": {
            "enabled": True,
            "image": _registry_image("quay.io", "prometheus-operator/prometheus-operator", sha=""),
            "prometheusConfigReloader": {
                "image": _registry_image(
                    "quay.io", "prometheus-operator/prometheus-config-reloader", sha=""
                )
            },
            "thanosImage": _registry_image("quay.io", "thanos/thanos", "v0.41.0", sha=""),
            "admissionWebhooks": {
                "enabled": True,
                "certManager": {"enabled": False},
                "patch": {
                    "enabled": True,
                    "image": _registry_image(
                        "ghcr.io", "jkroepke/kube-webhook-certgen", "1.8.2", sha=""
                    ),
                },
            },
        },
        "prometheus": {
            "enabled": True,
            "prometheusSpec": {
                "image": _registry_image("quay.io", "prometheus/prometheus", "v3.11.3", sha="")
            },
        },
        "alertmanager": {
            "enabled": True,
            "alertmanagerSpec": {
                "image": _registry_image("quay.io", "prometheus/alertmanager", "v0.32.0", sha="")
            },
        },
        "kubeStateMetrics": {"enabled": True},
        "kube-state-metrics": {
            "image": _registry_image(
                "registry.k8s.io", "kube-state-metrics/kube-state-metrics", sha=""
            ),
            "imagePullSecrets": [],
        },
        "nodeExporter": {"enabled": True},
        "prometheus-node-exporter": {
            "image": _registry_image("quay.io", "prometheus/node-exporter", digest=""),
            "imagePullSecrets": [],
        },
    },
    helpers=_KPS_HELPERS,
    workloads=(
        PodWorkload(
            "Deployment",
            "prometheus-operator",
            (
                Container(
                    "kube-prometheus-stack",
                    _kps_image(".Values.prometheusOperator.image"),
                    args=(
                        _flag("--prometheus-config-reloader", _RELOADER),
                        _flag(
                            "--thanos-default-base-image",
                            _kps_image(".Values.prometheusOperator.thanosImage"),
                        ),
                    ),
                ),
            ),
            _kps_secrets(),
            when=".Values.prometheusOperator.enabled",
        ),
        PodWorkload(
            "Job",
            "prometheus-admission-create",
            (Container("create", _kps_image(f"{_WEBHOOKS}.patch.image")),),
            _kps_secrets(),
            hook="pre-install,pre-upgrade",
            when=f"and {_WEBHOOKS}.enabled {_WEBHOOKS}.patch.enabled "
            f"(not {_WEBHOOKS}.certManager.enabled)",
        ),
        PodWorkload(
            "Job",
            "prometheus-admission-patch",
            (Container("patch", _kps_image(f"{_WEBHOOKS}.patch.image")),),
            _kps_secrets(),
            hook="post-install,post-upgrade",
            when=f"and {_WEBHOOKS}.enabled {_WEBHOOKS}.patch.enabled "
            f"(not {_WEBHOOKS}.certManager.enabled)",
        ),
        # What the operator makes of the chart's Prometheus and Alertmanager:
        # the CR's image and pull secrets, and its config reloader beside it.
        PodWorkload(
            "StatefulSet",
            "prometheus-prometheus-prometheus",
            (
                Container("prometheus", _kps_image(".Values.prometheus.prometheusSpec.image")),
                Container("config-reloader", _RELOADER),
            ),
            _kps_secrets(),
            init_containers=(Container("init-config-reloader", _RELOADER),),
            when=".Values.prometheus.enabled",
        ),
        PodWorkload(
            "StatefulSet",
            "alertmanager-prometheus-alertmanager",
            (
                Container(
                    "alertmanager", _kps_image(".Values.alertmanager.alertmanagerSpec.image")
                ),
                Container("config-reloader", _RELOADER),
            ),
            _kps_secrets(),
            when=".Values.alertmanager.enabled",
        ),
        PodWorkload(
            "Deployment",
            "prometheus-kube-state-metrics",
            (
                Container(
                    "kube-state-metrics",
                    _kps_image('(index .Values "kube-state-metrics" "image")', '"v2.18.0"'),
                ),
            ),
            _kps_secrets("kube-state-metrics"),
            when=".Values.kubeStateMetrics.enabled",
        ),
        PodWorkload(
            "DaemonSet",
            "prometheus-prometheus-node-exporter",
            (
                Container(
                    "node-exporter",
                    _kps_image('(index .Values "prometheus-node-exporter" "image")', '"v1.11.1"'),
                ),
            ),
            _kps_secrets("prometheus-node-exporter"),
            when=".Values.nodeExporter.enabled",
        ),
    ),
)

# Full repository strings, no registry override: repository:(tag | appVersion).
_NFD_IMAGE = (
    'printf "%s:%s" $.Values.image.repository ($.Values.image.tag | default $.Chart.AppVersion)'
)
# The chart's own list if set, else the global one: not merged.
_NFD_SECRETS = (
    "$.Values.imagePullSecrets | default $.Values.global.imagePullSecrets | default list | toJson"
)

NODE_FEATURE_DISCOVERY = StandIn(
    app_version="v0.19.0",
    values={
        "image": {"repository": "registry.k8s.io/nfd/node-feature-discovery", "tag": None},
        "imagePullSecrets": [],
        "global": {"imagePullSecrets": []},
        "master": {"enable": True},
        "worker": {"enable": True},
        "gc": {"enable": True},
    },
    workloads=(
        PodWorkload(
            "Deployment",
            "nfd-master",
            (Container("master", _NFD_IMAGE),),
            _NFD_SECRETS,
            when=".Values.master.enable",
        ),
        PodWorkload(
            "DaemonSet",
            "nfd-worker",
            (Container("worker", _NFD_IMAGE),),
            _NFD_SECRETS,
            when=".Values.worker.enable",
        ),
        PodWorkload(
            "Deployment",
            "nfd-gc",
            (Container("gc", _NFD_IMAGE),),
            _NFD_SECRETS,
            when=".Values.gc.enable",
        ),
    ),
)

_DRA_IMAGE = (
    'printf "%s:%s" $.Values.image.repository '
    '($.Values.image.tag | default (printf "v%s" $.Chart.AppVersion))'
)
_DRA_SECRETS = "$.Values.imagePullSecrets | default list | toJson"
# The driver hands its own image to the pods it starts at run time.
_DRA_ENV = f'list (dict "name" "IMAGE_NAME" "value" ({_DRA_IMAGE})) | toJson'

# GPU nodes only: one of the terms of the real chart's node affinity
# (rendered-standard.yaml at 0.4.1), NFD's PCI label of a 3D controller,
# which the simulated GPU nodes carry.
_DRA_PLUGIN_AFFINITY = f"""nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - {{key: {catalog.GPUS.nfd_label_prefix}0302_10de.present, operator: In, values: ["true"]}}
"""

DRA_DRIVER = StandIn(
    app_version="0.4.1",
    values={
        "image": {
            "repository": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu",
            "tag": "",
        },
        "imagePullSecrets": [],
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        # The chart's default (values.yaml at 0.4.1), rendered whole.
        "kubeletPlugin": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        },
    },
    app_version_follows_chart=True,
    workloads=(
        PodWorkload(
            "Deployment",
            "dra-driver-nvidia-gpu-controller",
            (Container("compute-domain", _DRA_IMAGE, env=_DRA_ENV),),
            _DRA_SECRETS,
            when=".Values.resources.computeDomains.enabled",
        ),
        PodWorkload(
            "DaemonSet",
            "dra-driver-nvidia-gpu-kubelet-plugin",
            (
                Container(
                    "compute-domains",
                    _DRA_IMAGE,
                    env=_DRA_ENV,
                    when=".Values.resources.computeDomains.enabled",
                ),
                Container("gpus", _DRA_IMAGE, env=_DRA_ENV, when=".Values.resources.gpus.enabled"),
            ),
            _DRA_SECRETS,
            init_containers=(Container("init-container", _DRA_IMAGE),),
            update_strategy=".Values.kubeletPlugin.updateStrategy",
            affinity=_DRA_PLUGIN_AFFINITY,
        ),
    ),
)

# Envoy Gateway: deployment.envoyGateway.image.repository(:tag) if set, else
# global.images.envoyGateway.image; global.imageRegistry then replaces the
# first path segment. Pull secrets: the global list wins, not merged.
_EG_HELPERS = """{{- define "eg.image" -}}
{{- $image := .Values.global.images.envoyGateway.image -}}
{{- $own := .Values.deployment.envoyGateway.image -}}
{{- with $own.repository -}}
{{- $image = printf "%s:%s" . ($own.tag | default $.Chart.AppVersion) -}}
{{- end -}}
{{- include "eg.registry" (list $ $image) -}}
{{- end -}}
{{- define "eg.registry" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- if $root.Values.global.imageRegistry -}}
{{- $path := rest (splitList "/" $image) | join "/" -}}
{{- $image = printf "%s/%s" $root.Values.global.imageRegistry $path -}}
{{- end -}}
{{- $image -}}
{{- end -}}
{{- define "eg.secretsFor" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 -}}
{{- $root.Values.global.imagePullSecrets | default $own | default list | toJson -}}
{{- end -}}
{{- define "eg.config" -}}
{{- $k8s := dict "shutdownManager" (dict "image" (include "eg.image" .)) -}}
{{- $rl := .Values.global.images.ratelimit -}}
{{- $rlImage := include "eg.registry" (list $ $rl.image) -}}
{{- $rlSecrets := include "eg.secretsFor" (list $ $rl.pullSecrets) | fromJsonArray -}}
{{- $rlPod := dict "imagePullSecrets" $rlSecrets -}}
{{- $rlDeployment := dict "container" (dict "image" $rlImage) "pod" $rlPod -}}
{{- $_ := set $k8s "rateLimitDeployment" $rlDeployment -}}
{{- $base := dict "apiVersion" "gateway.envoyproxy.io/v1alpha1" "kind" "EnvoyGateway" -}}
{{- $gateway := dict "controllerName" "gateway.envoyproxy.io/gatewayclass-controller" -}}
{{- $_ = set $base "gateway" $gateway -}}
{{- $_ = set $base "logging" (dict "level" (dict "default" "info")) -}}
{{- $_ = set $base "provider" (dict "type" "Kubernetes" "kubernetes" $k8s) -}}
{{- $proxy := .Values.global.images.envoyProxy -}}
{{- with $proxy.image -}}
{{- $secrets := include "eg.secretsFor" (list $ $proxy.pullSecrets) | fromJsonArray -}}
{{- $container := dict "image" (include "eg.registry" (list $ .)) -}}
{{- $deployment := dict "container" $container "pod" (dict "imagePullSecrets" $secrets) -}}
{{- $provider := dict "type" "Kubernetes" "kubernetes" (dict "envoyDeployment" $deployment) -}}
{{- $_ = set $base "envoyProxy" (dict "provider" $provider) -}}
{{- end -}}
{{- toYaml (merge (deepCopy (.Values.config.envoyGateway | default dict)) $base) -}}
{{- end -}}
{{- define "eg.pullSecrets" -}}
{{- if .Values.global.imagePullSecrets -}}
{{- toJson .Values.global.imagePullSecrets -}}
{{- else if .Values.deployment.envoyGateway.imagePullSecrets -}}
{{- toJson .Values.deployment.envoyGateway.imagePullSecrets -}}
{{- else -}}
{{- .Values.global.images.envoyGateway.pullSecrets | default list | toJson -}}
{{- end -}}
{{- end -}}
"""

ENVOY_GATEWAY = StandIn(
    app_version="v1.8.4",
    values={
        "global": {
            "imageRegistry": "",
            "imagePullSecrets": [],
            "images": {
                "envoyGateway": {
                    "image": "docker.io/envoyproxy/gateway:v1.8.4",
                    "pullPolicy": "IfNotPresent",
                    "pullSecrets": [],
                },
                "ratelimit": {
                    "image": "docker.io/envoyproxy/ratelimit:1e50889b",
                    "pullPolicy": "IfNotPresent",
                    "pullSecrets": [],
                },
                "envoyProxy": {"image": "", "pullPolicy": "", "pullSecrets": []},
            },
        },
        "config": {"envoyGateway": {}},
        "deployment": {
            "envoyGateway": {
                "image": {"repository": "", "tag": ""},
                "imagePullPolicy": "",
                "imagePullSecrets": [],
            }
        },
    },
    helpers=_EG_HELPERS,
    # The EnvoyGateway configuration: its shutdown-manager and rate-limit
    # images are those of the proxy pods and the rate-limit Deployment the
    # controller starts; config.envoyGateway is merged over the chart's own.
    extra="""---
apiVersion: v1
kind: ConfigMap
metadata:
  name: envoy-gateway-config
data:
  envoy-gateway.yaml: {{ include "eg.config" . | quote }}
""",
    workloads=(
        # Named as the fixtures always named it (tests look it up so).
        PodWorkload(
            "Deployment",
            "gateway",
            (Container("envoy-gateway", 'include "eg.image" $'),),
            'include "eg.pullSecrets" $',
        ),
        PodWorkload(
            "Job",
            "envoy-gateway-certgen",
            (Container("envoy-gateway-certgen", 'include "eg.image" $'),),
            'include "eg.pullSecrets" $',
            hook="pre-install,pre-upgrade",
        ),
    ),
)

_AIGW_CONTROLLER = (
    'printf "%s:%s" $.Values.controller.image.repository '
    "($.Values.controller.image.tag | default $.Chart.AppVersion)"
)
_AIGW_EXTPROC = (
    'printf "%s:%s" $.Values.extProc.image.repository '
    "($.Values.extProc.image.tag | default $.Chart.AppVersion)"
)
# extProc's own list wins over the global one; passed on as "a;b".
_AIGW_HELPERS = """{{- define "aigw.extProcPullSecrets" -}}
{{- $names := list -}}
{{- range (.Values.extProc.imagePullSecrets | default .Values.global.imagePullSecrets) -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- join ";" $names -}}
{{- end -}}
"""

AI_GATEWAY = StandIn(
    app_version="v1.1.0",
    values={
        "global": {"imagePullSecrets": []},
        "controller": {
            "image": {"repository": "docker.io/envoyproxy/ai-gateway-controller", "tag": ""},
            "imagePullPolicy": "IfNotPresent",
            "imagePullSecrets": [],
        },
        "extProc": {
            "image": {"repository": "docker.io/envoyproxy/ai-gateway-extproc", "tag": ""},
            "imagePullPolicy": "IfNotPresent",
            "imagePullSecrets": [],
        },
    },
    helpers=_AIGW_HELPERS,
    workloads=(
        PodWorkload(
            "Deployment",
            "ai-gateway-controller",
            (
                Container(
                    "ai-gateway-controller",
                    _AIGW_CONTROLLER,
                    args=(
                        _flag("--extProcImage", _AIGW_EXTPROC),
                        _flag("--extProcImagePullSecrets", 'include "aigw.extProcPullSecrets" $'),
                    ),
                ),
            ),
            "$.Values.controller.imagePullSecrets | default $.Values.global.imagePullSecrets "
            "| default list | toJson",
        ),
    ),
)

TRUST_MANAGER = StandIn(
    app_version="v0.25.0",
    values={
        "imageRegistry": "quay.io",
        "imageNamespace": "jetstack",
        "image": {"name": "trust-manager", "repository": "", "pullPolicy": "IfNotPresent"},
        "defaultPackage": {"enabled": True},
        "defaultPackageImage": {
            "name": "trust-pkg-debian-trixie",
            "repository": "",
            "_defaultReference": ":20250419.1",
        },
        "imagePullSecrets": [],
    },
    helpers=_JETSTACK_IMAGE,
    workloads=(
        # The chart gives its pull secrets to the ServiceAccount only, not the pod.
        PodWorkload(
            "Deployment",
            "trust-manager",
            (Container("trust-manager", _cm_image(".Values.image")),),
            None,
            init_containers=(
                Container(
                    "cert-manager-package-debian",
                    'include "jetstack.image" (list $ .Values.defaultPackageImage '
                    '(trimPrefix ":" .Values.defaultPackageImage._defaultReference))',
                    when=".Values.defaultPackage.enabled",
                ),
            ),
            service_account="trust-manager",
        ),
    ),
    extra="""---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: trust-manager
imagePullSecrets: {{ .Values.imagePullSecrets | default list | toJson }}
""",
)

LWS = StandIn(
    app_version="v0.8.0",
    values={
        "image": {
            "manager": {
                "repository": "registry.k8s.io/lws/lws",
                "tag": "v0.8.0",
                "pullPolicy": "IfNotPresent",
            }
        },
        "imagePullSecrets": [],
    },
    workloads=(
        PodWorkload(
            "Deployment",
            "lws-controller-manager",
            (
                Container(
                    "manager",
                    'printf "%s:%s" $.Values.image.manager.repository '
                    "($.Values.image.manager.tag | default $.Chart.AppVersion)",
                ),
            ),
            "$.Values.imagePullSecrets | default list | toJson",
        ),
    ),
)

# KAI: <registry>/<name>:<tag | global.tag | appVersion>[-fips], the
# registry global.registry (a registry and path prefix) unless the image has
# its own (only the hook images do).
_KAI_HELPERS = """{{- define "kai.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $tag := $image.tag | default $root.Values.global.tag | default $root.Chart.AppVersion -}}
{{- if $root.Values.global.fips -}}
{{- $tag = printf "%s-fips" $tag -}}
{{- end -}}
{{- printf "%s/%s:%s" ($image.registry | default $root.Values.global.registry) $image.name $tag -}}
{{- end -}}
"""
_KAI_SECRETS = "$.Values.global.imagePullSecrets | default list | toJson"


def _kai(name: str, key: str, kind: str = "Deployment", **more: Any) -> PodWorkload:
    image = f'include "kai.image" (list $ .Values.{key}.image)'
    return PodWorkload(kind, name, (Container(name, image),), _KAI_SECRETS, **more)


# The operands KAI's operator deploys from the kai-config Config the chart
# writes: each image from these values, each pod with the global pull secrets.
_KAI_OPERANDS = ("admission", "binder", "podgrouper", "podgroupcontroller", "queuecontroller")

KAI_SCHEDULER = StandIn(
    app_version="v0.16.8",
    values={
        "global": {
            "registry": "ghcr.io/kai-scheduler/kai-scheduler",
            "tag": "",
            "fips": False,
            "imagePullSecrets": [],
            "clusterAutoscaling": False,
        },
        "operator": {"image": {"name": "operator"}},
        **{name: {"image": {"name": name}} for name in _KAI_OPERANDS},
        "scheduler": {"image": {"name": "scheduler"}},
        "nodescaleadjuster": {"image": {"name": "nodescaleadjuster"}},
        "crdupgrader": {"image": {"name": "crd-upgrader"}},
        "kaiConfigDeployer": {"enabled": True, "image": {"name": "crd-upgrader"}},
    },
    helpers=_KAI_HELPERS,
    workloads=(
        PodWorkload(
            "Deployment",
            "kai-operator",
            (
                Container(
                    "operator",
                    'include "kai.image" (list $ .Values.operator.image)',
                    env='list (dict "name" "MS_REPOSITORY" "value" $.Values.global.registry) '
                    "| toJson",
                ),
            ),
            _KAI_SECRETS,
        ),
        *(_kai(name, name) for name in _KAI_OPERANDS),
        # The operator names each shard's scheduler <schedulerName>-<shard>.
        _kai("kai-scheduler-default", "scheduler"),
        _kai(
            "node-scale-adjuster",
            "nodescaleadjuster",
            when=".Values.global.clusterAutoscaling",
        ),
        _kai("crd-upgrader", "crdupgrader", "Job", hook="pre-install,pre-upgrade"),
        _kai(
            "kai-config-deployer",
            "kaiConfigDeployer",
            "Job",
            hook="post-install,post-upgrade",
            when=".Values.kaiConfigDeployer.enabled",
        ),
    ),
)

GROVE = StandIn(
    app_version="v0.1.0-alpha.12-rc2",
    values={
        "image": {
            "repository": "ghcr.io/ai-dynamo/grove/grove-operator",
            "tag": "v0.1.0-alpha.12-rc2",
            "pullPolicy": "IfNotPresent",
        },
        "imagePullSecrets": [],
        "deployment": {
            "env": [
                {
                    "name": "GROVE_INIT_CONTAINER_IMAGE",
                    "value": "ghcr.io/ai-dynamo/grove/grove-initc",
                }
            ]
        },
    },
    helpers="""{{- define "grove.image" -}}
{{- if hasPrefix "sha256:" (toString .Values.image.tag) -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}
""",
    workloads=(
        PodWorkload(
            "Deployment",
            "grove-operator",
            (
                Container(
                    "grove-operator",
                    'include "grove.image" $',
                    env="$.Values.deployment.env | default list | toJson",
                ),
            ),
            "$.Values.imagePullSecrets | default list | toJson",
        ),
    ),
)

# Keyed by chart. ai-gateway-crds-helm runs no image.
STAND_INS: dict[str, StandIn] = {
    "cert-manager": CERT_MANAGER,
    "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
    "node-feature-discovery": NODE_FEATURE_DISCOVERY,
    "dra-driver-nvidia-gpu": DRA_DRIVER,
    "gateway-helm": ENVOY_GATEWAY,
    "ai-gateway-helm": AI_GATEWAY,
    "trust-manager": TRUST_MANAGER,
    "lws": LWS,
    "kai-scheduler": KAI_SCHEDULER,
    "grove-charts": GROVE,
}


def write_chart(
    root: Path,
    name: str,
    version: str,
    standin: StandIn | None = None,
    *,
    upstream_crds: bool = False,
    previous: bool = False,
    hooks: bool = False,
) -> Path:
    """The fixture chart ``name`` at ``version``; with ``standin``, its images and workloads.

    Without one its values.yaml is empty, so the values ConfigMap holds
    exactly the values the operator passed. With ``upstream_crds`` its CRDs
    are where the real chart keeps them (``CRD_PLACEMENT``: crds/, a crds
    subchart's crds/, or templates/), else among the templates, which Helm
    upgrades and uninstalls with the release. A ``previous`` chart's CRDs
    declare one field fewer (``FIXTURE_FIELDS``). With ``hooks`` it has the
    real chart's hooks that outlive the release (``RELEASE_HOOKS``).
    """
    chart = root / f"{name}-{version}"
    (chart / "templates").mkdir(parents=True)
    meta = {
        "apiVersion": "v2",
        "name": name,
        "version": version,
        "description": f"fixture stand-in for {name}",
    }
    if standin is not None:
        meta["appVersion"] = version if standin.app_version_follows_chart else standin.app_version
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    values = standin.values if standin is not None else {}
    (chart / "values.yaml").write_text(yaml.safe_dump(values) if values else "{}\n")
    (chart / "templates" / "values.yaml").write_text(_VALUES_CONFIGMAP)
    # A chart the catalog does not know has no entry: an error, not a chart
    # that quietly serves nothing and leaves its stack short of Ready.
    fields = FIXTURE_FIELDS[:1] if previous else FIXTURE_FIELDS
    crds = [crd(*c, fields=fields) for c in CHART_CRDS[name]]
    placement = CRD_PLACEMENT[name] if upstream_crds else CrdPlacement.TEMPLATES
    if crds and placement is CrdPlacement.CRDS_DIR:
        (chart / "crds").mkdir()
        (chart / "crds" / "apis.yaml").write_text(yaml.safe_dump_all(crds))
        crds = []
    elif crds and placement is CrdPlacement.SUBCHART:
        sub = chart / "charts" / "crds"
        (sub / "crds").mkdir(parents=True)
        (sub / "Chart.yaml").write_text(
            yaml.safe_dump({"apiVersion": "v2", "name": "crds", "version": version})
        )
        (sub / "crds" / "apis.yaml").write_text(yaml.safe_dump_all(crds))
        crds = []
    docs = crds + _CHART_OBJECTS[name]
    if docs:
        (chart / "templates" / "apis.yaml").write_text(yaml.safe_dump_all(docs))
    if standin is not None:
        for file, text in standin_templates(standin).items():
            (chart / "templates" / file).write_text(text)
    if hooks and name in RELEASE_HOOKS:
        (chart / "templates" / "hooks.yaml").write_text(RELEASE_HOOKS[name])
    return chart


@dataclass(frozen=True)
class Substrate:
    chart_repository: str
    manifests_base: str
    directory: Path


def component_workloads(component: Component) -> list[tuple[str, str]]:
    """(kind, image) of every workload the component's advisories look for."""
    out: list[tuple[str, str]] = []
    for advisory in component.advisories:
        found = getattr(advisory, "workloads", None)
        if found is not None:
            out += [(kind, image) for kind in found.kinds for image in found.images]
    return list(dict.fromkeys(out))


def stand_in_for(component: Component) -> StandIn | None:
    """The component's stand-in; one whose advisories look for workloads must have one."""
    assert component.chart is not None
    standin = STAND_INS.get(component.chart.chart)
    if standin is None and component_workloads(component):
        raise AssertionError(
            f"{component.name}'s advisories look for workloads, but chart "
            f"{component.chart.chart} has no stand-in in STAND_INS to run them"
        )
    return standin


@dataclass(frozen=True)
class Helm:
    """Runs the built helm with a private home; ``kubeconfig`` args are added by callers."""

    binary: Path
    home: Path

    @property
    def environ(self) -> dict[str, str]:
        return helm_environ(self.home)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc


def serve_substrate(
    helm: Any,
    workdir: Path,
    *,
    workloads: bool = False,
    upstream_crds: bool = False,
    hooks: bool = False,
) -> Iterator[Substrate]:
    """Package every catalog chart and the manifests, and serve them on loopback.

    With ``workloads``, each chart is its stand-in (``STAND_INS``): it runs
    the real chart's workloads, among them those its component's advisories
    look for, and hook Jobs, so ``helm install`` waits for them on a
    simulated cluster (they never become ready, nor complete, on a bare API
    server).
    """
    sources = workdir / "sources"
    served = workdir / "served"
    served.mkdir(parents=True)
    for component in catalog.COMPONENTS:
        if component.chart is not None:
            versions = [component.version, *EXTRA_VERSIONS.get(component.name, [])]
            if upstream_crds:
                versions.append(previous_version(component.version))
            for version in versions:
                chart = write_chart(
                    sources,
                    component.chart.chart,
                    version,
                    stand_in_for(component) if workloads else None,
                    upstream_crds=upstream_crds,
                    previous=version == previous_version(component.version),
                    hooks=hooks,
                )
                helm.run("package", str(chart), "--destination", str(served / "charts"))
    with serve_directory(served) as url:
        helm.run("repo", "index", str(served / "charts"), "--url", f"{url}/charts")
        for component in catalog.COMPONENTS:
            if component.manifests is not None:
                path = (
                    served
                    / "manifests"
                    / component.name
                    / component.manifests.path.format(version=component.version)
                )
                path.parent.mkdir(parents=True, exist_ok=True)
                specs = MANIFEST_CRDS[component.name] + OTHER_MANIFEST_CRDS.get(component.name, [])
                path.write_text(yaml.safe_dump_all([crd(*c) for c in specs]))
        yield Substrate(f"{url}/charts", f"{url}/manifests", served)


def run_operator(
    hub_kubeconfig: Path, substrate: Substrate, namespace: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    # The interpreter running the tests, not whichever "python" is first on PATH.
    args = [
        sys.executable,
        "-m",
        "modelplane.cli.main",
        "run",
        "--kubeconfig",
        str(hub_kubeconfig),
        "--namespace",
        namespace,
        "--chart-repository",
        substrate.chart_repository,
        "--gaie-manifests-url",
        f"{substrate.manifests_base}/gaie-crds",
        "--manifests-url-for",
        f"modelexpress-crds={substrate.manifests_base}/modelexpress-crds",
        "--resync",
        "30",
        "--helm-timeout",
        "60",
        # No kai-scheduler runs on these targets to bind the probe pod; the
        # tests of the probe turn it on (test_scheduler_probe.py).
        "--scheduler-probe-timeout",
        "off",
        *extra,
    ]
    # The operator finds helm only through MODELPLANE_HELM or PATH; give it the built one.
    env = {**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])}
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
