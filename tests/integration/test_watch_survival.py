"""Target watches that survive the real failure modes, and resyncs that cost almost nothing.

Issue 12, parts 2, 3 and 5, against real API servers. The operator runs at
``--resync 300`` wherever a change must arrive, so only the watches can bring
it in time: a missed event waits for the resync and fails the 1 s bound.
The bound is the issue's; the machine is shared, so a failure of it is
reported with the time measured, not loosened.
"""

from __future__ import annotations

import random
import time
from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions, requests_by_resource
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog.configuration import GATEWAY_NAME, NS

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
BOUND = 1.0  # seconds from a change on the target to the hub (issue 12)
READY_DEADLINE = 180.0
HARNESS = HarnessOptions(prefix="w", kubeconfig_secret=True)


def _ready(h: Harness) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in h.status().get("conditions", [])
    )


def _moment_ready(h: Harness) -> None:
    """Back-to-back polls, so the first change lands while the watches are being armed."""
    end = time.monotonic() + READY_DEADLINE
    while not _ready(h):
        if time.monotonic() >= end:
            raise AssertionError(f"not Ready after {READY_DEADLINE}s:\n{h.log.read_text()[-3000:]}")


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


def _propagation(h: Harness, value: str) -> float:
    """Change the address; seconds until the hub shows it (polled back to back)."""
    start = time.monotonic()
    _set_address(h, value)
    # Up to the resync, so a missed event shows as the time it took, not a timeout.
    while _address(h) != value:
        if time.monotonic() - start > 60:
            break
    return time.monotonic() - start


def test_thirty_changes_at_random_moments_each_reach_the_hub_within_a_second(
    harness: Harness,
) -> None:
    # Watches the server ends every 2-4 s: some changes land right after a
    # watch is re-armed, the moment a reconnect that restarts from "now"
    # would miss.
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "300", "--watch-timeout", "2")
    _moment_ready(harness)
    rng = random.Random(12)
    late: list[tuple[int, float]] = []
    for i in range(30):
        took = _propagation(harness, f"203.0.113.{10 + i}")
        if took > BOUND:
            late.append((i, round(took, 2)))
        time.sleep(rng.uniform(0.0, 1.5))
    assert not late, f"changes (index, seconds) later than {BOUND}s: {late}"


def test_a_target_restarted_after_a_minute_down_is_watched_again_at_once(
    harness: Harness, target: TestEnv
) -> None:
    harness.create({})
    harness.start("--resync", "300")
    _moment_ready(harness)
    assert _propagation(harness, "203.0.113.1") <= BOUND

    target.stop()
    # A minute unreachable: the reconcile says so, the watches wait.
    harness.wait_condition("Ready", "False", "TargetUnreachable", deadline=60)
    time.sleep(60)  # the outage itself, not a wait for a condition
    target.start()
    took = _propagation(harness, "203.0.113.2")
    log = harness.log.read_text()
    assert took <= BOUND, f"took {took:.2f}s after the server was back:\n{log[-3000:]}"
    # One line when the watches were lost and one when they came back, not
    # one per retry (a minute of retries would be sixty and more).
    assert log.count("watches lost") == 1, log[-3000:]
    assert log.count("answering again") == 1, log[-3000:]
    harness.wait_condition("Ready", "True", deadline=60)


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
