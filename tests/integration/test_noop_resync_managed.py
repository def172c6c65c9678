"""A no-op resync of a Managed stack still reads the target once, with the advisories on.

Managed mode now reads the advisory checks' facts too (issue 18: the
substrate contract in both modes, GPUsAvailable, status.target). They are
read with each direct read of the target and kept in between, as in
Provided mode, so a resync that finds nothing to do reads only the claim
and writes nothing. Counted with the API servers' own request counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions, requests_by_resource
from tests.testenv import TestEnv
from tests.waiting import wait_for

HARNESS = HarnessOptions(prefix="m", kubeconfig_secret=True)
NODE = "gpu-managed-0"


@pytest.fixture
def device_plugin_node(harness: Harness) -> Iterator[None]:
    """A Node that advertises the GPU extended resource: the DRA advisories warn of it."""
    harness.target.create(Node.from_dict({"metadata": {"name": NODE}}))
    harness.target.patch(
        Node.Status,
        NODE,
        {"status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}}},
        patch_type=PatchType.MERGE,
    )
    try:
        yield
    finally:
        harness.target.delete(Node, NODE)


def _reads(env: TestEnv) -> dict[str, float]:
    return requests_by_resource(env, ("GET", "LIST"))


def test_five_no_op_resyncs_of_a_managed_stack_read_only_the_claim(
    harness: Harness, target: TestEnv, hub_env: TestEnv, device_plugin_node: None
) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    # The advisories ran in Managed mode: the bare GPU node lacks NFD's label
    # (the first check a person fixes), and its device plugin is named too.
    gpus = harness.wait_condition("GPUsAvailable", "False", "NFDLabelsMissing", deadline=60)
    assert "DevicePluginAdvertises" in gpus["message"], gpus
    assert f"{NODE} advertises nvidia.com/gpu" in harness.condition("RequirementsMet")["message"]
    assert harness.status()["target"]["gpuNodes"] >= 1
    settled = harness.reconciles() + 3
    wait_for("three resyncs after Ready", lambda: harness.reconciles() >= settled, deadline=60)

    before = (_reads(target), target.write_requests(), hub_env.write_requests())
    count = harness.reconciles()
    wait_for("five resyncs", lambda: harness.reconciles() >= count + 5, deadline=60)
    after = (_reads(target), target.write_requests(), hub_env.write_requests())
    resyncs = harness.reconciles() - count
    grown = {r: n - before[0].get(r, 0.0) for r, n in after[0].items()}
    # The claim's GET, and nothing else: no Nodes, no ResourceSlices, no DaemonSets.
    assert {r for r, n in grown.items() if n} <= {"leases"}, grown
    assert grown.get("leases", 0.0) <= resyncs + 1, (grown, resyncs)

    def writes(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
        return {k: v - a.get(k, 0.0) for k, v in b.items() if v != a.get(k, 0.0)}

    assert writes(before[1], after[1]) == {}, "target writes"
    # No hub write: GPUsAvailable stood on the facts kept from the last direct read.
    assert writes(before[2], after[2]) == {}, "hub writes"
    assert harness.condition("GPUsAvailable")["reason"] == "NFDLabelsMissing"
