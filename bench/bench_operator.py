"""Benchmark: the operator against a real hub and target, with fixture charts.

Measures, with the real operator process, kube-apiservers and helm:

1. apply-to-Ready: from creating a ServingStack on the hub to Ready=True,
   i.e. every release installed and every object applied (fixture charts
   served on loopback, so this is the operator's own overhead plus helm);
2. address propagation: from the target Gateway's status.addresses being
   written to status.gateway.address on the hub (the goal is under 2 s; a
   poll like provider-kubernetes' takes about 30 s);
3. a no-op resync: requests per resync to the target, and writes to either
   API server (must be zero).

    python bench/bench_operator.py [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Secret
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.substrate import run_operator, serve_substrate  # noqa: E402

from modelplane.api.crd import servingstack_crd  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL  # noqa: E402
from modelplane.catalog.configuration import GATEWAY_NAME, NS  # noqa: E402
from modelplane.testenv import TestEnv, find_binaries, helm_environ  # noqa: E402

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")


class _Helm:
    def __init__(self, home: Path) -> None:
        self.binary, self.home = str(find_binaries()["helm"]), home

    def run(self, *args: str) -> None:
        subprocess.run(
            [self.binary, *args], env=helm_environ(self.home), check=True, capture_output=True
        )


def _until(check: Callable[[], bool], timeout: float = 180.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.02)
    raise TimeoutError("condition not reached")


def _writes(env: TestEnv) -> float:
    return sum(env.write_requests().values())


def _reads(env: TestEnv) -> float:
    return sum(env.request_total(verb=v) for v in ("GET", "LIST"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mp-bench-") as tmp_s:
        tmp = Path(tmp_s)
        hub_env, target_env = TestEnv(tmp / "hub"), TestEnv(tmp / "target")
        hub_env.start()
        target_env.start()
        substrate_gen = serve_substrate(_Helm(tmp / "helm"), tmp / "substrate")
        substrate = next(substrate_gen)
        proc = None
        try:
            hub = Client(KubeConfig.from_dict(hub_env.kubeconfig), field_manager="bench")
            target = Client(KubeConfig.from_dict(target_env.kubeconfig), field_manager="bench")
            hub.apply(CustomResourceDefinition.from_dict(servingstack_crd()))
            hub.apply(Namespace.from_dict({"metadata": {"name": "bench"}}))
            kubeconfig = yaml.safe_dump(target_env.kubeconfig)
            hub.apply(
                Secret.from_dict(
                    {
                        "metadata": {"name": "target", "namespace": "bench"},
                        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
                    }
                )
            )
            time.sleep(1)
            proc = run_operator(
                hub_env.kubeconfig_path, substrate, "bench", tmp / "op.log", "--resync", "2"
            )

            def ready() -> bool:
                status = hub.get(SS, "stack", namespace="bench").to_dict().get("status") or {}
                return any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in status.get("conditions", [])
                )

            hub.create(
                SS.from_dict(
                    {
                        "apiVersion": f"{API_GROUP}/{API_VERSION}",
                        "kind": KIND,
                        "metadata": {"name": "stack", "namespace": "bench"},
                        "spec": {
                            "secrets": [
                                {"type": "Kubeconfig", "name": "target", "key": "kubeconfig"}
                            ],
                            "gateway": {"hostname": "bench.example.com"},
                        },
                    }
                )
            )
            to_ready = _until(ready)
            print(f"apply-to-Ready (10 releases, GAIE manifests, 9 objects): {to_ready:.2f} s")

            def address() -> Any:
                status = hub.get(SS, "stack", namespace="bench").to_dict().get("status") or {}
                return (status.get("gateway") or {}).get("address")

            samples = []
            for i in range(args.runs):
                value = f"203.0.113.{10 + i}"
                start = time.monotonic()
                target.patch(
                    GATEWAY.Status,
                    GATEWAY_NAME,
                    {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
                    namespace=NS,
                    patch_type=PatchType.MERGE,
                )
                _until(lambda v=value: address() == v, timeout=30)
                samples.append(time.monotonic() - start)
            print(
                f"address propagation over {args.runs} runs: median "
                f"{statistics.median(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms"
            )

            time.sleep(4)
            hub_w, target_w, target_r = _writes(hub_env), _writes(target_env), _reads(target_env)
            window = 20.0
            time.sleep(window)
            log = (tmp / "op.log").read_text()
            resyncs = log.count("/api?") or log.count('/api "')
            reads = _reads(target_env) - target_r
            print(
                f"no-op resyncs every 2 s for {window:.0f} s: target reads {reads:.0f} "
                f"(~{reads / (window / 2):.0f} per resync), target writes "
                f"{_writes(target_env) - target_w:.0f}, hub writes "
                f"{_writes(hub_env) - hub_w:.0f}"
            )
            del resyncs
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(15)
            next(substrate_gen, None)
            hub_env.stop()
            target_env.stop()


if __name__ == "__main__":
    main()
