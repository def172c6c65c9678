"""Benchmark: plan one ServingStack many times; median and p95 per plan.

    python bench/bench_plan.py [--runs N]

Plans a Standard and a Dynamo stack, each with a hostname and client CAs,
against nothing observed and against a target that serves every API. The
plan is pure, so a run is just CPU: no I/O, no clock inside.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from modelplane.api.models import ServingStack
from modelplane.catalog import configuration as cfg
from modelplane.catalog.components import COMPONENTS
from modelplane.plan import Observed, plan

PEM = "-----BEGIN CERTIFICATE-----\nMIIBbenchmark\n-----END CERTIFICATE-----\n"


def stack(kind: str) -> ServingStack:
    return ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": f"bench-{kind.lower()}", "namespace": "platform"},
            "spec": {
                "secrets": [{"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}],
                "stack": kind,
                "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
                "gateway": {
                    "hostname": "bench.example.com",
                    "clientCAs": [{"name": f"fleet-{i}", "certificate": PEM} for i in range(4)],
                },
            },
        }
    )


def serves_everything() -> Observed:
    apis: dict[str, dict[str, list[str]]] = {}
    objects: dict[str, list[str]] = {}
    for component in COMPONENTS:
        for r in component.requirements:
            apis.setdefault(r.api.group, {})[r.api.resource] = [r.api.version]
            name = getattr(r, "name", None)
            if name:
                key = r.api.key
                objects.setdefault(key, []).append(name)
    for api in (cfg.ISSUERS, cfg.CERTIFICATES, cfg.QUEUES, cfg.BUNDLES):
        apis.setdefault(api.group, {})[api.resource] = [api.version]
    return Observed(apis=apis, objects=objects)


def measure(s: ServingStack, observed: Observed | None, runs: int) -> list[float]:
    for _ in range(min(50, runs)):  # warm up
        plan(s, observed)
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        plan(s, observed)
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    cases: list[tuple[str, ServingStack, Any]] = []
    for kind in ("Standard", "Dynamo"):
        s = stack(kind)
        cases.append((f"{kind}, nothing observed", s, None))
        cases.append((f"{kind}, every API served", s, serves_everything()))
    print(f"plan() x {args.runs} per case (hostname + 4 clientCAs, GKE driver root)")
    print(f"{'case':<32} {'median us':>10} {'p95 us':>10}")
    for name, s, observed in cases:
        times = measure(s, observed, args.runs)
        print(f"{name:<32} {statistics.median(times):>10.1f} {p95(times):>10.1f}")


if __name__ == "__main__":
    main()
