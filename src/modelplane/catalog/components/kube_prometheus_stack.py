"""kube-prometheus-stack: Prometheus and its operator, scraping PodMonitors everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelplane.catalog.advisories import (
    MAX_LISTED,
    MET,
    UNKNOWN,
    WARNING,
    WorkloadsAvailable,
    cannot,
    named,
    show,
)
from modelplane.catalog.components._common import BOTH
from modelplane.catalog.facts import ClusterFacts, CustomObjects, Fact
from modelplane.catalog.images import (
    Images,
    ImageSite,
    PullSecrets,
    RegistryAndRepository,
    Runs,
)
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CrdPlacement,
    CRDServes,
    Disruption,
    DisruptionClass,
    Finding,
    HelmHook,
    Values,
    ValuesRead,
    Workloads,
)
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

VERSION = "84.4.0"

ENVOY_PROXY_STATS_PORT = 19001
PROMETHEUS = ApiRef("monitoring.coreos.com", "v1", "prometheuses")
WORKLOADS = Workloads("the Prometheus Operator", ("prometheus-operator/prometheus-operator",))


def _at(prefix: str) -> RegistryAndRepository:
    return RegistryAndRepository(f"{prefix}.registry", f"{prefix}.repository")


# images.md §2 (prometheus-community/helm-charts @ kube-prometheus-stack-84.4.0,
# values.yaml and the templates it names; kube-state-metrics 7.3.0,
# prometheus-node-exporter 4.53.1, grafana 12.3.0): every image is
# "<registry>/<repository>:<tag>", global.imageRegistry replacing the registry;
# the per-image pair is set so a rule for one registry path still applies.
# The tags are the subcharts' and the operator's app versions, not the chart's.
_OPERATOR = "prometheusOperator"
IMAGES = Images(
    sites=(
        ImageSite(
            "quay.io/prometheus-operator/prometheus-operator:v0.90.1", _at(f"{_OPERATOR}.image")
        ),
        ImageSite(
            "quay.io/prometheus-operator/prometheus-config-reloader:v0.90.1",
            _at(f"{_OPERATOR}.prometheusConfigReloader.image"),
            Runs.RUNTIME,
            "the operator injects it into Prometheus pods (--prometheus-config-reloader)",
        ),
        ImageSite(
            "ghcr.io/jkroepke/kube-webhook-certgen:1.8.2",
            _at(f"{_OPERATOR}.admissionWebhooks.patch.image"),
            Runs.HOOK,
            "the admission-create and admission-patch Jobs",
        ),
        ImageSite(
            "quay.io/prometheus/prometheus:v3.11.3",
            _at("prometheus.prometheusSpec.image"),
            note="the operator runs it from the chart's Prometheus object",
        ),
        ImageSite(
            "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.18.0",
            _at("kube-state-metrics.image"),
        ),
        ImageSite(
            "quay.io/prometheus/node-exporter:v1.11.1", _at("prometheus-node-exporter.image")
        ),
        # The operator's defaults for Prometheus and Alertmanager objects that
        # set no spec.image (KAI's, when its Prometheus is on); the tag is
        # the operator's compiled-in one.
        ImageSite(
            "quay.io/prometheus/prometheus",
            RegistryAndRepository(
                f"{_OPERATOR}.prometheusDefaultBaseImageRegistry",
                f"{_OPERATOR}.prometheusDefaultBaseImage",
            ),
            Runs.RUNTIME,
            "for Prometheus objects other software creates without spec.image; one with its "
            "own spec.image is not rewritten",
        ),
        ImageSite(
            "quay.io/prometheus/alertmanager",
            RegistryAndRepository(
                f"{_OPERATOR}.alertmanagerDefaultBaseImageRegistry",
                f"{_OPERATOR}.alertmanagerDefaultBaseImage",
            ),
            Runs.RUNTIME,
            "for Alertmanager objects other software creates without spec.image",
        ),
        ImageSite(
            "quay.io/prometheus-operator/admission-webhook:v0.90.1",
            _at(f"{_OPERATOR}.admissionWebhooks.deployment.image"),
            Runs.OFF,
            "admissionWebhooks.deployment.enabled",
        ),
        ImageSite(
            "quay.io/thanos/thanos:v0.41.0",
            _at(f"{_OPERATOR}.thanosImage"),
            Runs.OFF,
            "a Thanos sidecar or ruler",
        ),
        ImageSite(
            "quay.io/prometheus/alertmanager:v0.32.0",
            _at("alertmanager.alertmanagerSpec.image"),
            Runs.OFF,
            "alertmanager.enabled (the product turns it off)",
        ),
        ImageSite(
            "quay.io/thanos/thanos:v0.41.0",
            _at("thanosRuler.thanosRulerSpec.image"),
            Runs.OFF,
            "thanosRuler.enabled",
        ),
        ImageSite(
            "docker.io/busybox:latest",
            _at("crds.upgradeJob.image.busybox"),
            Runs.OFF,
            "crds.upgradeJob.enabled",
        ),
        ImageSite(
            "registry.k8s.io/kubectl",
            _at("crds.upgradeJob.image.kubectl"),
            Runs.OFF,
            "crds.upgradeJob.enabled; tagged with the cluster's version",
        ),
        ImageSite(
            "quay.io/brancz/kube-rbac-proxy:v0.22.0",
            _at("kube-state-metrics.kubeRBACProxy.image"),
            Runs.OFF,
            "kube-state-metrics.kubeRBACProxy.enabled",
        ),
        ImageSite(
            "quay.io/brancz/kube-rbac-proxy:v0.21.2",
            _at("prometheus-node-exporter.kubeRBACProxy.image"),
            Runs.OFF,
            "prometheus-node-exporter.kubeRBACProxy.enabled",
        ),
        ImageSite(
            "quay.io/prometheus/busybox:latest",
            _at("prometheus-node-exporter.permissionInitContainer.image"),
            Runs.OFF,
            "node-exporter's permission fixes",
        ),
        ImageSite(
            "docker.io/grafana/grafana:13.0.1",
            _at("grafana.image"),
            Runs.OFF,
            "grafana.enabled (the product turns it off)",
        ),
        ImageSite(
            "quay.io/kiwigrid/k8s-sidecar:2.7.1",
            _at("grafana.sidecar.image"),
            Runs.OFF,
            "grafana.enabled (the product turns it off)",
        ),
        ImageSite(
            "docker.io/bats/bats:1.13.0",
            _at("grafana.testFramework.image"),
            Runs.OFF,
            "grafana's helm test pod",
        ),
        ImageSite(
            "docker.io/library/busybox:1.37.0",
            _at("grafana.initChownData.image"),
            Runs.OFF,
            "grafana.persistence.enabled",
        ),
        ImageSite(
            "docker.io/curlimages/curl:8.20.0",
            _at("grafana.downloadDashboardsImage"),
            Runs.OFF,
            "grafana dashboards downloaded at start",
        ),
        ImageSite(
            "docker.io/grafana/grafana-image-renderer:latest",
            _at("grafana.imageRenderer.image"),
            Runs.OFF,
            "grafana.imageRenderer.enabled",
        ),
    ),
    # Helm hands global.* to the subcharts too (images.md §2: kube-state-metrics
    # and node-exporter concatenate it with their own lists, so one is enough).
    pull_secrets=PullSecrets(("global.imagePullSecrets",)),
)


def _pair(prefix: str) -> tuple[str, str]:
    return (f"{prefix}.registry", f"{prefix}.repository")


# What the chart reads at the pin, of what the product can set: its fixed
# values, each image's registry and repository (images.md §2; a subchart's
# under its name, from its own values.yaml) and global.imagePullSecrets.
READS = ValuesRead(
    VERSION,
    (
        "fullnameOverride",
        "grafana.enabled",
        "alertmanager.enabled",
        "prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues",
        "prometheus.prometheusSpec.podMonitorNamespaceSelector",
        "prometheus.prometheusSpec.additionalScrapeConfigs",
        "global.imagePullSecrets",
        *_pair(f"{_OPERATOR}.image"),
        *_pair(f"{_OPERATOR}.prometheusConfigReloader.image"),
        *_pair(f"{_OPERATOR}.admissionWebhooks.patch.image"),
        *_pair(f"{_OPERATOR}.admissionWebhooks.deployment.image"),
        *_pair(f"{_OPERATOR}.thanosImage"),
        *_pair("prometheus.prometheusSpec.image"),
        *_pair("alertmanager.alertmanagerSpec.image"),
        *_pair("thanosRuler.thanosRulerSpec.image"),
        *_pair("crds.upgradeJob.image.busybox"),
        *_pair("crds.upgradeJob.image.kubectl"),
        *_pair("kube-state-metrics.image"),
        *_pair("kube-state-metrics.kubeRBACProxy.image"),
        *_pair("prometheus-node-exporter.image"),
        *_pair("prometheus-node-exporter.kubeRBACProxy.image"),
        *_pair("prometheus-node-exporter.permissionInitContainer.image"),
        *_pair("grafana.image"),
        *_pair("grafana.sidecar.image"),
        *_pair("grafana.testFramework.image"),
        *_pair("grafana.initChownData.image"),
        *_pair("grafana.downloadDashboardsImage"),
        *_pair("grafana.imageRenderer.image"),
    ),
    # Commented out in values.yaml, so the chart's data files cannot show the
    # read; images.md §2 (kube-prometheus-stack-84.4.0 templates/prometheus-
    # operator/deployment.yaml) has the operator's Deployment pass each to a
    # --prometheus-/--alertmanager-default-base-image flag when it is set.
    unlisted=tuple(
        (
            f"{_OPERATOR}.{name}",
            "templates/prometheus-operator/deployment.yaml renders the operator's "
            "--*-default-base-image flags from it when set (images.md §2)",
        )
        for name in (
            "prometheusDefaultBaseImage",
            "prometheusDefaultBaseImageRegistry",
            "alertmanagerDefaultBaseImage",
            "alertmanagerDefaultBaseImageRegistry",
        )
    ),
)

# ---- its advisory kinds --------------------------------------------------------


@dataclass(frozen=True)
class SelectsEverything:
    """Some object of a kind has each of ``fields`` (spec.*) set to ``{}`` (select all)."""

    api: ApiRef
    kind: str
    fields: tuple[str, ...]
    title: str
    fix: str

    def needs(self) -> tuple[Fact, ...]:
        return (CustomObjects(self.api, namespaced=True),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        key = self.api.key
        if key not in facts.custom:
            return cannot(facts, key)
        objects = facts.custom[key]
        if not objects:
            return UNKNOWN, (
                f"no {self.kind} object exists in namespace "
                f"{' or '.join(component.observed_in)}, so what scrapes the PodMonitors "
                "cannot be observed"
            )
        failures: list[str] = []
        for obj in objects:
            bad = [
                f"spec.{f} is {show(obj.spec[f]) if f in obj.spec else 'unset'}"
                for f in self.fields
                if obj.spec.get(f) != {}
            ]
            if not bad:
                fields = " and ".join(self.fields)
                return MET, f"{self.kind} {named(obj.namespace, obj.name)} sets {fields} to {{}}"
            failures.append(f"{self.kind} {named(obj.namespace, obj.name)}: {', '.join(bad)}")
        return WARNING, f"{'; '.join(failures[:MAX_LISTED])}: {self.fix}"


# The operator's admission webhook certificate Jobs and their RBAC
# (templates/prometheus-operator/admission-webhooks/job-patch/),
# named after fullnameOverride and deleted once they succeed.
_ADMISSION = "prometheus-admission"
_AROUND = ("pre-install", "pre-upgrade", "post-install", "post-upgrade")
_UNLESS_FAILED = ("before-hook-creation", "hook-succeeded")
_RBAC = "rbac.authorization.k8s.io/v1"
HOOKS = (
    HelmHook("v1", "ServiceAccount", _ADMISSION, True, _AROUND, _UNLESS_FAILED),
    HelmHook(_RBAC, "ClusterRole", _ADMISSION, False, _AROUND, _UNLESS_FAILED),
    HelmHook(_RBAC, "ClusterRoleBinding", _ADMISSION, False, _AROUND, _UNLESS_FAILED),
    HelmHook(_RBAC, "Role", _ADMISSION, True, _AROUND, _UNLESS_FAILED),
    HelmHook(_RBAC, "RoleBinding", _ADMISSION, True, _AROUND, _UNLESS_FAILED),
    HelmHook(
        "batch/v1",
        "Job",
        f"{_ADMISSION}-create",
        True,
        ("pre-install", "pre-upgrade"),
        _UNLESS_FAILED,
    ),
    HelmHook(
        "batch/v1",
        "Job",
        f"{_ADMISSION}-patch",
        True,
        ("post-install", "post-upgrade"),
        _UNLESS_FAILED,
    ),
)


def _values(_spec: ServingStackSpec) -> Values:
    # Modelplane's scrape targets are PodMonitors in workload namespaces: the
    # chart's default release-label selector never matches them.
    return {
        "fullnameOverride": "prometheus",
        "grafana": {"enabled": False},
        "alertmanager": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                "podMonitorSelectorNilUsesHelmValues": False,
                "podMonitorNamespaceSelector": {},
                "additionalScrapeConfigs": [
                    {
                        "job_name": "envoy-gateway-proxy",
                        "metrics_path": "/stats/prometheus",
                        "kubernetes_sd_configs": [{"role": "pod"}],
                        "relabel_configs": [
                            {
                                "action": "keep",
                                "source_labels": [
                                    "__meta_kubernetes_pod_label_app_kubernetes_io_component",
                                    "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by",
                                ],
                                "regex": "proxy;envoy-gateway",
                            },
                            {
                                "action": "keep",
                                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                                "regex": str(ENVOY_PROXY_STATS_PORT),
                            },
                        ],
                    }
                ],
            }
        },
    }


COMPONENT = Component(
    name="kube-prometheus-stack",
    summary="Prometheus and its operator, scraping PodMonitors in every namespace.",
    namespace="monitoring",
    version=VERSION,
    order=20,
    version_field="versions.prometheus",
    version_description="kube-prometheus-stack chart version.",
    stacks=BOTH,
    # node-exporter runs on every node, but nothing that serves waits on it.
    disruptions=(
        Disruption(
            DisruptionClass.CONTROL,
            "restarts Prometheus, its operator, kube-state-metrics and node-exporter: a gap in "
            "metrics, no workload touched",
        ),
    ),
    chart=ChartSource(
        "kube-prometheus-stack",
        "https://prometheus-community.github.io/helm-charts",
        crds=CrdPlacement.SUBCHART,
        reads=(READS,),
        hooks=HOOKS,
    ),
    values=_values,
    images=IMAGES,
    requirements=(
        CRDServes(
            "podmonitors.monitoring.coreos.com",
            "v1",
            "install the Prometheus Operator CRDs",
            "PodMonitor",
        ),
        CRDServes(
            "servicemonitors.monitoring.coreos.com",
            "v1",
            "install the Prometheus Operator CRDs",
            "ServiceMonitor",
        ),
    ),
    advisories=(
        SelectsEverything(
            PROMETHEUS,
            "Prometheus",
            ("podMonitorSelector", "podMonitorNamespaceSelector"),
            "Prometheus selects PodMonitors in every namespace",
            "set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues to false and "
            "podMonitorNamespaceSelector to {}",
        ),
        WorkloadsAvailable(WORKLOADS, "check the Prometheus Operator Deployment's events"),
    ),
    not_checked=(
        "Prometheus discovers PodMonitor objects in every namespace: with the chart, set "
        "podMonitorSelectorNilUsesHelmValues to false and podMonitorNamespaceSelector to empty.",
        "A scrape job for the Envoy Gateway proxy pods' stats endpoint, for proxy-level "
        "request metrics.",
    ),
    not_needed=("Grafana and Alertmanager are disabled.",),
)
