"""Target watches that survive the real failure modes, and resyncs that cost almost nothing.

Issue 12, parts 2, 3 and 5, against real API servers. The operator runs at
``--resync 300`` wherever a change must arrive, and every wait for a change
is far shorter than that, so a change that reaches the hub came through the
target watches: one the watches missed would wait for the resync and time
out. The deadlines bound how long a test may hang; how fast a change
arrives is measured by bench/bench_watch.py (through re-arms, an outage and
compaction) and bench/bench_operator.py.
"""

from __future__ import annotations

import random
from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import Harness, HarnessOptions, requests_by_resource
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog.configuration import GATEWAY_NAME, NS

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
RESYNC = "300"
# Far below RESYNC: a change that arrives within it came through a watch.
DEADLINE = 30.0
READY_DEADLINE = 180.0
# Short enough that the change made as the stack turns Ready lands while the
# watches are still being armed; still a pause between reads.
AT_ONCE = 0.01
HARNESS = HarnessOptions(prefix="w", kubeconfig_secret=True)


def _tail(h: Harness) -> str:
    return f"log tail:\n{h.log.read_text()[-3000:]}"


def _ready(h: Harness) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in h.status().get("conditions", [])
    )


def _moment_ready(h: Harness) -> None:
    """Return within moments of Ready, so the first change lands while the watches are armed."""
    wait_for(
        "Ready=True",
        lambda: _ready(h),
        deadline=READY_DEADLINE,
        interval=AT_ONCE,
        detail=lambda: _tail(h),
    )


def _set_address(h: Harness, value: str) -> None:
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )


def _address(h: Harness) -> Any:
    return (h.status().get("gateway") or {}).get("address")


def _arrives(h: Harness, value: str) -> None:
    """Change the Gateway's address on the target and wait until the hub's status shows it."""
    _set_address(h, value)
    wait_for(
        f"address {value} on the hub",
        lambda: _address(h) == value,
        deadline=DEADLINE,
        detail=lambda: _tail(h),
    )


def _gateway_watches_ended(env: TestEnv) -> float:
    """Gateway watches the target's API server has finished serving, by its own counter.

    ``apiserver_request_total`` counts a request when it completes, so for
    a watch this grows as the server ends it: the moment the operator must
    re-arm it from the last version it saw. Only the operator watches
    Gateways on a bare API server.
    """
    return requests_by_resource(env, ("WATCH",)).get("gateways", 0.0)


def _failed_tries(h: Harness, reason: str) -> float:
    """Reconciles the operator ended with ``reason``, from its own metrics."""
    text = h.scrape().text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "modelplane_reconciles_total" and sample.labels.get("result") == reason
    )


def test_thirty_changes_around_watch_re_arms_each_reach_the_hub_through_the_watches(
    harness: Harness, target: TestEnv
) -> None:
    # Watches the server ends every 2-4 s. Half the changes are made as
    # soon as the test sees the server has ended a Gateway watch (within
    # tens of milliseconds: around the re-arm, on the watch it starts), so
    # every one of them rides a fresh watch; the others back to back, while
    # the reconcile woken by the one before may still run. That a re-arm
    # starts from the last version seen, and so loses nothing made in the
    # gap of a few milliseconds, is pinned in tests/unit/test_watch_reflector.py.
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", RESYNC, "--watch-timeout", "2")
    _moment_ready(harness)
    _arrives(harness, "203.0.113.9")
    rng = random.Random(12)
    for i in range(30):
        if rng.random() < 0.5:
            ended = _gateway_watches_ended(target)
            wait_for(
                "the target to end a Gateway watch",
                lambda ended=ended: _gateway_watches_ended(target) > ended,
                deadline=DEADLINE,
                interval=AT_ONCE * 5,
            )
        _arrives(harness, f"203.0.113.{10 + i}")


def test_a_target_restarted_after_a_long_outage_is_watched_again(
    harness: Harness, target: TestEnv
) -> None:
    harness.create({})
    harness.start("--resync", RESYNC)
    _moment_ready(harness)
    _arrives(harness, "203.0.113.1")

    target.stop()
    harness.wait_condition("Ready", "False", "TargetUnreachable", deadline=60)
    # The outage lasts until the operator has tried the target three times
    # (backed off 10 and 20 s, jittered by up to 10%), so the watches sit
    # through a hundred failed probes, and the next try is 36 s or more
    # after the third: longer than DEADLINE, which starts later still, so
    # only a re-armed watch can bring the change below to the hub in time.
    wait_for(
        "three failed tries of the stopped target",
        lambda: _failed_tries(harness, "TargetUnreachable") >= 3,
        deadline=180,
        interval=0.5,
        detail=lambda: _tail(harness),
    )
    target.start()
    _arrives(harness, "203.0.113.2")
    harness.wait_condition("Ready", "True", deadline=DEADLINE)
    # Ready again, so no retry is due either: the watches alone carry on.
    _arrives(harness, "203.0.113.3")
    # The log line is the behaviour here: an outage is told once when the
    # watches are lost and once when they come back, not once per probe or
    # retry (a minute of them would be hundreds of lines).
    log = harness.log.read_text()
    assert log.count("watches lost") == 1, log[-3000:]
    assert log.count("answering again") == 1, log[-3000:]


def test_five_no_op_resyncs_read_the_target_at_most_twice_each_and_write_nothing(
    harness: Harness, target: TestEnv, hub_env: TestEnv
) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=READY_DEADLINE)
    # Past the reconciles that follow the install's own writes.
    settled = harness.reconciles() + 3
    wait_for("three resyncs after Ready", lambda: harness.reconciles() >= settled, deadline=60)

    def reads() -> float:
        return sum(requests_by_resource(target, ("GET", "LIST")).values())

    before = (reads(), target.write_requests(), hub_env.write_requests(), harness.reconciles())
    wait_for("five resyncs", lambda: harness.reconciles() >= before[3] + 5, deadline=60)
    after = (reads(), target.write_requests(), hub_env.write_requests(), harness.reconciles())
    resyncs = after[3] - before[3]
    read_count = after[0] - before[0]
    assert read_count <= 2 * resyncs, f"{read_count} target reads in {resyncs} resyncs"

    def grown(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
        return {k: v - a.get(k, 0.0) for k, v in b.items() if v != a.get(k, 0.0)}

    assert grown(before[1], after[1]) == {}, "target writes"
    assert grown(before[2], after[2]) == {}, "hub writes"
