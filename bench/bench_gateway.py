"""Benchmark: the gateway on a simulated cluster with the real Envoy Gateway and trust-manager.

A hub API server, a simulated target (kwok nodes, upstream CRDs, Envoy Gateway
v1.8.3, trust-manager v0.25.0) and the real operator in Provided mode at
``--resync 300``, so only the target watches can bring a change in time.
Measures:

1. create-to-Programmed: from creating the ServingStack on the hub to the
   Gateway ``Programmed=True``; the load balancer's address is written into
   the Envoy Service's ``status.loadBalancer`` the moment Envoy Gateway
   creates it (the cloud's part), and kwok runs the Envoy Deployment;
2. address propagation, ``--runs`` times: a new load-balancer address is
   written; Envoy Gateway copies it into ``Gateway.status.addresses`` (timed,
   for information) and the operator carries it to the hub's
   ``status.gateway.address``. The figure that counts is from Envoy Gateway
   writing it to the hub showing it (target: under 2 s).

    python bench/bench_gateway.py [--runs 20]

Needs the upstream CRD fixtures (see tests/integration/simcluster.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import (  # noqa: E402
    SS,
    client_for,
    install_servingstack_crd,
    put_kubeconfig,
    stack_body,
)
from tests.integration.simcluster import (  # noqa: E402
    NO_SUBSTRATE,
    PROVIDED_STANDARD,
    envoy_objects,
    gateway_pki,
    put_issued_secrets,
    simulated,
    upstream_dir,
)
from tests.integration.substrate import run_operator  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402

from modelplane.catalog.configuration import GATEWAY_NAME, NS  # noqa: E402

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
HUB_NS = "bench-gateway"


def _until(what: str, check: Callable[[], bool], timeout: float = 300.0) -> float:
    """Seconds until ``check`` holds, polling every 10 ms."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.01)
    raise TimeoutError(f"{what}: not reached in {timeout:.0f}s")


def _programmed(target: Client) -> bool:
    try:
        gw = target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    except Exception:
        return False
    conditions = (gw.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Programmed" and c["status"] == "True" for c in conditions)


def _gateway_addresses(target: Client) -> list[str]:
    gw = target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    return [a["value"] for a in (gw.get("status") or {}).get("addresses") or []]


def _hub_address(hub: Client) -> Any:
    return (
        (hub.get(SS, "stack", namespace=HUB_NS).to_dict().get("status") or {}).get("gateway") or {}
    ).get("address")


def _write_lb(target: Client, service: Service, ip: str) -> None:
    target.patch(
        Service.Status,
        service.metadata.name,  # type: ignore[union-attr]
        {"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}},
        namespace=service.metadata.namespace,  # type: ignore[union-attr]
        patch_type=PatchType.MERGE,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if not upstream_dir().is_dir():
        print(f"upstream CRD fixtures not found at {upstream_dir()}", file=sys.stderr)
        return 2
    crds = [upstream_dir() / f for f in PROVIDED_STANDARD]

    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        root = Path(tmp)
        hub_env = TestEnv(root / "hub").start()
        try:
            t0 = time.monotonic()
            with simulated(root / "target", crds=crds, gateway_controllers=True) as target_env:
                print(f"simulated target up in {time.monotonic() - t0:.1f}s")
                return _bench(root, hub_env, target_env, args.runs)
        finally:
            hub_env.stop()


def _bench(root: Path, hub_env: TestEnv, target_env: TestEnv, runs: int) -> int:
    hub, target = client_for(hub_env), client_for(target_env)
    install_servingstack_crd(hub, hub_env, deadline=60)
    hub.apply(Namespace.from_dict({"metadata": {"name": HUB_NS}}), field_manager="bench")
    put_kubeconfig(hub, HUB_NS, target_env.kubeconfig)
    pki = gateway_pki("west.example.com")
    put_issued_secrets(target, pki)
    log = root / "operator.log"
    proc = run_operator(hub_env.kubeconfig_path, NO_SUBSTRATE, HUB_NS, log, "--resync", "300")
    try:
        spec = {
            "components": "Provided",
            "gateway": {
                "hostname": "west.example.com",
                "clientCAs": [{"name": "fleet-a", "certificate": pki.client_ca_pem}],
            },
        }
        start = time.monotonic()
        hub.apply(SS.from_dict(stack_body(HUB_NS, "stack", spec)), field_manager="bench")
        services: list[Service] = []

        def service_created() -> bool:
            services[:] = envoy_objects(target, Service)
            return bool(services)

        _until("the Envoy Service", service_created)
        created = time.monotonic() - start
        _write_lb(target, services[0], "203.0.113.1")  # the cloud LB, at once
        _until("Gateway Programmed", lambda: _programmed(target))
        programmed = time.monotonic() - start
        print(f"create ServingStack -> Envoy Service created: {created:.2f}s")
        print(f"create ServingStack -> Gateway Programmed:    {programmed:.2f}s")
        _until("the first address on the hub", lambda: _hub_address(hub) == "203.0.113.1")

        eg_lat: list[float] = []
        hub_lat: list[float] = []
        for i in range(runs):
            ip = f"203.0.113.{i + 2}"
            written = time.monotonic()
            _write_lb(target, services[0], ip)
            eg = _until(
                "Gateway.status.addresses", lambda ip=ip: _gateway_addresses(target) == [ip]
            )  # type: ignore[misc]
            at_eg = written + eg
            _until("the hub's status.gateway.address", lambda ip=ip: _hub_address(hub) == ip)  # type: ignore[misc]
            hub_lat.append(time.monotonic() - at_eg)
            eg_lat.append(eg)

        def summary(xs: list[float]) -> str:
            q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
            return (
                f"median {statistics.median(xs) * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms, "
                f"max {max(xs) * 1000:.0f} ms"
            )

        print(
            f"Service LB status -> Gateway.status.addresses (Envoy Gateway), {runs} runs: "
            f"{summary(eg_lat)}"
        )
        print(
            f"Gateway.status.addresses -> hub status.gateway.address (operator), {runs} runs: "
            f"{summary(hub_lat)} (target < 2000 ms)"
        )
        print(yaml.safe_dump({"missed_2s": sum(1 for x in hub_lat if x > 2.0)}).strip())
        return 0
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    sys.exit(main())
