"""Teardown waits for the pods holding the DRA driver's claims, names them, then completes.

A simulated GPU cluster of its own (kwok, the real kube-scheduler and
kube-controller-manager): the operator installs the NVIDIA DRA driver's
release (the workload stand-in chart, with the gpu.nvidia.com DeviceClass),
the GPU node publishes its ResourceSlice, and the real scheduler allocates a
pod's ResourceClaim from it and reserves it for the pod. Teardown is then
driven in-process one pass at a time, as tests/integration/test_teardown.py
does. The cluster is this module's, so what teardown deletes is no other
test's; the hub namespace is deleted at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Namespace, Pod, Secret
from tests.integration.hubs import (
    SS,
    client_for,
    ensure_namespace,
    put_kubeconfig,
    put_stack,
    stack_body,
)
from tests.integration.simcluster import gpu_claim_and_pod, simulated
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for

from modelplane.actions.helm import Helm
from modelplane.api.models import ServingStack
from modelplane.catalog.components import BY_NAME
from modelplane.catalog.components._common import GPUS
from modelplane.observe.writes import Writes
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.plan import plan
from modelplane.plan.model import ReleaseAction
from modelplane.vocabulary import BlockedReason

CLAIMS = create_namespaced_resource("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
DRIVER = BY_NAME["nvidia-dra-driver-gpu"]
TENANT = "team-a"
POD = "worker-0"
HUB_NS = "t-teardown-claims"


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """One GPU node and one CPU node, this module's alone."""
    with simulated(tmp_path_factory.mktemp("sim-claims"), nodes="gpu=1,cpu=1") as env:
        yield env


def _reserved_for(target: Client) -> list[str]:
    """The pods the claim is reserved for, once the scheduler allocated it to the driver."""
    status = target.get(CLAIMS, "gpu", namespace=TENANT).to_dict().get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    if not any(r.get("driver") == GPUS.driver for r in results):
        return []
    return [c["name"] for c in status.get("reservedFor") or [] if c.get("resource") == "pods"]


def _pod_gone(target: Client) -> bool:
    try:
        target.get(Pod, POD, namespace=TENANT)
    except ApiError as err:
        if err.status.code == 404:
            return True
        raise
    return False


def _driver_installed(target: Client) -> bool:
    """Whether Helm's storage on the target holds the driver's release."""
    labels = {"owner": "helm", "name": DRIVER.release_name}
    return bool(list(target.list(Secret, namespace=DRIVER.namespace, labels=labels)))


async def _install_the_driver(reconciler: StackReconciler, body: dict[str, Any]) -> None:
    """The driver's release alone, by the operator's own actions (records and all)."""
    stack = ServingStack.model_validate(body)
    current = plan(stack, None, reconciler.options.sources())
    [release] = [r for r in current.releases if r.component == DRIVER.name]
    assert release.action is ReleaseAction.INSTALL
    only = current.model_copy(
        update={"releases": [release], "objects": [], "manifests": [], "release_drift": []}
    )
    target = await reconciler.session.open(await reconciler.session.read(stack))
    try:
        installed = await reconciler.actions.act(only, target, Writes())
    finally:
        await target.close()
    assert installed, reconciler.component_failures.failures


async def test_teardown_waits_for_the_pod_holding_a_claim_and_names_it(
    hub: Client,
    hub_env: TestEnv,
    gpu_cluster: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
) -> None:
    target = client_for(gpu_cluster)
    ensure_namespace(hub, HUB_NS)
    put_kubeconfig(hub, HUB_NS, gpu_cluster.kubeconfig)
    put_stack(hub, stack_body(HUB_NS, "claims", {"claimWaitTimeout": "10m"}))
    body = dict(hub.get(SS, "claims", namespace=HUB_NS).to_dict())
    events: list[tuple[str, str, str]] = []
    hub_async = AsyncClient(KubeConfig.from_dict(hub_env.kubeconfig))
    reconciler = StackReconciler(
        hub_async,
        Helm(str(find_binaries()["helm"]), tmp_path / "helm-home", 60),
        OperatorOptions(chart_repository=workload_substrate.chart_repository),
        lambda *event: events.append(event),
    )
    try:
        await _install_the_driver(reconciler, body)
        target.apply(Namespace.from_dict({"metadata": {"name": TENANT}}))
        claim, pod = gpu_claim_and_pod(TENANT, POD)
        target.create(CLAIMS.from_dict(claim))
        target.create(Pod.from_dict(pod))
        # The real scheduler allocates the GPU the driver published and reserves it.
        wait_for("the claim reserved for the pod", lambda: _reserved_for(target), deadline=60)
        assert _reserved_for(target) == [POD]

        waiting = await reconciler.teardown(body, waited_seconds=0)
        assert waiting is not None and waiting.reason is BlockedReason.CLAIMS_HELD
        assert f"{TENANT}/{POD}" in waiting.message and "1 pod hold" in waiting.message
        assert _driver_installed(target)
        assert not [e for e in events if e[1] in ("Uninstalled", "ClaimWaitTimeout")]

        # The pod goes (kwok ends it at once); the controller lets the claim go.
        target.delete(Pod, POD, namespace=TENANT, grace_period=0)
        wait_for("the pod gone", lambda: _pod_gone(target), deadline=60)
        wait_for("the claim released", lambda: not _reserved_for(target), deadline=60)
        waiting = await reconciler.teardown(body, waited_seconds=1)
        assert waiting is None
        uninstalled = [e for e in events if e[1] == "Uninstalled"]
        assert [DRIVER.release_name in e[2] for e in uninstalled] == [True]
        assert not [e for e in events if e[1] == "ClaimWaitTimeout"]
        assert not _driver_installed(target)
    finally:
        await reconciler.close()
        await hub_async.close()
        with contextlib.suppress(ApiError):
            hub.delete(Namespace, HUB_NS)
