"""410 Gone forced into running watches, and bookmarks, against real API servers.

Issue 12, part 2. A watch re-armed from a resourceVersion etcd has compacted
away is answered 410; the operator must LIST again, watch from the new
resourceVersion, lose no change made meanwhile, and not turn the 410 into a
loop of LISTs. The target runs with ``--watch-cache=false``, so every watch
goes to etcd itself (with the watch cache a re-arm is served from the
cache's window and compaction does not reach it), and etcd is compacted
through its v3 JSON gateway (``POST /v3/kv/compaction``;
etcd.io/docs/v3.6/dev-guide/api_grpc_gateway/).

Bookmarks come from the watch cache (kubernetes.io/docs/reference/using-api/
api-concepts/#watch-bookmarks), so that test runs a Reflector in this process
against a target with the cache on, and records its requests.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.types import PatchType
from tests.integration.hubs import (
    Harness,
    HarnessOptions,
    client_for,
    private_env,
    requests_by_resource,
)
from tests.testenv import TestEnv
from tests.waiting import wait_for, wait_for_async

from modelplane.catalog.configuration import GATEWAY_NAME, NS
from modelplane.observe.watches import CONFIGMAPS, Link, Reflector, WatchKey

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
BOUND = 1.0  # seconds from a change on the target to the hub (issue 12)
# Kinds only the operator lists on the target: the API server's own
# informers relist after a compaction too, and are not counted.
OURS_ONLY = ("gateways", "gatewayclasses", "envoyproxies")
HARNESS = HarnessOptions(prefix="g", kubeconfig_secret=True)


@pytest.fixture
def uncached_target(tmp_path: Path) -> Iterator[TestEnv]:
    env = TestEnv(tmp_path / "uncached", extra_apiserver_args=("--watch-cache=false",))
    try:
        env.start()
        yield env
    finally:
        env.stop()


@pytest.fixture
def target(uncached_target: TestEnv) -> TestEnv:
    """The shared ``harness`` runs its operator against the uncached target."""
    return uncached_target


def _compact(env: TestEnv) -> int:
    """Compact etcd past every resourceVersion a watch now holds; returns the revision.

    A watch from version V asks for the revisions after V, so compacting at
    V + 1 leaves it be: two writes first (to a key outside the API server's
    /registry) put the compaction beyond the newest version anyone saw.
    """
    key = base64.b64encode(b"/modelplane-test/compaction").decode()
    with httpx2.Client(base_url=env.etcd_url, trust_env=False, timeout=30.0) as http:
        for n in range(2):
            value = base64.b64encode(str(n).encode()).decode()
            http.post("/v3/kv/put", json={"key": key, "value": value}).raise_for_status()
        answer = http.post("/v3/kv/range", json={"key": key})
        answer.raise_for_status()
        revision = int(answer.json()["header"]["revision"])
        http.post(
            "/v3/kv/compaction", json={"revision": str(revision), "physical": True}
        ).raise_for_status()
    return revision


def _lists(env: TestEnv) -> dict[str, float]:
    """LISTs of the operator-only kinds so far, from one scrape."""
    counts = requests_by_resource(env, ("LIST",))
    return {resource: counts.get(resource, 0.0) for resource in OURS_ONLY}


def _address(h: Harness) -> Any:
    return (h.status().get("gateway") or {}).get("address")


def _propagation(h: Harness, value: str) -> float:
    """Change the Gateway's address; seconds until the hub shows it (polled back to back)."""
    start = time.monotonic()
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )
    while _address(h) != value:
        if time.monotonic() - start > 60:
            break
    return time.monotonic() - start


def test_a_watch_re_armed_past_compaction_relists_and_misses_nothing(
    harness: Harness, uncached_target: TestEnv
) -> None:
    harness.create({})
    # Watches the server ends every 2-4 s, so each compaction is met by
    # re-arms within seconds; a resync far beyond every bound here.
    harness.start("--resync", "300", "--watch-timeout", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    assert _propagation(harness, "203.0.113.1") <= BOUND
    late: list[tuple[int, float]] = []

    # First round: compacted, then the change lands the moment the Gateway
    # watch has listed again, while it is re-armed from the LIST's version.
    before = _lists(uncached_target)
    _compact(uncached_target)
    wait_for(
        "the Gateways listed again after the compaction",
        lambda: _lists(uncached_target)["gateways"] > before["gateways"],
        deadline=60,
    )
    took = _propagation(harness, "203.0.113.2")
    if took > BOUND:
        late.append((0, round(took, 2)))

    # Then changes at random moments around further compactions: some land
    # between a watch's end and its re-arm, some in the 410's relist.
    rng = random.Random(410)
    rounds = 6
    for i in range(1, rounds):
        _compact(uncached_target)
        time.sleep(rng.uniform(0.0, 3.0))  # the moment of the change, not a wait
        took = _propagation(harness, f"203.0.113.{10 + i}")
        if took > BOUND:
            late.append((i, round(took, 2)))
    log = harness.log.read_text()
    assert not late, f"changes (round, seconds) later than {BOUND}s:\n{log[-3000:]}"
    # The 410 was met and answered with a LIST, not a watch from "now".
    assert "watch of gateway.networking.k8s.io/v1/gateways expired (410 Gone)" in log, log[-3000:]

    # No loop: a few LISTs per compaction at most while the rounds ran...
    during = {r: n - before[r] for r, n in _lists(uncached_target).items()}
    assert all(n <= 3 * rounds for n in during.values()), during
    # ... and, once the watches still on compacted versions have met their
    # 410 (within one re-arm), none at all through several re-arms (every
    # 2-4 s): a loop of LISTs would never fall quiet for 10 s.
    since, seen = time.monotonic(), _lists(uncached_target)

    def quiet_for_ten_seconds() -> bool:
        nonlocal since, seen
        counts = _lists(uncached_target)
        if counts != seen:
            since, seen = time.monotonic(), counts
        return time.monotonic() - since >= 10.0

    wait_for("10 s without a LIST of the operator's kinds", quiet_for_ten_seconds, deadline=60)


async def test_a_bookmark_moves_the_version_a_watch_is_re_armed_from(tmp_path: Path) -> None:
    with private_env(tmp_path / "cached") as env:
        client = client_for(env)
        for name in ("watched", "other"):
            client.create(Namespace.from_dict({"metadata": {"name": name}}))
        watches: list[dict[str, str]] = []

        async def record(request: httpx2.Request) -> None:
            if request.url.params.get("watch") == "true":
                watches.append(dict(request.url.params))

        http = httpx2.AsyncClient(
            base_url=env.server,
            verify=env.ssl_context(),
            headers={"Authorization": f"Bearer {env.token}"},
            event_hooks={"request": [record]},
        )
        changes: list[str] = []
        reflector = Reflector(
            http,
            WatchKey(CONFIGMAPS, namespace="watched"),
            Link(http, "bookmarks"),
            lambda _key, kind: changes.append(kind),
            label="bookmarks",
            # timeoutSeconds of 3 to 6: the watch cache sends a bookmark
            # ahead of a watch's deadline.
            watch_timeout=3.0,
        )

        async def watching() -> bool:
            return bool(watches)

        async def rearmed_after_bookmark() -> bool:
            return reflector.bookmarks > 0 and len(watches) > 1

        task = asyncio.create_task(reflector.run())
        try:
            await wait_for_async("the first watch", watching, deadline=30)
            listed_from = int(watches[0]["resourceVersion"])
            # A change elsewhere in the kind: not this watch's event, but the
            # version its bookmarks carry moves past it.
            other = await asyncio.to_thread(
                client.create,
                ConfigMap.from_dict({"metadata": {"name": "elsewhere", "namespace": "other"}}),
            )
            elsewhere = int(other.metadata.resourceVersion)  # type: ignore[union-attr]
            await wait_for_async(
                "a watch re-armed after a bookmark", rearmed_after_bookmark, deadline=60
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await http.aclose()
    assert all(w.get("allowWatchBookmarks") == "true" for w in watches), watches
    rearmed = int(watches[-1]["resourceVersion"])
    # Versions are opaque to clients; this API server's are etcd revisions,
    # which order. Without the bookmark the re-arm would start at the LIST's.
    assert rearmed >= elsewhere > listed_from, (listed_from, elsewhere, watches)
    assert changes == ["LIST"], changes  # nothing of the watched namespace changed
    assert reflector.lists == 1
