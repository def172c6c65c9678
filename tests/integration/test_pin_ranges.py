"""Out-of-range versions against real API servers: the operator's status and events, and check.

The operator runs as a process against the session hub and this module's own
target, with a one-second resync so that "once, not on every resync" is
actually put to the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client, KubeConfig
from lightkube.config.client_adapter import ConnectionParams
from prometheus_client.parser import text_string_to_metric_families
from tests.integration import hubs
from tests.integration.hubs import SS, ensure_namespace, private_env, put_kubeconfig, stack_body
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for

from modelplane.checks.checker import check_results
from modelplane.kube.client import TargetClient
from modelplane.observe.facts import observe_for_check
from modelplane.pins import Stack
from modelplane.plan.model import RequirementStatus

NS = "pin-ranges"
DEADLINE = 90.0


@pytest.fixture(scope="module")
def target(testbin: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    with private_env(tmp_path_factory.mktemp("pin-ranges-target")) as env:
        yield env


def put_stack(hub: Client, envoy_gateway: str) -> None:
    spec = {"components": "Provided", "versions": {"envoyGateway": envoy_gateway}}
    hubs.put_stack(hub, stack_body(NS, "stack", spec))


def status(hub: Client) -> dict[str, Any]:
    return dict(hub.get(SS, "stack", namespace=NS).to_dict().get("status") or {})


def versions_condition(hub: Client, state: str, generation: int) -> dict[str, Any] | None:
    for c in status(hub).get("conditions", []):
        if (
            c["type"] == "VersionsSupported"
            and c["status"] == state
            and c.get("observedGeneration") == generation
        ):
            return dict(c)
    return None


def out_of_range_events(hub_env: TestEnv) -> list[str]:
    with hub_env.http_client() as http:
        items = http.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
    return [
        e["message"]
        for e in items
        if e["reason"] == "VersionOutOfRange" and e["type"] == "Warning"
        # One Event object may stand for several if anything counted them.
        for _ in range(int(e.get("count") or 1))
    ]


def reconciles(port: int, hub_env: TestEnv) -> float:
    """The operator's own count of its reconciles (a settled resync reads nothing of the target)."""
    response = hubs.scrape_metrics(port, hub_env.token)
    response.raise_for_status()
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "modelplane_reconciles_total"
    )


def test_operator_reports_an_out_of_range_pin_once_per_change(
    hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path
) -> None:
    ensure_namespace(hub, NS)
    put_kubeconfig(hub, NS, target.kubeconfig)
    put_stack(hub, "v1.9.0")
    log = tmp_path / "operator.log"
    metrics_port = hubs.free_port()
    operator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelplane.cli.main",
            "run",
            "--kubeconfig",
            str(hub_env.kubeconfig_path),
            "--namespace",
            NS,
            "--resync",
            "1",
            "--metrics-port",
            str(metrics_port),
            "--health-port",
            str(hubs.free_port()),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        # The operator finds helm only through MODELPLANE_HELM or PATH.
        env={**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])},
    )
    try:
        c = wait_for(
            "VersionsSupported=False",
            lambda: versions_condition(hub, "False", 1),
            deadline=DEADLINE,
        )
        assert c["reason"] == "OutOfRange"
        assert c["message"].startswith(
            "envoy-gateway v1.9.0 (spec.versions.envoyGateway) is outside the supported range"
        )
        components = {x["name"]: x for x in status(hub)["components"]}
        assert "outside the supported range" in components["envoy-gateway"]["message"]
        # Accepted: nothing about the pin turns Ready into an error.
        assert all(
            x["reason"] not in ("InvalidSpec", "ReconcileError") for x in status(hub)["conditions"]
        )
        wait_for("the event", lambda: out_of_range_events(hub_env), deadline=DEADLINE)

        # Several resyncs later there is still one event.
        seen = reconciles(metrics_port, hub_env)
        wait_for(
            "three more reconciles",
            lambda: reconciles(metrics_port, hub_env) >= seen + 3,
            deadline=DEADLINE,
            not_yet=(httpx2.HTTPError,),
        )
        assert len(out_of_range_events(hub_env)) == 1

        # Back in range: the condition clears and nothing is said.
        put_stack(hub, "v1.8.4")
        c = wait_for(
            "VersionsSupported=True", lambda: versions_condition(hub, "True", 2), deadline=DEADLINE
        )
        assert c["reason"] == "InRange"
        # Another out-of-range pin is a change: one more event, about it.
        put_stack(hub, "v1.9.1")
        wait_for(
            "a second event",
            lambda: len(out_of_range_events(hub_env)) == 2,
            deadline=DEADLINE,
        )
        assert "envoy-gateway v1.9.1" in " ".join(out_of_range_events(hub_env))
    except AssertionError as err:
        raise AssertionError(f"{err}\noperator log tail:\n{log.read_text()[-3000:]}") from None
    finally:
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(15)


def apply(target: TestEnv, path: str, body: dict[str, Any]) -> None:
    with target.http_client(timeout=30) as http:
        response = http.patch(
            path,
            params={"fieldManager": "pin-ranges-test", "force": "true"},
            content=json.dumps(body),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
    assert response.status_code in (200, 201), response.text


async def test_check_warns_when_the_running_envoy_gateway_is_out_of_range(
    target: TestEnv,
) -> None:
    apply(
        target,
        "/api/v1/namespaces/envoy-gateway-system",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "envoy-gateway-system"}},
    )

    def deployment(tag: str) -> dict[str, Any]:
        labels = {"app": "envoy-gateway"}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "envoy-gateway", "namespace": "envoy-gateway-system"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "envoy-gateway",
                                "image": f"docker.io/envoyproxy/gateway:{tag}",
                            }
                        ]
                    },
                },
            },
        }

    async def result() -> Any:
        config = KubeConfig.from_dict(target.kubeconfig).get()
        async with TargetClient(config, ConnectionParams(trust_env=False)) as client:
            observed = await observe_for_check(client, Stack.STANDARD)
        (found,) = [
            r
            for r in check_results(Stack.STANDARD, observed)
            if r.requirement == "the Envoy Gateway controller runs a supported version"
        ]
        return found

    path = "/apis/apps/v1/namespaces/envoy-gateway-system/deployments/envoy-gateway"
    apply(target, path, deployment("v1.9.0"))
    r = await result()
    assert r.status is RequirementStatus.WARNING
    assert "gateway:v1.9.0, outside the supported range" in r.message
    apply(target, path, deployment("v1.8.4"))
    assert (await result()).status is RequirementStatus.MET
