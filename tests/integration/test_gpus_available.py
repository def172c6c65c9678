"""The substrate contract in Managed mode, on the simulated GPU cluster: GPUs and the Gateway.

One Managed install on ``sim_nodes_target`` (two H200 nodes, one CPU node,
the fixture charts running their workloads under kwok), shared by the cases
in order, each putting back what it broke: GPUsAvailable and status.target
from the simulated nodes' ResourceSlices; the slices deleted and recreated
(kwok publishes none of its own, so they are recreated as the harness first
made them); the Gateway's Programmed condition set by hand through the
status subresource, as a controller would.

The advisories' facts are as fresh as the last direct read of the target,
so the operator runs with a short ``--relist``; the Gateway is among the
product's own watched objects, so Ready follows it on the watch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness, stack_gone
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.testenv.nodes import DEFAULT_LAYOUT, NodeLayout, _semver, h200, resource_slice
from tests.waiting import wait_for

from modelplane.api.models import API_GROUP, API_VERSION, PLURAL
from modelplane.catalog.configuration import GATEWAY_NAME, NS

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
SLICE = create_global_resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
GPU_NODES = [name for name, gpu in NodeLayout.parse(DEFAULT_LAYOUT).names() if gpu]
# Short enough that each case sees a direct read within seconds.
OPERATOR = ("--resync", "2", "--relist", "4")
DEADLINE = 90


@pytest.fixture(scope="module")
def stack(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Harness]:
    """One Managed stack on the simulated cluster, Ready, for every case of the module."""
    h = Harness(
        hub,
        hub_env,
        sim_nodes_target,
        workload_substrate,
        tmp_path_factory.mktemp("op"),
        "sim-gpus",
    )
    try:
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({})
        h.start(*OPERATOR)
        h.wait_condition("Ready", "True", deadline=600)
        yield h
        h.hub.delete(SS, "stack", namespace=h.ns)
        wait_for("the ServingStack gone", lambda: stack_gone(h.hub, h.ns), deadline=300)
    finally:
        h.stop()


def _gpus_true(h: Harness) -> dict[str, Any]:
    return h.wait_condition("GPUsAvailable", "True", "GPUsPublished", deadline=DEADLINE)


def test_gpus_available_with_the_count_and_status_target(stack: Harness) -> None:
    gpu = h200()
    c = _gpus_true(stack)
    assert c["message"] == f"2 GPUs on 2 nodes: {gpu.product_name} \u00d72", c
    target = stack.status()["target"]
    assert target["kubernetesVersion"].startswith("v1.34"), target
    assert (target["gpuNodes"], target["gpus"], target["otherDevices"]) == (2, 2, 0), target
    assert target["devices"] == [
        {
            "product": gpu.product_name,
            "count": 2,
            "memory": f"{gpu.memory_mib}Mi",
            "driverVersion": _semver(gpu.driver_version),
            "nodes": 2,
        }
    ]
    # The GPUs column, as `kubectl get ss -A` prints it: the server's own table.
    table = _table(stack)
    columns = [col["name"] for col in table["columnDefinitions"]]
    [row] = [r for r in table["rows"] if r["object"]["metadata"]["name"] == "stack"]
    assert row["cells"][columns.index("GPUs")] == 2, (columns, row["cells"])
    # GPUsAvailable is its own condition: Ready stays as it was.
    assert stack.condition("Ready")["status"] == "True"


def test_resource_slices_gone_then_back(stack: Harness) -> None:
    gpu = h200()
    _gpus_true(stack)
    for node in GPU_NODES:
        stack.target.delete(SLICE, resource_slice(node, gpu)["metadata"]["name"])
    try:
        c = stack.wait_condition(
            "GPUsAvailable", "False", "ResourceSlicesMissing", deadline=DEADLINE
        )
        for node in GPU_NODES:
            assert node in c["message"], c
        assert "no ResourceSlice of gpu.nvidia.com" in c["message"], c
        wait_for(
            "status.target counting no GPU",
            lambda: stack.status()["target"]["gpus"] == 0,
            deadline=DEADLINE,
        )
        assert stack.condition("Ready")["status"] == "True"
    finally:
        # kwok publishes no slices: made again as the harness first made them.
        for node in GPU_NODES:
            stack.target.apply(SLICE.from_dict(resource_slice(node, gpu)), force=True)
    _gpus_true(stack)
    assert stack.status()["target"]["gpus"] == 2


def test_gateway_not_programmed_then_programmed(stack: Harness) -> None:
    stack.wait_condition("Ready", "True", deadline=DEADLINE)
    _programmed(stack, "False", "AddressNotAssigned", "No addresses have been assigned")
    try:
        c = stack.wait_condition("Ready", "False", "GatewayNotProgrammed", deadline=DEADLINE)
        assert c["message"] == (
            f"Gateway {NS}/{GATEWAY_NAME} is not programmed: Programmed is False "
            "(AddressNotAssigned): No addresses have been assigned"
        ), c
    finally:
        _programmed(stack, "True", "Programmed", "")
    stack.wait_condition("Ready", "True", "Reconciled", deadline=DEADLINE)


def _programmed(h: Harness, status: str, reason: str, message: str) -> None:
    """Write the Gateway's Accepted and Programmed conditions, as its controller would."""
    now = "2026-01-01T00:00:00Z"
    conditions = [
        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""},
        {"type": "Programmed", "status": status, "reason": reason, "message": message},
    ]
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"conditions": [{**c, "lastTransitionTime": now} for c in conditions]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )


def _table(h: Harness) -> dict[str, Any]:
    with h.hub_env.http_client() as http:
        answer = http.get(
            f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{h.ns}/{PLURAL}",
            headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
        )
    answer.raise_for_status()
    table: dict[str, Any] = answer.json()
    return table
