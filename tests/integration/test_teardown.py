"""Teardown against a real target: it waits for a wave held by finalizers, then gives up.

The operator's teardown is driven in-process here, one pass at a time, with
``waited_seconds`` given rather than read from a clock; the test plays the
gateway controller that holds (and later clears) finalizers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from tests.integration.hubs import (
    SS,
    client_for,
    crd_established,
    ensure_namespace,
    put_kubeconfig,
    put_stack,
    stack_body,
)
from tests.integration.substrate import CHART_CRDS, crd
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for, wait_for_async

from modelplane.actions.helm import Helm
from modelplane.catalog.configuration import GATEWAY_NAME, NS
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.stack_teardown import Waiting
from modelplane.plan.model import ObjectAction

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
GATEWAY_CLASS = create_global_resource(
    "gateway.networking.k8s.io", "v1", "GatewayClass", "gatewayclasses"
)
ENVOY_PROXY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
GATEWAY_KINDS = ("Gateway", "GatewayClass", "EnvoyProxy")
HELD = "example.com/held-by-the-test"
WAIT_LIMIT = 30.0


def _stack_on_hub(hub: Client, target: TestEnv) -> dict[str, Any]:
    ns = "t-teardown-waves"
    ensure_namespace(hub, ns)
    put_kubeconfig(hub, ns, target.kubeconfig)
    # Provided: the test brings the gateway APIs, and no release is involved.
    put_stack(hub, stack_body(ns, "waves", {"components": "Provided"}))
    return dict(hub.get(SS, "waves", namespace=ns).to_dict())


def _hold(client: Client, res: Any, name: str, namespace: str | None, held: bool) -> None:
    client.patch(
        res,
        name,
        {"metadata": {"finalizers": [HELD] if held else None}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


def _exists(client: Client, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        client.get(res, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True


def _deleting(client: Client, res: Any, name: str, namespace: str | None = None) -> bool:
    meta = client.get(res, name, namespace=namespace).metadata
    return meta is not None and meta.deletionTimestamp is not None


async def test_teardown_waits_for_each_wave_then_gives_up_and_goes_on(
    hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path
) -> None:
    # ``target`` is this test's own: teardown leaves the namespace
    # terminating for good (a bare API server has no namespace controller).
    client = client_for(target)
    for spec in CHART_CRDS["gateway-helm"]:
        client.apply(CustomResourceDefinition.from_dict(crd(*spec)), field_manager="owner")
    for spec in CHART_CRDS["gateway-helm"]:
        wait_for(spec[2], lambda s=spec: crd_established(client, f"{s[2]}.{s[0]}"), deadline=60)
    body = _stack_on_hub(hub, target)

    events: list[tuple[str, str, str]] = []
    hub_async = AsyncClient(KubeConfig.from_dict(hub_env.kubeconfig))
    try:
        reconciler = StackReconciler(
            hub_async,
            Helm(str(find_binaries()["helm"]), tmp_path / "helm-home", 60),
            OperatorOptions(teardown_wait_seconds=WAIT_LIMIT),
            lambda *event: events.append(event),
        )

        async def gateway_applied() -> bool:
            outcome = await reconciler.reconcile(body)
            assert outcome.blocked_reason is None, outcome.blocked_message
            assert outcome.plan is not None
            gateway = [o for o in outcome.plan.objects if o.object["kind"] in GATEWAY_KINDS]
            return len(gateway) == len(GATEWAY_KINDS) and all(
                o.action is ObjectAction.NONE for o in gateway
            )

        await wait_for_async("the gateway objects applied", gateway_applied, deadline=60)
        # The gateway controller's finalizer on the Gateway.
        _hold(client, GATEWAY, GATEWAY_NAME, NS, held=True)

        waiting = await reconciler.teardown(body, waited_seconds=0)
        assert waiting == Waiting(f"waiting for Gateway {GATEWAY_NAME} to be deleted")
        assert _deleting(client, GATEWAY, GATEWAY_NAME, NS)
        # The next wave waits for the Gateway: its class is untouched.
        assert not _deleting(client, GATEWAY_CLASS, "envoy")
        assert not _deleting(client, ENVOY_PROXY, "inference-gateway", NS)

        # The controller lets the Gateway go, and holds the GatewayClass.
        _hold(client, GATEWAY_CLASS, "envoy", None, held=True)
        _hold(client, GATEWAY, GATEWAY_NAME, NS, held=False)
        waiting = await reconciler.teardown(body, waited_seconds=1)
        assert waiting == Waiting("waiting for GatewayClass envoy to be deleted")
        assert not _exists(client, GATEWAY, GATEWAY_NAME, NS)
        assert not _deleting(client, ENVOY_PROXY, "inference-gateway", NS)
        assert not [e for e in events if e[1] == "TeardownTimeout"]

        # Past the limit teardown says so and goes on to the rest.
        waiting = await reconciler.teardown(body, waited_seconds=WAIT_LIMIT + 1)
        assert waiting is None
        [timeout] = [e for e in events if e[1] == "TeardownTimeout"]
        assert timeout[0] == "Warning" and "GatewayClass envoy" in timeout[2]
        assert _deleting(client, GATEWAY_CLASS, "envoy")
        assert not _exists(client, ENVOY_PROXY, "inference-gateway", NS)
        assert _deleting(client, Namespace, NS)
        # Provided: nothing was uninstalled, and the owner's CRDs stay.
        assert not [e for e in events if e[1] == "Uninstalled"]
        assert all(
            _exists(client, CustomResourceDefinition, f"{s[2]}.{s[0]}")
            for s in CHART_CRDS["gateway-helm"]
        )
    finally:
        await hub_async.close()


async def test_a_stack_made_while_the_namespace_is_deleted_waits_for_it(
    hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path
) -> None:
    # What another stack's teardown leaves for a while (here for good: a
    # bare API server has no namespace controller): modelplane-system
    # terminating, the claim released.
    client = client_for(target)
    client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    client.delete(Namespace, NS)
    wait_for("the namespace terminating", lambda: _deleting(client, Namespace, NS), deadline=30)
    body = _stack_on_hub(hub, target)

    hub_async = AsyncClient(KubeConfig.from_dict(hub_env.kubeconfig))
    try:
        reconciler = StackReconciler(
            hub_async,
            Helm(str(find_binaries()["helm"]), tmp_path / "helm-home", 60),
            OperatorOptions(),
            lambda *event: None,
        )
        outcome = await reconciler.reconcile(body)
    finally:
        await hub_async.close()
    # Valid credentials and a 403: a wait for the namespace, not a refusal.
    assert outcome.blocked_reason == "TargetNamespaceTerminating", outcome
    assert (outcome.blocked_message or "").startswith(
        "waiting for a namespace on the target to finish terminating"
    ), outcome.blocked_message
