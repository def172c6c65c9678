"""plan.conflicts' second-instance rules on the real charts' workloads.

The rules name a program by the last segment of its image and, where one
image runs several programs, by its command. Which workloads of a real
release they take for a second instance is read here from what the
upstream chart renders with the product's values (``rendered-standard.yaml``
in ../shared/fixtures/charts), as if another owner had installed the same
chart: the program that must be alone is found, and the rest of the release
(a cainjector, the NFD workers, an exporter) is not, since a second one of
those does no harm.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs

from modelplane.plan.conflicts import SINGLETONS, live_workload, second_instances

WORKLOAD_KINDS = ("Deployment", "DaemonSet")
# Another owner's release: no product release owns it.
FOREIGN = {"meta.helm.sh/release-name": "theirs", "meta.helm.sh/release-namespace": "elsewhere"}


def foreign_workloads(chart: str, version: str) -> list[Any]:
    docs = yaml_docs(real_chart(chart, version) / "rendered-standard.yaml")
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in WORKLOAD_KINDS:
            continue
        doc["metadata"]["annotations"] = dict(FOREIGN)
        out.append(live_workload(doc["kind"], doc))
    return out


# (component, chart, version, the workloads its rules find in another owner's release)
CASES = [
    (
        "cert-manager",
        "cert-manager",
        "v1.20.2",
        {"Deployment mp-cert-manager", "Deployment mp-cert-manager-webhook"},
    ),
    (
        "kube-prometheus-stack",
        "kube-prometheus-stack",
        "84.4.0",
        {"Deployment prometheus-operator"},
    ),
    (
        "node-feature-discovery",
        "node-feature-discovery",
        "0.19.0",
        {"Deployment mp-node-feature-discovery-master"},
    ),
    # The DRA driver's own kubelet plugin is no device plugin: none found.
    ("nvidia-dra-driver-gpu", "dra-driver-nvidia-gpu", "0.4.1", set()),
]


@pytest.mark.parametrize(("component", "chart", "version", "found"), CASES)
def test_another_owners_release_is_found_by_its_singleton_workloads(
    component: str, chart: str, version: str, found: set[str]
) -> None:
    workloads = foreign_workloads(chart, version)
    assert workloads, f"{chart} {version} renders no workload"
    conflicts = second_instances(component, workloads, frozenset())
    # "Deployment <namespace>/<name>" -> "Deployment <name>"
    named = {c.object.split(" ", 1)[0] + " " + c.object.rsplit("/", 1)[-1] for c in conflicts}
    assert named == found


def test_every_singleton_rule_is_tried_on_a_real_chart() -> None:
    assert {case[0] for case in CASES} == set(SINGLETONS)
