"""A no-op resync of a Provided stack reads the target once, as a Managed one does.

Provided mode adds the advisory checks' facts (Deployments, Nodes, Services,
ConfigMaps, ... of the whole cluster: eight LISTs or so). They are read with
each direct read of the target and kept in between, so a resync that finds
nothing to do reads no more than a Managed stack's (issue 12, part 3). Nor
does it read the stack's Secrets on the hub again: the credentials and the
connection made with them serve every resync until something changes
(issue 16). Counted with the API servers' own request counters.
"""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions, requests_by_resource
from tests.integration.substrate import (
    CHART_CRDS,
    MANIFEST_CRDS,
    crd,
)
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog import components as catalog

DEVICE_CLASS = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")
HARNESS = HarnessOptions(prefix="p", kubeconfig_secret=True)


def _bring_standard_substrate(h: Harness) -> None:
    """What a cluster owner runs: the Standard stack's CRDs and the GPU DeviceClass."""
    charts = {
        c.chart.chart
        for c in catalog.components_of_stack(catalog.Stack.STANDARD)
        if c.chart is not None
    }
    specs = [s for chart, specs in CHART_CRDS.items() if chart in charts for s in specs]
    for spec in specs + MANIFEST_CRDS["gaie-crds"]:
        h.target.apply(CustomResourceDefinition.from_dict(crd(*spec)), field_manager="owner")
    h.target.apply(
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


def _node_with_a_device_plugin(h: Harness) -> None:
    """A Node that advertises the GPU extended resource: an advisory warns of it."""
    h.target.create(Node.from_dict({"metadata": {"name": "gpu-0"}}))
    h.target.patch(
        Node.Status,
        "gpu-0",
        {"status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}}},
        patch_type=PatchType.MERGE,
    )


def _reads(env: TestEnv) -> dict[str, float]:
    return requests_by_resource(env, ("GET", "LIST"))


def test_five_no_op_resyncs_of_a_provided_stack_read_only_the_claim(
    harness: Harness, target: TestEnv, hub_env: TestEnv
) -> None:
    _bring_standard_substrate(harness)
    _node_with_a_device_plugin(harness)
    harness.create({"components": "Provided", "gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("RequirementsMet", "True", deadline=120)
    harness.wait_condition("Ready", "True", deadline=120)
    # The advisories read the cluster: the Node's device plugin is a warning.
    met = harness.condition("RequirementsMet")["message"]
    assert "gpu-0 advertises nvidia.com/gpu" in met, met
    # Past the reconciles that follow the configuration's own writes.
    settled = harness.reconciles() + 3
    wait_for("three resyncs after Ready", lambda: harness.reconciles() >= settled, deadline=60)

    before = (_reads(target), target.write_requests(), hub_env.write_requests(), _reads(hub_env))
    count = harness.reconciles()
    wait_for("five resyncs", lambda: harness.reconciles() >= count + 5, deadline=60)
    after = (_reads(target), target.write_requests(), hub_env.write_requests(), _reads(hub_env))
    resyncs = harness.reconciles() - count
    # Scraped after the last read, so a resync under way counts its reads
    # but not itself: the bound errs against the operator.
    grown = {r: n - before[0].get(r, 0.0) for r, n in after[0].items()}
    # The claim's GET, and nothing else: the rest comes from the watches' copy.
    assert {r for r, n in grown.items() if n} <= {"leases"}, grown
    assert grown.get("leases", 0.0) <= resyncs + 1, (grown, resyncs)
    hub_secrets = after[3].get("secrets", 0.0) - before[3].get("secrets", 0.0)
    assert hub_secrets == 0, f"{hub_secrets:.0f} reads of Secrets on the hub in {resyncs} resyncs"

    def writes(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
        return {k: v - a.get(k, 0.0) for k, v in b.items() if v != a.get(k, 0.0)}

    assert writes(before[1], after[1]) == {}, "target writes"
    # No hub write also means the warning stood through every resync: the
    # facts kept from the last direct read still feed the advisories.
    assert writes(before[2], after[2]) == {}, "hub writes"
    assert "gpu-0 advertises nvidia.com/gpu" in harness.condition("RequirementsMet")["message"]
