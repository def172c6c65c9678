"""The rollout as the operator carries it out: the fleet read from statuses, and each turn."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from modelplane.api.models import ServingStack
from modelplane.operator.rollout import Rollout
from modelplane.operator.status import Outcome
from modelplane.plan import plan
from modelplane.plan.observed import Observed
from modelplane.plan.rollout import RESUME_ANNOTATION, Member, Phase, Policy

from .conftest import installed, manifest

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KPS = "kube-prometheus-stack"


def _body(
    name: str,
    desired: str,
    installed: str,
    phase: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    body = manifest(components="Managed", versions={"prometheus": desired})
    body["metadata"] = {"name": name, "namespace": "fleet", "labels": labels or {}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    status: dict[str, Any] = {
        "components": [
            {"name": KPS, "mode": "Managed", "version": installed, "installedVersion": installed}
        ]
    }
    if phase is not None:
        status["rollout"] = {"phase": phase, "startedAt": "2026-01-01T00:00:00Z"}
    body["status"] = status
    return body


def test_two_stacks_of_one_process_never_both_take_the_last_slot() -> None:
    r = Rollout(Policy(max_concurrent=1))
    a, b = _body("a", "84.5.0", "84.4.0"), _body("b", "84.5.0", "84.4.0")
    r.observe(a)
    r.observe(b)
    first = r.begin(a, NOW)
    # b decides before any status of a's came back through the watch.
    second = r.begin(b, NOW)
    assert first.phase is Phase.UPGRADING and first.held == {}
    assert second.phase is Phase.PENDING
    assert second.held == {KPS: "84.4.0"}
    assert "a slot" in second.message


def test_an_upgrade_in_flight_on_the_hub_keeps_its_slot_across_a_restart() -> None:
    """A new process (or leader) reads the fleet's statuses before any stack's turn."""
    r = Rollout(Policy(max_concurrent=1))
    upgrading = _body("a", "84.5.0", "84.4.0", phase="Upgrading")
    waiting = _body("b", "84.5.0", "84.4.0")
    r.observe(upgrading)
    r.observe(waiting)
    assert r.begin(waiting, NOW).phase is Phase.PENDING
    # The one in flight goes on at its desired versions, its start kept.
    turn = r.begin(upgrading, NOW)
    assert turn.phase is Phase.UPGRADING and turn.held == {}
    assert turn.started == NOW


def test_a_failed_stack_on_the_hub_pauses_the_rest_and_a_resume_lets_them_go() -> None:
    r = Rollout(Policy(max_concurrent=2))
    failed = _body("canary", "99.0.0", "84.4.0", phase="Failed")
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(failed)
    paused = r.begin(other, NOW)
    assert paused.phase is Phase.PENDING and paused.paused_by == "fleet/canary"
    woken: list[str] = []
    r.wakers["fleet/b"] = lambda: woken.append("b")

    resumed = _body("canary", "99.0.0", "84.4.0", "Failed", annotations={RESUME_ANNOTATION: "1"})
    turn = r.begin(resumed, NOW)
    assert turn.phase is Phase.RESUMED and turn.resumed
    assert woken == ["b"]
    assert r.begin(other, NOW).phase is Phase.UPGRADING


def test_a_canary_goes_first() -> None:
    r = Rollout(Policy(max_concurrent=2, canary_selector="ring=canary"))
    canary = _body("c", "84.5.0", "84.4.0", labels={"ring": "canary"})
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(canary)
    r.observe(other)
    assert r.begin(other, NOW).phase is Phase.PENDING
    assert r.begin(canary, NOW).phase is Phase.UPGRADING


def test_finish_reports_installed_and_desired_and_the_condition() -> None:
    r = Rollout(Policy(max_concurrent=1))
    waiting = _body("b", "84.5.0", "84.4.0")
    r.observe(_body("a", "84.5.0", "84.4.0", phase="Upgrading"))
    turn = r.begin(waiting, NOW)
    status = {
        "observedGeneration": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}],
        "components": [{"name": KPS, "mode": "Managed", "version": "84.5.0"}],
    }
    out = r.finish(waiting, turn, Outcome(), status, NOW)
    up = next(c for c in out["conditions"] if c["type"] == "UpToDate")
    assert (up["status"], up["reason"]) == ("False", "UpgradePending")
    assert "kube-prometheus-stack 84.4.0 (desired 84.5.0)" in up["message"]
    assert out["components"][0]["installedVersion"] == "84.4.0"
    assert out["rollout"]["phase"] == "Pending"


def test_an_upgrade_not_ready_in_time_fails() -> None:
    r = Rollout(Policy(max_concurrent=1, ready_timeout=timedelta(seconds=60)))
    body = _body("a", "84.5.0", "84.4.0")
    turn = r.begin(body, NOW)
    assert turn.phase is Phase.UPGRADING
    assert r.judge_in("fleet/a", NOW) == 60.5
    status = {"conditions": [{"type": "Ready", "status": "False", "reason": "Progressing"}]}
    out = r.finish(body, turn, Outcome(), status, NOW + timedelta(seconds=61))
    up = next(c for c in out["conditions"] if c["type"] == "UpToDate")
    assert up["reason"] == "UpgradeFailed" and "60s" in up["message"]
    assert RESUME_ANNOTATION in up["message"]
    assert r.local["fleet/a"].phase is Phase.FAILED


def test_a_canary_edited_but_not_yet_reconciled_still_goes_first() -> None:
    """This process's record of the canary predates its edit; the watch's copy does not."""
    r = Rollout(Policy(max_concurrent=1, canary_selector="ring=canary"))
    ring = {"ring": "canary"}
    settled = _body("c", "84.4.0", "84.4.0", labels=ring)
    r.observe(settled)
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
    r.finish(settled, r.begin(settled, NOW), Outcome(), status, NOW)
    assert r.local["fleet/c"].phase is Phase.UP_TO_DATE
    # Both edits arrive; the other stack's daemon runs first.
    r.observe(_body("c", "84.5.0", "84.4.0", labels=ring))
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(other)
    turn = r.begin(other, NOW)
    assert turn.phase is Phase.PENDING and "canaries" in turn.message


def test_a_freed_slot_wakes_one_waiting_stack_a_pause_wakes_all(
    serve_everything: Callable[..., Observed],
) -> None:
    r = Rollout(Policy(max_concurrent=1))
    bodies = {n: _body(n, "84.5.0", "84.4.0") for n in ("a", "b", "c")}
    woken: list[str] = []
    for name, body in bodies.items():
        r.observe(body)
        r.wakers[f"fleet/{name}"] = lambda name=name: woken.append(name)
    turns = {n: r.begin(b, NOW) for n, b in bodies.items()}
    assert [t.phase for t in turns.values()] == [Phase.UPGRADING, Phase.PENDING, Phase.PENDING]
    woken.clear()
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
    done = {**ready, "components": [{"name": KPS, "mode": "Managed", "version": "84.5.0"}]}
    a = bodies["a"]
    # Everything of a's is in sync at its desired versions: Ready, done.
    stack = ServingStack.model_validate({k: v for k, v in a.items() if k != "status"})
    served = serve_everything()
    settled = plan(stack, installed(plan(stack, served), served))
    assert settled.work == []
    r.finish(a, turns["a"], Outcome(plan=settled), done, NOW)
    assert r.local["fleet/a"].phase is Phase.UP_TO_DATE
    assert woken == ["b"]

    woken.clear()
    turn = r.begin(bodies["b"], NOW)
    assert turn.phase is Phase.UPGRADING
    r.finish(bodies["b"], turn, Outcome(failures={KPS: "helm failed"}), ready, NOW)
    assert r.local["fleet/b"].phase is Phase.FAILED
    # A pause changes what every waiting stack says.
    assert woken == ["c"]


def test_a_settled_status_carries_no_null_to_write_again_and_again() -> None:
    """The hub drops nulls: one left in would make every resync's status differ."""
    r = Rollout(Policy())
    body = _body("a", "84.4.0", "84.4.0")
    body["status"]["rollout"] = {"phase": "UpToDate"}
    status = {
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}],
        "components": [{"name": "nfd", "mode": "Provided", "version": "1"}],
    }
    out = r.finish(body, r.begin(body, NOW), Outcome(), status, NOW)
    assert out["rollout"] == {"phase": "UpToDate"}
    assert out["components"] == [{"name": "nfd", "mode": "Provided", "version": "1"}]
    # What the hub holds and must lose is sent as null, once.
    body["status"]["rollout"] = {"phase": "UpToDate", "startedAt": "2026-01-01T00:00:00Z"}
    out = r.finish(body, r.begin(body, NOW), Outcome(), status, NOW)
    assert out["rollout"]["startedAt"] is None


def _naive_fleet(r: Rollout) -> list[Member]:
    """The fleet as the two records make it, rebuilt from scratch."""
    out = []
    for key in r.seen.keys() | r.local.keys():
        seen, mine = r.seen.get(key), r.local.get(key)
        if seen is None or mine is None:
            member = mine or seen
        else:
            member = Member(key, mine.phase, mine.canary or seen.canary, mine.behind or seen.behind)
        if member is not None:
            out.append(member)
    return sorted(out, key=lambda m: m.key)


def test_the_fleet_kept_stack_by_stack_is_the_one_the_records_make() -> None:
    # The fleet is kept up to date one stack at a time (rebuilding it for
    # every stack's turn was quadratic in the shard's stacks): after any mix
    # of watch events, turns, finishes and deletions it is what the watch's
    # and this process's records say, and who is woken follows from it.
    rng = random.Random(7)
    woken: list[str] = []
    r = Rollout(Policy(max_concurrent=2, canary_selector="ring=canary"))
    names = [f"s{i}" for i in range(12)]
    phases = [None, "Pending", "Upgrading", "Failed", "UpToDate"]
    for step in range(600):
        name = rng.choice(names)
        r.wakers.setdefault(f"fleet/{name}", lambda name=name: woken.append(name))
        labels = {"ring": "canary"} if rng.random() < 0.3 else {}
        body = _body(name, rng.choice(["84.5.0", "84.4.0"]), "84.4.0", rng.choice(phases), labels)
        action = rng.randrange(4)
        if action == 0:
            r.observe(body)
        elif action == 1:
            turn = r.begin(body, NOW)
            ready = rng.random() < 0.5
            status = {
                "observedGeneration": 1,
                "conditions": [{"type": "Ready", "status": str(ready), "reason": "x"}],
            }
            r.finish(body, turn, Outcome(), status, NOW + timedelta(seconds=step))
        elif action == 2:
            r.begin(body, NOW)
        else:
            r.forget(f"fleet/{name}")
        assert sorted(r.fleet(), key=lambda m: m.key) == _naive_fleet(r), step
    assert woken, "no stack was ever woken: the test did not reach a freed slot"
