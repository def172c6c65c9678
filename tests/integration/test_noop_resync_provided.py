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

import time
from typing import Any

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

from modelplane.catalog.configuration import (
    BUNDLES,
    CERTIFICATES,
    ENVOY_PROXIES,
    GATEWAY_CLASSES,
    GATEWAYS,
    ISSUERS,
)
from modelplane.kube.client import collection_path
from modelplane.wire import ApiRef

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


# The product's configuration kinds.
CONFIGURATION = (GATEWAYS, GATEWAY_CLASSES, ENVOY_PROXIES, ISSUERS, CERTIFICATES, BUNDLES)


def _lists(h: Harness, api: ApiRef) -> bool:
    with h.target_env.http_client() as http:
        return http.get(collection_path(api)).status_code == 200


def _quiet_lists(h: Harness) -> dict[str, float]:
    """The target's LISTs by resource, once no reconcile or LIST came for 3 s."""
    last: list[Any] = [None, 0.0]

    def quiet() -> bool:
        now = (_reconciles(h), client_requests_by_resource(h.target_env, ("LIST",)))
        if now != last[0]:
            last[:] = [now, time.monotonic()]
        return time.monotonic() - last[1] >= 3.0

    wait_for("the operator to be quiet for 3 s", quiet, deadline=60, interval=0.5)
    return dict(last[0][1])


def test_a_new_provided_stack_reads_its_own_writes_from_its_watches(
    harness: Harness,
) -> None:
    # What a fleet's start costs each target: the first reconcile writes the
    # product's configuration, and both what follows in it and the
    # reconcile its writes wake read those writes from the watches' copy.
    # Before, each listed every collection again (three LISTs of each kind).
    provide_substrate(harness.target)
    # A CRD just applied is not listed at once: until it is, the watches
    # of its kind are failing, and the first reconcile reads around them.
    for api in CONFIGURATION:
        wait_for(f"{api.resource} listed", lambda a=api: _lists(harness, a), deadline=60)
    before = client_requests_by_resource(harness.target_env, ("LIST",))
    harness.create({"components": "Provided", "gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "300")
    harness.wait_condition("Ready", "True", deadline=120)
    # Past the reconciles its writes wake: until the operator has been quiet
    # for 3 s (with --resync 300, nothing else wakes it).
    after = _quiet_lists(harness)
    listed = {
        resource: n - before.get(resource, 0.0)
        for resource, n in after.items()
        if n > before.get(resource, 0.0)
    }
    for api in CONFIGURATION:
        assert listed.get(api.resource) == 1, listed
