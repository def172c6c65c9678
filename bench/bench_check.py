"""Benchmark: what ``modelplane check`` costs against a real API server.

Starts a kube-apiserver + etcd (``tests.testenv``), loads it with every
CRD (and DeviceClass) under ../shared/fixtures/upstream/, and runs the full
check (discovery, every list, the plan) N times. Prints the HTTP requests one
check makes, counted at the client's transport and cross-checked with the API
server's ``apiserver_request_total``, and the median wall time. The same runs
against the project's minimal CRD fixtures show that the request count does
not grow with the number of CRDs.

    python bench/bench_check.py [--runs 20] [--upstream DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import AsyncClient
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig
from tests.testenv import TestEnv

from modelplane.checks.checker import check_results
from modelplane.kube.client import TargetClient
from modelplane.kube.discovery import served_apis
from modelplane.observe.facts import observe_for_check
from modelplane.pins import Stack

ROOT = Path(__file__).resolve().parent.parent
PROJECT_CRDS = ROOT / "tests" / "fixtures" / "crds"
UPSTREAM = ROOT.parent / "shared" / "fixtures" / "upstream"


class CountingTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        return await super().handle_async_request(request)


def load(env: TestEnv, files: list[Path]) -> dict[str, dict[str, Any]]:
    """Server-side apply every document; returns the CRDs by name (the last one wins)."""
    paths = {
        "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    }
    crds: dict[str, dict[str, Any]] = {}
    with env.http_client(timeout=120) as http:
        for path in files:
            for doc in yaml.safe_load_all(path.read_text()):
                if not isinstance(doc, dict) or doc.get("kind") not in paths:
                    continue
                response = http.patch(
                    f"{paths[doc['kind']]}/{doc['metadata']['name']}",
                    params={"fieldManager": "bench", "force": "true"},
                    content=json.dumps(doc),
                    headers={"Content-Type": "application/apply-patch+yaml"},
                )
                response.raise_for_status()
                if doc["kind"] == "CustomResourceDefinition":
                    crds[doc["metadata"]["name"]] = doc
    return crds


async def wait_served(client: AsyncClient, crds: dict[str, dict[str, Any]]) -> None:
    deadline = time.monotonic() + 120
    while True:
        apis = await served_apis(client)
        missing = [
            name
            for name, crd in crds.items()
            if not all(
                v["name"]
                in apis.get(crd["spec"]["group"], {}).get(crd["spec"]["names"]["plural"], [])
                for v in crd["spec"]["versions"]
                if v.get("served")
            )
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"discovery never served {', '.join(missing[:5])}")
        await asyncio.sleep(0.2)


async def measure(env: TestEnv, stack: Stack, runs: int) -> dict[str, Any]:
    config = KubeConfig.from_file(str(env.kubeconfig_path)).get()
    transport = CountingTransport(verify=env.ssl_context())
    params = ConnectionParams(trust_env=False, transport=transport)  # type: ignore[arg-type]
    client = TargetClient(config, params)
    times: list[float] = []
    per_run: list[int] = []
    server_delta: list[float] = []
    try:
        await check_results_once(client, stack)  # warm up the connection pool
        for _ in range(runs):
            transport.requests.clear()
            before = env.request_total()
            t0 = time.perf_counter()
            results = await check_results_once(client, stack)
            times.append(time.perf_counter() - t0)
            after = env.request_total()
            per_run.append(len(transport.requests))
            # The "after" scrape of /metrics is not a resource request; the
            # "before" one is counted by the time "after" reads the counters.
            server_delta.append(after - before)
        kinds = Counter(transport.requests)
    finally:
        await client.close()
    return {
        "requests": per_run[-1],
        "requests_all_runs_equal": len(set(per_run)) == 1,
        "server_counted": statistics.median(server_delta),
        "median_ms": statistics.median(times) * 1000,
        "min_ms": min(times) * 1000,
        "results": len(results),
        "paths": dict(kinds),
    }


async def check_results_once(client: AsyncClient, stack: Stack) -> list[Any]:
    return check_results(stack, await observe_for_check(client, stack))


def bench(name: str, files: list[Path], stack: Stack, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="modelplane-bench-") as tmp:
        env = TestEnv(Path(tmp) / "env")
        env.start()
        try:
            crds = load(env, files)

            async def go() -> dict[str, Any]:
                config = KubeConfig.from_file(str(env.kubeconfig_path)).get()
                async with TargetClient(config, ConnectionParams(trust_env=False)) as client:
                    await wait_served(client, crds)
                    apis = await served_apis(client)
                out = await measure(env, stack, runs)
                out["crds"] = len(crds)
                out["resources_discovered"] = sum(len(r) for r in apis.values())
                return out

            out = asyncio.run(go())
        finally:
            env.stop()
    out["name"] = name
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--upstream", type=Path, default=UPSTREAM)
    parser.add_argument("--stack", choices=[s.value for s in Stack], default="Dynamo")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    stack = Stack(args.stack)

    configs = [("minimal", sorted(PROJECT_CRDS.glob("*.yaml")))]
    if args.upstream.is_dir():
        configs.append(("upstream", sorted(args.upstream.glob("*/*.yaml"))))
    else:
        print(f"note: {args.upstream} is absent; only the minimal fixtures run", file=sys.stderr)
    outcomes = [bench(name, files, stack, args.runs) for name, files in configs]
    if args.json:
        print(json.dumps(outcomes, indent=2))
        return 0
    print(f"modelplane check, {stack} stack, {args.runs} runs each (kube-apiserver on loopback)")
    print(
        f"{'fixtures':10} {'CRDs':>5} {'resources':>9} {'requests':>8} {'server':>6} "
        f"{'median ms':>9} {'min ms':>7} {'results':>7}"
    )
    for o in outcomes:
        print(
            f"{o['name']:10} {o['crds']:>5} {o['resources_discovered']:>9} {o['requests']:>8} "
            f"{o['server_counted']:>6.0f} {o['median_ms']:>9.1f} {o['min_ms']:>7.1f} "
            f"{o['results']:>7}"
        )
    print(f"requests of one check ({outcomes[-1]['name']}):")
    for path, count in sorted(outcomes[-1]["paths"].items()):
        print(f"  {count} x {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
