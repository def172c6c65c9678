"""A no-op resync of a Managed stack still reads the target once, with the advisories on.

Managed mode now reads the advisory checks' facts too (issue 18: the
substrate contract in both modes, GPUsAvailable, status.target). They are
read with each direct read of the target and kept in between, as in
Provided mode, so a resync that finds nothing to do reads only the claim
and writes nothing. Counted with the API servers' own request counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube.resources.core_v1 import Node
from tests.integration.hubs import Harness, HarnessOptions, measure_resyncs

HARNESS = HarnessOptions(prefix="m", kubeconfig_secret=True)
NODE = "gpu-managed-0"


@pytest.fixture
def gpu_node(harness: Harness) -> Iterator[None]:
    """A bare GPU Node: the DRA advisories warn that it lacks NFD's labels.

    It advertises no ``nvidia.com/gpu``: a device plugin holds the DRA
    driver back in Managed mode (plan.conflicts, tests/integration/test_conflicts.py).
    """
    harness.target.create(
        Node.from_dict({"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}})
    )
    try:
        yield
    finally:
        harness.target.delete(Node, NODE)


def test_five_no_op_resyncs_of_a_managed_stack_read_only_the_claim(
    harness: Harness, gpu_node: None
) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    # The advisories ran in Managed mode: the bare GPU node lacks NFD's label
    # (the first check a person fixes).
    harness.wait_condition("GPUsAvailable", "False", "NFDLabelsMissing", deadline=60)
    assert harness.status()["target"]["gpuNodes"] >= 1
    resyncs = measure_resyncs(harness)
    # The claim's GET, and nothing else: no Nodes, no ResourceSlices, no DaemonSets.
    assert set(resyncs.target_reads) <= {"leases"}, resyncs.target_reads
    assert resyncs.target_reads.get("leases", 0.0) <= resyncs.count + 1, resyncs
    assert resyncs.target_writes == {}, "target writes"
    # No hub write: GPUsAvailable stood on the facts kept from the last direct read.
    assert resyncs.hub_writes == {}, "hub writes"
    assert harness.condition("GPUsAvailable")["reason"] == "NFDLabelsMissing"
