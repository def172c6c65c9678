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

import httpx2
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from tests.integration.hubs import (
    Harness,
    HarnessOptions,
    client_requests_by_resource,
    measure_resyncs,
)
from tests.integration.substrate import (
    provide_substrate,
)
from tests.waiting import wait_for

HARNESS = HarnessOptions(prefix="p", kubeconfig_secret=True)


def _node_with_a_device_plugin(h: Harness) -> None:
    """A Node that advertises the GPU extended resource: an advisory warns of it."""
    h.target.create(Node.from_dict({"metadata": {"name": "gpu-0"}}))
    h.target.patch(
        Node.Status,
        "gpu-0",
        {"status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}}},
        patch_type=PatchType.MERGE,
    )


def test_five_no_op_resyncs_of_a_provided_stack_read_only_the_claim(
    harness: Harness,
) -> None:
    provide_substrate(harness.target)
    _node_with_a_device_plugin(harness)
    harness.create({"components": "Provided", "gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("RequirementsMet", "True", deadline=120)
    harness.wait_condition("Ready", "True", deadline=120)
    # The advisories read the cluster: the Node's device plugin is a warning.
    met = harness.condition("RequirementsMet")["message"]
    assert "gpu-0 advertises nvidia.com/gpu" in met, met
    # Past the reconciles that follow the configuration's own writes.
    resyncs = measure_resyncs(harness)
    # The claim's GET, and nothing else: the rest comes from the watches' copy.
    assert set(resyncs.target_reads) <= {"leases"}, resyncs.target_reads
    assert resyncs.target_reads.get("leases", 0.0) <= resyncs.count + 1, resyncs
    hub_secrets = resyncs.hub_reads.get("secrets", 0.0)
    assert hub_secrets == 0, (
        f"{hub_secrets:.0f} reads of Secrets on the hub in {resyncs.count} resyncs"
    )
    assert resyncs.target_writes == {}, "target writes"
    # No hub write also means the warning stood through every resync: the
    # facts kept from the last direct read still feed the advisories.
    assert resyncs.hub_writes == {}, "hub writes"
    assert "gpu-0 advertises nvidia.com/gpu" in harness.condition("RequirementsMet")["message"]


def _reconciles(h: Harness) -> int:
    try:
        return h.reconciles()
    except httpx2.TransportError:  # its metrics not served yet
        return 0


def test_an_operator_restarted_on_a_settled_provided_target_lists_each_kind_once(
    harness: Harness,
) -> None:
    # What a new operator pod costs each healthy target of a fleet: its
    # first read of the target is its watches' first LISTs, not a direct
    # read made beside them (which listed every collection twice).
    provide_substrate(harness.target)
    harness.create({"components": "Provided", "gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "300")
    harness.wait_condition("Ready", "True", deadline=120)
    harness.stop()

    before = client_requests_by_resource(harness.target_env, ("LIST",))
    harness.start("--resync", "300")
    # Past its first reconcile and the ones the watches' LISTs wake.
    wait_for("two reconciles of the new operator", lambda: _reconciles(harness) >= 2, deadline=60)
    after = client_requests_by_resource(harness.target_env, ("LIST",))
    listed = {
        resource: n - before.get(resource, 0.0)
        for resource, n in after.items()
        if n > before.get(resource, 0.0)
    }
    assert harness.condition("Ready")["status"] == "True"
    # The operator's own configuration, listed by its watch and nothing else.
    for kind in ("gateways", "gatewayclasses", "envoyproxies", "issuers", "certificates"):
        assert listed.get(kind) == 1, listed
