"""Benchmark: how many idle watches one HTTP/2 connection of httpx2 carries before it stalls.

Over HTTP/1.1 every open watch holds a TLS connection of its own, and those
connections are most of what a healthy target costs the operator
(bench_target_memory.py). HTTP/2 carries all of a target's watches on one
connection. This opens WATCHes one at a time on one
``httpx2.AsyncClient(http2=True)`` against a real kube-apiserver from the
testbin and, after each, sends a LIST on the same client: it prints how
many watches were open when a LIST first got no answer within --wait
seconds, or that none stalled. Once with httpcore2's own HTTP/2 connection,
once with the operator's (kube/http2.py), each in a process of its own.

    python bench/bench_http2_streams.py [--watches 16] [--wait 3]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testenv import TestEnv  # noqa: E402


async def _probe(env: TestEnv, watches: int, wait: float) -> None:
    async with httpx2.AsyncClient(
        base_url=env.server,
        verify=env.ssl_context(),
        headers={"Authorization": f"Bearer {env.token}"},
        http2=True,
        timeout=httpx2.Timeout(10.0, read=60.0),
    ) as client:

        async def watch() -> None:
            params = {"watch": "true", "resourceVersion": "0", "timeoutSeconds": "30"}
            async with client.stream("GET", "/api/v1/configmaps", params=params) as answer:
                async for _ in answer.aiter_lines():
                    pass

        tasks: list[asyncio.Task[None]] = []
        try:
            for n in range(1, watches + 1):
                tasks.append(asyncio.create_task(watch()))
                await asyncio.sleep(0.2)
                try:
                    answer = await asyncio.wait_for(client.get("/api/v1/namespaces"), wait)
                except TimeoutError:
                    print(f"with {n} watches open, a LIST got no answer within {wait:.0f} s")
                    return
                print(
                    f"with {n} watches open, a LIST answered {answer.status_code} "
                    f"over {answer.http_version}"
                )
            print(f"no stall with up to {watches} watches on one connection")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watches", type=int, default=16)
    parser.add_argument("--wait", type=float, default=3.0)
    parser.add_argument("--connection", choices=("httpcore2", "fair"), default=None)
    args = parser.parse_args()
    if args.connection is None:
        # The class is the process's, once put in place: each kind runs alone.
        for kind in ("httpcore2", "fair"):
            print(f"{kind}:", flush=True)
            subprocess.run(
                [sys.executable, __file__, "--watches", str(args.watches),
                 "--wait", str(args.wait), "--connection", kind],
                check=True,
            )  # fmt: skip
        return
    if args.connection == "fair":
        from modelplane.kube.http2 import use_fair_http2

        use_fair_http2()
    with tempfile.TemporaryDirectory(prefix="mp-http2-") as tmp:
        env = TestEnv(Path(tmp) / "target")
        env.start()
        try:
            asyncio.run(_probe(env, args.watches, args.wait))
        finally:
            env.stop()


if __name__ == "__main__":
    main()
