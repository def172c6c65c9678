"""A DRA driver's uninstall and the pods holding its claims (plan.claims, actions.claim_wait).

The integration test (tests/integration/test_teardown_claims.py) holds a real
claim the real scheduler allocated; here, the rules on claims as any server
may send them, and the wait with a fake clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from modelplane.actions import claim_wait as claim_wait_module
from modelplane.actions.claim_wait import ClaimsHeld, ReinstallWaits, uninstall_wait
from modelplane.api.grammar import duration_seconds
from modelplane.catalog.components import BY_NAME
from modelplane.catalog.components._common import GPUS
from modelplane.faults import Fault
from modelplane.kube.errors import classify
from modelplane.plan import decisions, plan
from modelplane.plan.claims import (
    MAX_RESERVED,
    ClaimWait,
    Holder,
    claim_wait,
    held_message,
    holders,
    named,
    outline,
)
from modelplane.plan.teardown import UninstallRelease, teardown_steps
from modelplane.vocabulary import BlockedReason

from .conftest import StackFactory, installed

DRIVER = "gpu.nvidia.com"
OTHER = "dra.example.com"


def _claim(
    namespace: Any = "team-a",
    drivers: Any = (DRIVER,),
    reserved: Any = (("", "pods", "worker-0"),),
    name: str = "c",
) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": d, "pool": "n1", "device": "gpu-0"} for d in drivers]
    consumers = [
        {"apiGroup": g, "resource": r, "name": n, "uid": "u"} if g else {"resource": r, "name": n}
        for g, r, n in reserved
    ]
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": consumers},
    }


POD = Holder(namespace="team-a", name="worker-0")


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ([], []),
        # Allocated by the driver and reserved for a pod: held.
        ([_claim()], [POD]),
        # Another driver's claim: its uninstall is not this one's.
        ([_claim(drivers=(OTHER,))], []),
        # One of several devices is enough.
        ([_claim(drivers=(OTHER, DRIVER))], [POD]),
        # Allocated, reserved for nobody (the pod went, or it never started).
        ([_claim(reserved=())], []),
        # Not allocated yet: nothing was prepared on a node.
        ([{**_claim(), "status": {"reservedFor": [{"resource": "pods", "name": "p"}]}}], []),
        # A consumer that is not a core pod (a custom workload's object).
        ([_claim(reserved=(("apps.example.com", "pods", "x"), ("", "jobs", "y")))], []),
        # A shared claim: every pod it is reserved for, each once, sorted.
        (
            [
                _claim(reserved=(("", "pods", "b"), ("", "pods", "a"))),
                _claim(reserved=(("", "pods", "a"),), name="d"),
                _claim(namespace="team-0", reserved=(("", "pods", "z"),)),
            ],
            [
                Holder(namespace="team-0", name="z"),
                *(Holder(namespace="team-a", name=n) for n in "ab"),
            ],
        ),
        # Shapes a hostile server may send: skipped, never raised on.
        ([_claim(namespace=None), _claim(namespace=7), {"status": []}, {}], []),
        ([{**_claim(), "status": {"allocation": {"devices": {"results": "x"}}}}], []),
        (
            [
                {
                    **_claim(),
                    "status": {
                        **_claim()["status"],
                        "reservedFor": [None, "pods", {"resource": "pods", "name": 5}],
                    },
                }
            ],
            [],
        ),
        ([{**_claim(), "status": {**_claim()["status"], "reservedFor": {"a": 1}}}], []),
        ([_claim(drivers=[None])], []),
    ],
)
def test_the_pods_that_hold_the_drivers_claims(
    claims: list[dict[str, Any]], expected: list[Holder]
) -> None:
    assert holders(claims, DRIVER) == expected
    # What the LIST keeps of each claim says the same.
    assert holders([outline(c) for c in claims], DRIVER) == expected


def test_a_hostile_claims_names_are_shown_safely_and_its_lists_bounded() -> None:
    many = tuple(("", "pods", f"p{i}") for i in range(MAX_RESERVED + 50))
    [held] = holders([_claim(namespace="a\x1b[2J", reserved=many[:1])], DRIVER)
    assert "\x1b" not in str(held)
    assert len(holders([_claim(reserved=many)], DRIVER)) == MAX_RESERVED
    assert len(outline(_claim(reserved=many))["status"]["reservedFor"]) == MAX_RESERVED
    # The outline keeps nothing the rule does not read.
    assert set(outline(_claim())) == {"metadata", "status"}
    assert "spec" not in outline(_claim())


@pytest.mark.parametrize(
    ("held", "waited", "timeout", "expected"),
    [
        ([], 0, 600, ClaimWait.FREE),
        ([], 10_000, 600, ClaimWait.FREE),
        ([POD], 0, 600, ClaimWait.WAIT),
        ([POD], 599.9, 600, ClaimWait.WAIT),
        ([POD], 600, 600, ClaimWait.TIMED_OUT),
        # spec.claimWaitTimeout: 0s does not wait at all.
        ([POD], 0, 0, ClaimWait.TIMED_OUT),
    ],
)
def test_the_wait_lasts_while_pods_hold_claims_up_to_the_timeout(
    held: list[Holder], waited: float, timeout: float, expected: ClaimWait
) -> None:
    assert claim_wait(held, waited, timeout) is expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0), ("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400), ("1h0m5s", 3605)],
)
def test_duration_seconds(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds


def test_the_message_names_at_most_ten_pods_and_counts_the_rest() -> None:
    held = [Holder(namespace="ns", name=f"p{i:02}") for i in range(13)]
    assert named(held[:2]) == "ns/p00, ns/p01"
    assert named(held).endswith("ns/p09 and 3 more")
    message = held_message("mp-dra-driver-nvidia-gpu", DRIVER, held, "10m")
    assert "13 pods hold ResourceClaims allocated by gpu.nvidia.com" in message
    assert "spec.claimWaitTimeout (10m)" in message


def test_the_nvidia_dra_driver_is_the_catalogs_only_dra_driver() -> None:
    drivers = {c.name: c.dra_driver for c in BY_NAME.values() if c.dra_driver}
    assert drivers == {"nvidia-dra-driver-gpu": GPUS.driver}
    assert GPUS.driver == DRIVER


def test_teardown_marks_the_drivers_uninstall_only(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    steps = [s for s in teardown_steps(p, installed(p)) if isinstance(s, UninstallRelease)]
    marked = {s.release: s.dra_driver for s in steps if s.dra_driver}
    assert marked == {BY_NAME["nvidia-dra-driver-gpu"].release_name: DRIVER}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _reading(monkeypatch: pytest.MonkeyPatch, found: list[list[Holder]]) -> None:
    """The target's claims, one answer per read."""

    async def claim_holders(_client: object, driver: str) -> list[Holder]:
        assert driver == DRIVER
        return found.pop(0)

    monkeypatch.setattr(claim_wait_module, "claim_holders", claim_holders)


def test_a_reinstall_waits_for_the_pods_then_goes_on_and_starts_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, str, str]] = []
    clock = _Clock()
    waits = ReinstallWaits(clock=clock)
    _reading(monkeypatch, [[POD], [POD], [], [POD]])

    def check() -> None:
        asyncio.run(waits.check(None, "r", DRIVER, "10m", lambda *e: events.append(e)))

    with pytest.raises(ClaimsHeld) as held:
        check()
    assert "team-a/worker-0" in str(held.value)
    # The reconcile reads it as a wait of its own, retried soon.
    fault = classify(held.value)
    assert decisions.action_reason(fault) is BlockedReason.CLAIMS_HELD
    assert decisions.action_retry_delay(10, fault) == decisions.CLAIMS_RETRY.cap
    clock.now += 599
    with pytest.raises(ClaimsHeld):
        check()
    check()  # the pod is gone
    assert events == []
    # A wait the plan dropped (the release mended otherwise) is forgotten too.
    waits.since["other"] = 0.0
    waits.keep_only({"r"})
    assert "other" not in waits.since
    # The next wait is measured from its own start.
    clock.now += 10_000
    with pytest.raises(ClaimsHeld):
        check()


def test_past_the_timeout_the_uninstall_goes_on_and_says_who_still_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, str, str]] = []
    clock = _Clock()
    waits = ReinstallWaits(clock=clock)
    _reading(monkeypatch, [[POD], [POD]])

    def check() -> None:
        asyncio.run(waits.check(None, "r", DRIVER, "1m", lambda *e: events.append(e)))

    with pytest.raises(ClaimsHeld):
        check()
    clock.now += 60
    check()
    [(kind, reason, message)] = events
    assert (kind, reason) == ("Warning", "ClaimWaitTimeout")
    assert "spec.claimWaitTimeout (1m)" in message and "team-a/worker-0" in message


def test_teardown_waits_by_the_time_since_the_deletion_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _reading(monkeypatch, [[POD], [POD], []])
    events: list[tuple[str, str, str]] = []

    def wait(waited: float) -> str | None:
        return asyncio.run(
            uninstall_wait(None, "r", DRIVER, "10m", waited, lambda *e: events.append(e))  # type: ignore[arg-type]
        )

    assert "team-a/worker-0" in (wait(0) or "")
    assert wait(600) is None and [e[1] for e in events] == ["ClaimWaitTimeout"]
    assert wait(0) is None and len(events) == 1


def test_ready_says_claims_held_only_when_every_failure_is_one() -> None:
    held = {"a": BlockedReason.CLAIMS_HELD}
    assert decisions.failures_reason(held, frozenset(), held) is BlockedReason.CLAIMS_HELD
    both = {**held, "b": BlockedReason.ACTION_FAILED}
    assert decisions.failures_reason(both, frozenset(), both) is BlockedReason.ACTION_FAILED


def test_a_claims_wait_is_no_refusal() -> None:
    from modelplane.plan import progress

    assert not progress.action_refused(Fault(kind=classify(ClaimsHeld("x")).kind))
    assert progress.progress(False, BlockedReason.CLAIMS_HELD) is progress.Progress.RECONCILING
