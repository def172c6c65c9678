"""Benchmark: what a cloud identity costs a request, cached and minted.

    python bench/bench_identity.py [--mints N] [--requests N]

Mints Google tokens from a service account key against the loopback token
service of the tests (an RS256 assertion signed, a POST, google-auth in a
worker thread), then sends requests through ``TokenAuth`` on an in-memory
transport: with the token cached, and with every request answered 401 once
(one refresh and one retry each). Prints median, p95 and max.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.identity_services import google_token_service

from modelplane.credentials.identity import google
from modelplane.credentials.identity.base import Endpoints, TargetInfo
from modelplane.credentials.identity.cache import TokenSource
from modelplane.kube.transport import TokenAuth

TARGET = TargetInfo(cluster_name="bench", server="https://127.0.0.1:1")


def summary(name: str, seconds: list[float], unit: float = 1e3, label: str = "ms") -> None:
    ordered = sorted(seconds)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    print(
        f"{name}: n={len(ordered)} median {statistics.median(ordered) * unit:.3f} {label}, "
        f"p95 {p95 * unit:.3f} {label}, max {ordered[-1] * unit:.3f} {label}"
    )


async def mints(n: int) -> None:
    with google_token_service(lifetime=3600) as service:
        account = service.account("bench")
        minter = google.minter(service.key_json(account).encode(), TARGET, Endpoints())
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await minter.mint()
            times.append(time.perf_counter() - start)
    summary("mint (sign, POST, parse)", times)


async def requests(n: int, refuse_first: bool) -> None:
    with google_token_service(lifetime=3600) as service:
        account = service.account("bench")
        source = TokenSource(google.minter(service.key_json(account).encode(), TARGET, Endpoints()))
        await source.token()
        revoked: set[str] = set()

        def handler(request: httpx2.Request) -> httpx2.Response:
            if request.headers["Authorization"] in revoked:
                return httpx2.Response(401)
            return httpx2.Response(200, json={})

        async with httpx2.AsyncClient(
            transport=httpx2.MockTransport(handler),
            auth=TokenAuth(source),
            base_url="https://bench.invalid",
        ) as client:
            times = []
            for _ in range(n):
                if refuse_first:
                    # The target stops accepting the current token.
                    revoked.add(f"Bearer {await source.token()}")
                start = time.perf_counter()
                response = await client.get("/api")
                times.append(time.perf_counter() - start)
                assert response.status_code == 200
    name = "request after a 401 (refresh + retry)" if refuse_first else "request, token cached"
    summary(name, times)
    print(f"  tokens minted: {source.mints}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mints", type=int, default=30)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(mints(args.mints))
    asyncio.run(requests(args.requests, refuse_first=False))
    asyncio.run(requests(max(1, args.mints), refuse_first=True))


if __name__ == "__main__":
    main()
