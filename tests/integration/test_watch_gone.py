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

The operator runs at ``--resync 300`` and every wait for a change is far
shorter, so a change that reaches the hub came through the watches; how
fast is measured by bench/bench_watch.py. The moments of the changes and
the "no loop" check are told by the target's own request counters (a
watch ended, a LIST served), not by the clock.
"""

from __future__ import annotations

import asyncio
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
from modelplane.kube.link import Link
from modelplane.kube.reflector import Reflector, WatchKey
from modelplane.observe.watches import CONFIGMAPS

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
# Far below the operator's --resync 300: a change that arrives within it came
# through a watch.
DEADLINE = 30.0
# Kinds only the operator lists and watches on the target: the API server's
# own informers relist after a compaction too, and are not counted.
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


def _served(env: TestEnv, verb: str) -> dict[str, float]:
    """Requests with ``verb`` for the operator-only kinds so far, from one scrape.

    ``apiserver_request_total`` counts a request as it completes: for a
    WATCH, when the server ends it (and the operator must re-arm it).
    """
    counts = requests_by_resource(env, (verb,))
    return {resource: counts.get(resource, 0.0) for resource in OURS_ONLY}


def _lists(env: TestEnv) -> dict[str, float]:
    return _served(env, "LIST")


def _address(h: Harness) -> Any:
    return (h.status().get("gateway") or {}).get("address")


def _arrives(h: Harness, value: str) -> None:
    """Change the Gateway's address on the target and wait until the hub's status shows it."""
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )
    wait_for(
        f"address {value} on the hub",
        lambda: _address(h) == value,
        deadline=DEADLINE,
        detail=lambda: f"log tail:\n{h.log.read_text()[-3000:]}",
    )


def _after_next(env: TestEnv, verb: str, what: str) -> None:
    """Return the moment the target has served one more ``verb`` of Gateways."""
    seen = _served(env, verb)["gateways"]
    wait_for(what, lambda: _served(env, verb)["gateways"] > seen, deadline=DEADLINE, interval=0.05)


def test_a_watch_re_armed_past_compaction_relists_and_misses_nothing(
    harness: Harness, uncached_target: TestEnv
) -> None:
    harness.create({})
    # Watches the server ends every 2-4 s, so each compaction is met by
    # re-arms within seconds; a resync far beyond every wait here.
    harness.start("--resync", "300", "--watch-timeout", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    _arrives(harness, "203.0.113.1")

    # Each round compacts, then changes the address at a moment the
    # target's counters tell: right after it listed the Gateways again (the
    # 410's relist; the watch is re-armed from the LIST's version), or right
    # after it ended a Gateway watch (the re-arm that meets the 410). A
    # relist after every compaction shows the 410 was answered with a LIST,
    # not a watch from "now".
    before = _lists(uncached_target)
    rounds = 6
    for i in range(rounds):
        uncached_target.compact_etcd()
        if i % 2 == 0:
            _after_next(uncached_target, "LIST", "the Gateways listed again after the compaction")
        else:
            _after_next(uncached_target, "WATCH", "a Gateway watch ended after the compaction")
        _arrives(harness, f"203.0.113.{10 + i}")

    # No loop: a few LISTs per compaction at most while the rounds ran...
    during = {r: n - before[r] for r, n in _lists(uncached_target).items()}
    assert during["gateways"] >= rounds // 2, during
    assert all(n <= 3 * rounds for n in during.values()), during
    # ... and, once the watches still on compacted versions have met their
    # 410 (within one re-arm), none at all while the server ends and the
    # operator re-arms the Gateway watch three times over: a loop of LISTs
    # would never fall quiet that long.
    lists, watches = _lists(uncached_target), _served(uncached_target, "WATCH")["gateways"]

    def three_re_arms_without_a_list() -> bool:
        nonlocal lists, watches
        now_lists = _lists(uncached_target)
        now_watches = _served(uncached_target, "WATCH")["gateways"]
        if now_lists != lists:
            lists, watches = now_lists, now_watches
        return now_watches - watches >= 3

    wait_for(
        "three Gateway watch re-arms without a LIST of the operator's kinds",
        three_re_arms_without_a_list,
        deadline=60,
        interval=0.5,
    )


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
            lambda _key, kind, _name: changes.append(kind),
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
