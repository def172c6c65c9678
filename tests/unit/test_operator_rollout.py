"""The rollout as the operator carries it out: the fleet read from statuses, and each turn."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import typer

from modelplane.api.models import ServingStack
from modelplane.catalog.components import BY_NAME
from modelplane.cli.options import canary_namespaces
from modelplane.operator.rollout import MIRROR_RETRY_SECONDS, Canaries, MirrorAnswer, Rollout
from modelplane.operator.status import Outcome
from modelplane.plan import plan
from modelplane.plan.mirror_images import Verdict
from modelplane.plan.observed import Observed
from modelplane.plan.rollout import RESUME_ANNOTATION, Member, Phase, Policy, Reason
from modelplane.vocabulary import BlockedReason

from .conftest import installed, manifest

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KPS = "kube-prometheus-stack"
# The hub admin's canary namespace.
RING = frozenset({"ring"})
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}


def _body(
    name: str,
    desired: str | None,
    installed: str,
    phase: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "fleet",
) -> dict[str, Any]:
    """A stack at ``installed``; ``desired`` None: it follows the operator's default pin."""
    versions = {"versions": {"prometheus": desired}} if desired is not None else {}
    body = manifest(components="Managed", **versions)
    body["metadata"] = {"name": name, "namespace": namespace, "labels": labels or {}}
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


def test_a_failed_stack_on_the_hub_pauses_its_namespace_and_a_resume_lets_it_go() -> None:
    r = Rollout(Policy(max_concurrent=2))
    failed = _body("canary", "99.0.0", "84.4.0", phase="Failed")
    other = _body("b", "84.5.0", "84.4.0")
    elsewhere = _body("c", "84.5.0", "84.4.0", namespace="other-team")
    r.observe(failed)
    paused = r.begin(other, NOW)
    assert paused.phase is Phase.PENDING and paused.paused_by == "fleet/canary"
    # Another team's stack is not held by it: only fleet's owner could resume it.
    assert r.begin(elsewhere, NOW).phase is Phase.UPGRADING
    woken: list[str] = []
    r.wakers["fleet/b"] = lambda: woken.append("b")

    resumed = _body("canary", "99.0.0", "84.4.0", "Failed", annotations={RESUME_ANNOTATION: "1"})
    turn = r.begin(resumed, NOW)
    assert turn.phase is Phase.RESUMED and turn.resumed
    assert woken == ["b"]
    assert r.begin(other, NOW).phase is Phase.UPGRADING


def test_a_canary_goes_first() -> None:
    r = Rollout(Policy(max_concurrent=2, canary_namespaces=RING))
    canary = _body("c", "84.5.0", "84.4.0", namespace="ring")
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(canary)
    r.observe(other)
    # What it has seen already holds it back: no read of the hub is needed.
    assert not r.needs_canaries(other, NOW)
    assert r.begin(other, NOW).phase is Phase.PENDING
    assert not r.needs_canaries(canary, NOW)
    assert r.begin(canary, NOW).phase is Phase.UPGRADING


def test_labels_the_owner_sets_make_no_canary() -> None:
    r = Rollout(Policy(max_concurrent=1, canary_namespaces=RING))
    labelled = _body("b", "84.5.0", "84.4.0", labels={"ring": "canary", "canary": "true"})
    turn = r.begin(labelled, NOW, Canaries())
    assert not turn.canary and turn.phase is Phase.UPGRADING


def _settled(r: Rollout, body: dict[str, Any]) -> None:
    """``body`` reconciled and reported at what it runs, as the watch has it."""
    r.observe(body)
    r.finish(body, r.begin(body, NOW, Canaries()), Outcome(), READY, NOW)
    assert r.local[f"{body['metadata']['namespace']}/{body['metadata']['name']}"].phase is (
        Phase.UP_TO_DATE
    )


def test_a_stack_reconciled_before_the_canarys_edit_is_seen_still_waits_for_it() -> None:
    """The live race: kopf hands each stack's events to its own task, in any order.

    The canary was edited first, but the other stack's edit reached this
    process first and its reconcile began while the canary still looked
    settled. It reads the canaries from the hub before it takes the slot.
    """
    r = Rollout(Policy(max_concurrent=1, canary_namespaces=RING))
    _settled(r, _body("c", "84.4.0", "84.4.0", namespace="ring"))
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(other)
    # On what it has seen it would start: so it asks for the canaries first.
    assert r.needs_canaries(other, NOW)
    # Without them it does not start.
    assert r.begin(other, NOW).phase is Phase.PENDING
    failed = r.begin(other, NOW, Canaries(error="503 Service Unavailable"))
    assert failed.phase is Phase.PENDING and "503" in failed.message
    # The hub has the canary's edit, which the watch has not brought yet.
    canary = _body("c", "84.5.0", "84.4.0", namespace="ring")
    turn = r.begin(other, NOW, Canaries((canary,)))
    assert turn.phase is Phase.PENDING and turn.held == {KPS: "84.4.0"}
    assert turn.message.startswith("waiting for 1 canary upgrade(s) elsewhere")
    # The canary's edit arrives and it goes first; the other once it is done.
    r.observe(canary)
    assert r.begin(canary, NOW).phase is Phase.UPGRADING
    assert r.begin(other, NOW, Canaries((canary,))).phase is Phase.PENDING


def test_a_new_operators_defaults_move_the_canaries_first_in_any_order() -> None:
    """Every stack follows the default pin, which the new operator moved: all behind at once."""
    pin = BY_NAME[KPS].version
    bodies = [
        _body("a", None, "1.0.0"),
        _body("z", None, "1.0.0", namespace="ring"),
        _body("b", None, "1.0.0", namespace="team"),
    ]
    for order in ([0, 1, 2], [2, 1, 0], [0, 2, 1]):
        r = Rollout(Policy(max_concurrent=1, canary_namespaces=RING))
        # The watch has shown none of the canaries yet, or all of them.
        for i in order:
            if bodies[i]["metadata"]["namespace"] != "ring" or order[0] == 2:
                r.observe(bodies[i])
        fresh = Canaries((bodies[1],))
        for i in order:
            turn = r.begin(bodies[i], NOW, fresh if r.needs_canaries(bodies[i], NOW) else None)
            assert turn.desired[KPS] == pin
            assert (turn.phase is Phase.UPGRADING) is (i == 1), (order, i, turn)


def test_no_status_names_a_stack_of_another_namespace() -> None:
    r = Rollout(Policy(max_concurrent=1, canary_namespaces=RING))
    r.observe(_body("c", "99.0.0", "84.4.0", phase="Failed", namespace="ring"))
    other = _body("b", "84.5.0", "84.4.0")
    turn = r.begin(other, NOW, Canaries())
    assert turn.phase is Phase.PENDING and turn.paused and turn.paused_by is None
    out = r.finish(other, turn, Outcome(), READY, NOW)
    up = next(c for c in out["conditions"] if c["type"] == "UpToDate")
    assert up["reason"] == "RolloutPaused"
    assert "ring" not in up["message"] and "elsewhere" in up["message"]
    assert "pausedBy" not in out["rollout"]


def test_a_freed_slot_goes_to_the_stack_that_waited_longest() -> None:
    r = Rollout(Policy(max_concurrent=1))
    woken: list[str] = []
    running = _body("a", "84.5.0", "84.4.0")
    r.observe(running)
    assert r.begin(running, NOW).phase is Phase.UPGRADING
    # Seen waiting in this order; the last one waited since before a
    # restart, as its status says.
    waiting = [_body(n, "84.5.0", "84.4.0") for n in ("mm", "bb", "zz")]
    waiting[2]["status"]["conditions"] = [
        {
            "type": "UpToDate",
            "status": "False",
            "reason": "UpgradePending",
            "lastTransitionTime": "2025-12-31T00:00:00Z",
        }
    ]
    for body in waiting:
        name = body["metadata"]["name"]
        r.observe(body)
        r.wakers[f"fleet/{name}"] = lambda name=name: woken.append(name)
        assert r.begin(body, NOW).phase is Phase.PENDING
    # The slot frees (the upgrading stack goes): the oldest waiter is woken,
    # zz, which waited before a restart, though its name sorts last.
    r.forget("fleet/a")
    assert woken == ["zz"]
    # zz takes the slot and is done: then mm, seen waiting before bb.
    woken.clear()
    assert r.begin(waiting[2], NOW).phase is Phase.UPGRADING
    r.forget("fleet/zz")
    assert woken == ["mm"]


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
    r = Rollout(Policy(max_concurrent=1, canary_namespaces=RING))
    _settled(r, _body("c", "84.4.0", "84.4.0", namespace="ring"))
    # Both edits arrive; the other stack's daemon runs first.
    r.observe(_body("c", "84.5.0", "84.4.0", namespace="ring"))
    other = _body("b", "84.5.0", "84.4.0")
    r.observe(other)
    turn = r.begin(other, NOW)
    assert turn.phase is Phase.PENDING and "canary" in turn.message


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
            member = Member(
                key, mine.phase, mine.canary, mine.wants | seen.wants, mine.aims | seen.aims
            )
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
    r = Rollout(Policy(max_concurrent=2, canary_namespaces=RING))
    names = [f"s{i}" for i in range(12)]
    phases = [None, "Pending", "Upgrading", "Failed", "UpToDate"]
    for step in range(600):
        name = rng.choice(names)
        namespace = "ring" if int(name[1:]) % 3 == 0 else "fleet"
        r.wakers.setdefault(f"{namespace}/{name}", lambda name=name: woken.append(name))
        desired = rng.choice(["84.5.0", "84.4.0"])
        body = _body(name, desired, "84.4.0", rng.choice(phases), namespace=namespace)
        action = rng.randrange(4)
        if action == 0:
            r.observe(body)
        elif action == 1:
            turn = r.begin(body, NOW, Canaries())
            ready = rng.random() < 0.5
            status = {
                "observedGeneration": 1,
                "conditions": [{"type": "Ready", "status": str(ready), "reason": "x"}],
            }
            r.finish(body, turn, Outcome(), status, NOW + timedelta(seconds=step))
        elif action == 2:
            r.begin(body, NOW)
        else:
            r.forget(f"{namespace}/{name}")
        assert sorted(r.fleet(), key=lambda m: m.key) == _naive_fleet(r), step
        # Every waiting stack has its place in the queue, and no other.
        assert set(r.queued) == {m.key for m in r.fleet() if m.waiting}, step
    assert woken, "no stack was ever woken: the test did not reach a freed slot"


@pytest.mark.parametrize(
    ("canaries", "watched", "every", "out"),
    [
        ([], [], False, ()),
        (["ring", "ring", "alpha"], [], False, ("alpha", "ring")),
        (["ring"], ["ring", "team"], False, ("ring",)),
        (["ring"], ["team"], True, ("ring",)),
        # A namespace this operator does not serve has no stack in its rollout.
        (["ring"], ["team"], False, None),
    ],
)
def test_canary_namespaces_must_be_served(
    canaries: list[str], watched: list[str], every: bool, out: tuple[str, ...] | None
) -> None:
    if out is None:
        with pytest.raises(typer.BadParameter, match="ring: not watched"):
            canary_namespaces(canaries, watched, every)
    else:
        assert canary_namespaces(canaries, watched, every) == out


LACKS = MirrorAnswer(
    Verdict(True, BlockedReason.IMAGE_NOT_IN_MIRROR, "the image mirror lacks m/prom:v3; copy it in")
)


def test_a_stack_whose_upgrade_the_mirror_lacks_an_image_of_waits_its_slot_free() -> None:
    r = Rollout(Policy(max_concurrent=1), asks_mirror=True)
    a, b = _body("a", "84.5.0", "84.4.0"), _body("b", "84.5.0", "84.4.0")
    r.observe(a)
    r.observe(b)
    # Asked only of a stack that would start now.
    assert r.needs_mirror(a, NOW, None)
    turn = r.begin(a, NOW, None, LACKS)
    assert (turn.phase, turn.waits) == (Phase.PENDING, Reason.IMAGE_NOT_IN_MIRROR)
    assert turn.held == {KPS: "84.4.0"} and turn.retry_in == MIRROR_RETRY_SECONDS
    out = r.finish(a, turn, Outcome(), {"conditions": []}, NOW)
    up = next(c for c in out["conditions"] if c["type"] == "UpToDate")
    assert (up["status"], up["reason"]) == ("False", "ImageNotInMirror")
    assert "lacks m/prom:v3" in up["message"] and out["rollout"]["phase"] == "Pending"
    # Its slot is free: the next stack's images are asked about in turn.
    assert r.needs_mirror(b, NOW, None)
    assert r.begin(b, NOW, None, LACKS).phase is Phase.PENDING
    # Copied in: the first goes, and holds the one slot.
    assert r.begin(a, NOW, None, MirrorAnswer(Verdict(False))).phase is Phase.UPGRADING
    assert not r.needs_mirror(b, NOW, None)
    assert r.begin(b, NOW, None, None).message == "waiting for a slot: at most 1 upgrade(s) at once"


@pytest.mark.parametrize(
    ("mirror", "says"),
    [
        (None, "the image mirror to be asked"),
        (MirrorAnswer(error="target unreachable"), "could not be looked up (target unreachable)"),
    ],
)
def test_no_upgrade_starts_without_the_mirrors_say(mirror: MirrorAnswer | None, says: str) -> None:
    r = Rollout(Policy(max_concurrent=1), asks_mirror=True)
    turn = r.begin(_body("a", "84.5.0", "84.4.0"), NOW, None, mirror)
    assert (turn.phase, turn.waits) == (Phase.PENDING, Reason.PENDING)
    assert says in turn.message


def test_without_a_mirror_preflight_nothing_is_asked() -> None:
    r = Rollout(Policy(max_concurrent=1))
    body = _body("a", "84.5.0", "84.4.0")
    assert not r.needs_mirror(body, NOW, None)
    assert r.begin(body, NOW).phase is Phase.UPGRADING
