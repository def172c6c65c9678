"""Target changes reach the hub through the watches, from the moment a stack is Ready.

The operator runs with a resync period (300 s) far beyond every deadline
here, so a change that reaches the hub's status in time came through the
target watches: a change the watches missed would wait for the resync and
fail its deadline. The deadlines bound how long a test may hang; how fast a
change arrives is measured by bench/bench_operator.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from lightkube.types import PatchType
from tests.integration.hubs import client_for
from tests.integration.substrate import Substrate, run_operator
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, NS

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
# A real CA certificate: the models parse every clientCAs entry.
CA_PEM = (Path(__file__).parents[1] / "fixtures" / "client-cas" / "fleet-b.pem").read_text()
# Far beyond the deadlines below: only a watch can bring a change in time.
RESYNC = "300"
DEADLINE = 20.0
AT_ONCE = 0.01  # seconds between reads while waiting for the Ready moment


def _status(hub: Client, ns: str) -> dict[str, Any]:
    return dict(hub.get(SS, "stack", namespace=ns).to_dict().get("status") or {})


def _ready(status: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


def _moment_ready(hub: Client, ns: str, deadline: float) -> None:
    """Return within moments of Ready: the window being tested opens then.

    Polled at a hundredth of wait_for's usual step, so the change that
    follows lands within milliseconds of the Ready write, while the operator
    is still (re)arming its watches.
    """
    wait_for("Ready=True", lambda: _ready(_status(hub, ns)), deadline=deadline, interval=AT_ONCE)


def _set_address(target: Client, value: str) -> None:
    target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )


def _gateway(hub: Client, ns: str) -> dict[str, Any]:
    return dict(_status(hub, ns).get("gateway") or {})


@pytest.mark.parametrize("attempt", range(3))
def test_changes_from_the_moment_of_ready_reach_the_hub_without_a_resync(
    hub: Client,
    hub_env: TestEnv,
    target: TestEnv,
    substrate: Substrate,
    tmp_path: Path,
    attempt: int,
) -> None:
    # Each attempt is a fresh target and operator, so a fresh Ready moment:
    # the window is narrow, and one attempt alone would hit it only sometimes.
    ns = f"watch-window-{attempt}"
    hub.apply(Namespace.from_dict({"metadata": {"name": ns}}), field_manager="test")
    kubeconfig = yaml.safe_dump(target.kubeconfig)
    hub.apply(
        Secret.from_dict(
            {
                "metadata": {"name": "target-kubeconfig", "namespace": ns},
                "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
            }
        ),
        field_manager="test",
        force=True,
    )
    hub.apply(
        SS.from_dict(
            {
                "apiVersion": f"{API_GROUP}/{API_VERSION}",
                "kind": KIND,
                "metadata": {"name": "stack", "namespace": ns},
                "spec": {
                    "secrets": [
                        {"type": "Kubeconfig", "name": "target-kubeconfig", "key": "kubeconfig"}
                    ],
                    "gateway": {"hostname": "west.example.com"},
                },
            }
        ),
        field_manager="test",
        force=True,
    )
    log = tmp_path / "operator.log"
    proc = run_operator(hub_env.kubeconfig_path, substrate, ns, log, "--resync", RESYNC)
    target_client = client_for(target)
    try:
        _moment_ready(hub, ns, deadline=120)
        # Right at Ready: the address and trust-manager's CA ConfigMap appear.
        _set_address(target_client, "203.0.113.1")
        target_client.create(
            ConfigMap.from_dict(
                {"metadata": {"name": CLUSTER_CA, "namespace": NS}, "data": {"ca.crt": CA_PEM}}
            )
        )

        def arrived(value: str) -> bool:
            gateway = _gateway(hub, ns)
            return gateway.get("address") == value and gateway.get("caCertificate") == CA_PEM

        try:
            wait_for(
                "the address and CA set at Ready", lambda: arrived("203.0.113.1"), deadline=DEADLINE
            )
            # Then more changes, some back to back, so a second change lands
            # while the reconcile woken by the first is running.
            for i in range(2, 8):
                _set_address(target_client, f"203.0.113.{i}")
                if i % 2:
                    continue
                wait_for(
                    f"address 203.0.113.{i}",
                    lambda v=f"203.0.113.{i}": arrived(v),
                    deadline=DEADLINE,
                )
            wait_for("the last address", lambda: arrived("203.0.113.7"), deadline=DEADLINE)
        except AssertionError as err:
            raise AssertionError(f"{err}\nlog tail:\n{log.read_text()[-3000:]}") from None
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except Exception:
            proc.kill()
            proc.wait(5)
