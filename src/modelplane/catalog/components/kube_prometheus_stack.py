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
from modelplane.catalog.types import (
    ChartSource,
    Component,
    CRDServes,
    Finding,
    Values,
    Workloads,
)
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

VERSION = "84.4.0"

ENVOY_PROXY_STATS_PORT = 19001
PROMETHEUS = ApiRef("monitoring.coreos.com", "v1", "prometheuses")
WORKLOADS = Workloads("the Prometheus Operator", ("prometheus-operator/prometheus-operator",))


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
        return (CustomObjects(self.api),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        key = self.api.key
        if key not in facts.custom:
            return cannot(facts, key)
        objects = facts.custom[key]
        if not objects:
            return UNKNOWN, (
                f"no {self.kind} object exists in any namespace, so what scrapes the "
                "PodMonitors cannot be observed"
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
    chart=ChartSource(
        "kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts"
    ),
    values=_values,
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
