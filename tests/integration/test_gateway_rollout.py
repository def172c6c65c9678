"""The gateway keeps serving while its proxies roll, on the real Envoy Gateway controller.

The target is ``sim_target``: kwok's nodes and pods and Envoy Gateway v1.8.3,
in Provided mode. What rolls the proxies here is a stand-in for an Envoy
Gateway upgrade: the test writes a new proxy image into the product's
EnvoyProxy (``envoyDeployment.container.image``), the one thing an upgrade
changes in the proxies' pod (its new default proxy image). Envoy Gateway
turns that into a new pod template on its proxy Deployment, which rolls as
the EnvoyProxy the product composes says. Two watches, opened before the
change, record every write of the proxy Deployment's status and of the
Gateway's conditions: ``readyReplicas`` must never reach 0, and
``Programmed`` never turn False. The cloud load balancer's address is the
test's to write, as in test_gateway_controllers.py.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Service
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness
from tests.integration.simcluster import (
    ENVOY_NS,
    LB_ADDRESS,
    NO_SUBSTRATE,
    OWNING_GATEWAY,
    envoy_objects,
)
from tests.testenv import TestEnv
from tests.waiting import gone, wait_for

from modelplane.catalog.components.envoy_gateway import ENVOY_PROXY
from modelplane.catalog.configuration import ENVOY_PROXY_NAME, GATEWAY_NAME, NS

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
ENVOY_PROXY_KIND = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
# The next patch of the proxy image, as Envoy Gateway's next release would bring.
NEXT_IMAGE = ENVOY_PROXY.image.replace("v1.38.3", "v1.38.4")


class Recorder:
    """Every write of one kind's objects from a resourceVersion on, on a thread of its own."""

    def __init__(self, env: TestEnv, kind: Any, since: str, **selector: Any) -> None:
        self._client = Client(KubeConfig.from_file(env.kubeconfig_path))
        self.writes: list[dict[str, Any]] = []
        self._done: Callable[[dict[str, Any]], bool] = lambda _body: False
        self.finished = threading.Event()
        self._thread = threading.Thread(
            target=self._follow, args=(kind, since, selector), daemon=True
        )
        self._thread.start()

    def _follow(self, kind: Any, since: str, selector: dict[str, Any]) -> None:
        watch = self._client.watch(kind, resource_version=since, **selector)
        with contextlib.suppress(httpx2.HTTPError):  # closed under it: the test is over
            for _, obj in watch:
                body = obj.to_dict()
                self.writes.append(body)
                if self._done(body):
                    self.finished.set()

    def until(self, done: Callable[[dict[str, Any]], bool]) -> None:
        self._done = done
        if any(done(b) for b in list(self.writes)):
            self.finished.set()

    def close(self) -> None:
        self._client.close()


def _budgets(target: Client) -> list[PodDisruptionBudget]:
    """The PodDisruptionBudgets in Envoy Gateway's namespace: only its proxies' budget."""
    return list(target.list(PodDisruptionBudget, namespace=ENVOY_NS))


def _programmed(gateway: dict[str, Any]) -> str | None:
    conditions = (gateway.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Programmed"), None)


def _image(deployment: dict[str, Any]) -> str:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return str(next(c["image"] for c in containers if c["name"] == "envoy"))


def _rolled(deployment: dict[str, Any]) -> bool:
    """Every proxy pod is of the new template and ready, and no old one is left."""
    status = deployment.get("status") or {}
    want = deployment["spec"]["replicas"]
    return (
        _image(deployment) == NEXT_IMAGE
        and status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
        and status.get("replicas") == want
        and status.get("updatedReplicas") == want
        and status.get("readyReplicas") == want
        and status.get("availableReplicas") == want
    )


@pytest.fixture
def harness(
    hub: Client, hub_env: TestEnv, sim_target: TestEnv, tmp_path: Path
) -> Iterator[Harness]:
    h = Harness(hub, hub_env, sim_target, NO_SUBSTRATE, tmp_path, "sim-proxy-roll")
    try:
        yield h
    finally:
        # The target is the session's: leave no stack, claim or proxy behind.
        with contextlib.suppress(ApiError):
            h.hub.delete(SS, "stack", namespace=h.ns)
            wait_for("the ServingStack gone", lambda: gone(h.hub, SS, "stack", h.ns), deadline=120)
        h.stop()
        wait_for(
            "Envoy Gateway's proxies gone",
            lambda: not envoy_objects(h.target, Deployment) and not _budgets(h.target),
            deadline=120,
        )


def _serving(h: Harness) -> dict[str, Any]:
    """Bring the Gateway up and Programmed; the proxy Deployment, all ready."""
    t = h.target
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({"components": "Provided", "gateway": {}})
    h.start()

    def all_ready() -> dict[str, Any] | None:
        for d in envoy_objects(t, Deployment):
            body: dict[str, Any] = d.to_dict()
            status = body.get("status") or {}
            if status.get("readyReplicas") == body["spec"]["replicas"]:
                return body
        return None

    deployment = wait_for("the proxy Deployment ready (kwok)", all_ready, deadline=180)
    # Envoy Gateway writes the proxy's Service in a step of its own: kwok can
    # have the Deployment ready before it exists (seen on a loaded machine).
    (service,) = wait_for("the proxy Service", lambda: envoy_objects(t, Service), deadline=120)
    t.patch(
        Service.Status,
        service.metadata.name,
        {"status": {"loadBalancer": {"ingress": [{"ip": LB_ADDRESS}]}}},
        namespace=service.metadata.namespace,
        patch_type=PatchType.MERGE,
    )
    wait_for(
        "Gateway Programmed",
        lambda: _programmed(t.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()) == "True",
        deadline=120,
    )
    return deployment


def test_the_proxies_roll_with_one_always_ready_and_the_gateway_programmed(
    harness: Harness,
) -> None:
    t = harness.target
    deployment = _serving(harness)
    # What the product's EnvoyProxy composes, as Envoy Gateway made it.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    (pdb,) = _budgets(t)
    assert pdb.spec.maxUnavailable == 1
    assert _image(deployment) != NEXT_IMAGE

    proxies = Recorder(
        harness.target_env,
        Deployment,
        deployment["metadata"]["resourceVersion"],
        namespace=ENVOY_NS,
        labels={OWNING_GATEWAY: GATEWAY_NAME},
    )
    gateway_now = t.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    gateways = Recorder(
        harness.target_env,
        GATEWAY,
        gateway_now["metadata"]["resourceVersion"],
        namespace=NS,
        fields={"metadata.name": GATEWAY_NAME},
    )
    try:
        proxies.until(_rolled)
        # The upgrade's stand-in: the proxies' new image, written as a
        # manager of its own (the operator leaves a field it does not set).
        t.patch(
            ENVOY_PROXY_KIND,
            ENVOY_PROXY_NAME,
            {
                "spec": {
                    "provider": {
                        "kubernetes": {"envoyDeployment": {"container": {"image": NEXT_IMAGE}}}
                    }
                }
            },
            namespace=NS,
            patch_type=PatchType.MERGE,
            field_manager="test-upgrade",
        )
        wait_for(
            "the proxies rolled to the new image",
            proxies.finished.is_set,
            deadline=180,
            detail=lambda: str([(d.get("status") or {}) for d in proxies.writes[-3:]]),
        )
        # Envoy Gateway's own last word on the Gateway once the roll is over.
        wait_for(
            "Gateway Programmed after the roll",
            lambda: _programmed(t.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()) == "True",
            deadline=60,
        )
    finally:
        proxies.close()
        gateways.close()

    rolled = [d for d in proxies.writes if _image(d) == NEXT_IMAGE]
    assert rolled, "the watch saw no write of the new template"
    ready = [(d.get("status") or {}).get("readyReplicas", 0) for d in proxies.writes]
    seen = [
        {k: (d.get("status") or {}).get(k, 0) for k in ("replicas", "readyReplicas")}
        for d in proxies.writes
    ]
    # The roll surged: new pods ran beside the two before any old one went.
    assert max(s["replicas"] for s in seen) > 2, f"over the roll: {seen}"
    assert min(ready) >= 2, f"readyReplicas over the roll: {seen}"
    programmed = [_programmed(g) for g in gateways.writes]
    assert "False" not in programmed, f"Programmed over the roll: {programmed}"
    assert _programmed(t.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()) == "True"
