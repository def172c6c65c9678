"""The scheduler probe: its decision (a table), what it reads and makes, and what it says.

A KAI scheduler can be Ready and bind nothing (KAI-Scheduler #1536): once
installed or upgraded, a probe pod must be bound within a bound, or the
component fails, and the staged rollout counts its upgrade as failed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from modelplane.operator.scheduler_probe import SchedulerProbe, proven_of
from modelplane.operator.status import Outcome, desired_status
from modelplane.plan import decisions, rollout
from modelplane.plan import scheduler_probe as sp
from modelplane.plan.model import ComponentPlan
from modelplane.plan.rollout import Member, Phase, Policy, Progress
from modelplane.plan.scheduler_probe import KAI, PodState, ProbePod, Step
from modelplane.vocabulary import BlockedReason, ReadyReason

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
BOUND = timedelta(seconds=120)
OLD, NEW = "v0.16.8", "v0.16.9"


def _pod(state: PodState, version: str | None = NEW, ago: float | None = 10.0) -> ProbePod:
    since = NOW - timedelta(seconds=ago) if ago is not None else None
    return ProbePod(state, version, since)


@pytest.mark.parametrize(
    ("installed", "proven", "pod", "step", "delete", "create"),
    [
        # Not settled at a version (work left, a failed action): nothing to prove.
        (None, OLD, sp.ABSENT, Step.IDLE, False, False),
        (None, None, _pod(PodState.PENDING), Step.IDLE, False, False),
        # Proven before: nothing, but a pod left behind goes.
        (NEW, NEW, sp.ABSENT, Step.PROVEN_BEFORE, False, False),
        (NEW, NEW, _pod(PodState.BOUND), Step.PROVEN_BEFORE, True, False),
        # A first install, and an upgrade: a probe is made.
        (NEW, None, sp.ABSENT, Step.WAIT, False, True),
        (NEW, OLD, sp.ABSENT, Step.WAIT, False, True),
        # A probe of the version before, or not stamped: replaced.
        (NEW, OLD, _pod(PodState.PENDING, version=OLD), Step.WAIT, True, True),
        (NEW, OLD, _pod(PodState.BOUND, version=OLD), Step.WAIT, True, True),
        (NEW, OLD, _pod(PodState.PENDING, ago=None), Step.WAIT, True, True),
        # Within the bound: wait.
        (NEW, OLD, _pod(PodState.PENDING, ago=119), Step.WAIT, False, False),
        # A clock behind the stamp is no time passed, not a failure.
        (NEW, OLD, _pod(PodState.PENDING, ago=-300), Step.WAIT, False, False),
        # Bound: proven, and the pod goes.
        (NEW, OLD, _pod(PodState.BOUND, ago=500), Step.PROVEN, True, False),
        # Past the bound: failed, the pod kept, so a mended scheduler is seen.
        (NEW, OLD, _pod(PodState.PENDING, ago=120), Step.FAILED, False, False),
        (NEW, None, _pod(PodState.PENDING, ago=3600), Step.FAILED, False, False),
    ],
)
def test_decide(
    installed: str | None,
    proven: str | None,
    pod: ProbePod,
    step: Step,
    delete: bool,
    create: bool,
) -> None:
    d = sp.decide(KAI, installed, proven, pod, NOW, BOUND)
    assert (d.step, d.delete, d.create) == (step, delete, create)


def test_a_failure_names_the_scheduler_the_pod_and_the_bound() -> None:
    d = sp.decide(KAI, NEW, OLD, _pod(PodState.PENDING, ago=121), NOW, BOUND)
    assert d.step is Step.FAILED
    for said in ("kai-scheduler v0.16.9", "did not bind", sp.POD_NAME, "modelplane-probe", "120s"):
        assert said in d.message
    assert d.check_in == sp.FAILED_POLL_SECONDS


def test_a_wait_is_looked_at_again_before_its_bound_ends() -> None:
    d = sp.decide(KAI, NEW, OLD, _pod(PodState.PENDING, ago=118), NOW, BOUND)
    assert d.check_in == 2.0
    assert "waiting for kai-scheduler v0.16.9" in d.message


def test_the_probe_pod_asks_for_nothing_in_the_probe_queue() -> None:
    body = sp.pod_body(KAI, NEW, NOW, "mirror.example/pause:3.10")
    spec = body["spec"]
    assert spec["schedulerName"] == "kai-scheduler"
    assert body["metadata"]["labels"]["kai.scheduler/queue"] == "modelplane-probe"
    assert [c.get("resources") for c in spec["containers"]] == [None]
    assert spec["containers"][0]["image"] == "mirror.example/pause:3.10"
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}]
    # What it is read back as: the version it proves, and since when.
    assert sp.read_pod(body) == ProbePod(PodState.PENDING, NEW, NOW)
    bound = {**body, "spec": {**spec, "nodeName": "gpu-0"}}
    assert sp.read_pod(bound).state is PodState.BOUND


@pytest.mark.parametrize(
    ("annotations", "read"),
    [
        (
            {sp.VERSION_ANNOTATION: NEW, sp.STARTED_ANNOTATION: "yesterday"},
            ProbePod(PodState.PENDING, NEW, None),
        ),
        ({sp.VERSION_ANNOTATION: 7}, ProbePod(PodState.PENDING, None, None)),
        ("not a map", ProbePod(PodState.PENDING, None, None)),
    ],
)
def test_a_pod_the_target_garbled_reads_as_unstamped(annotations: Any, read: ProbePod) -> None:
    assert sp.read_pod({"metadata": {"annotations": annotations}, "spec": {}}) == read
    assert sp.read_pod(None) == sp.ABSENT


def _component(name: str = "kai-scheduler", mode: str = "Managed", **kw: Any) -> ComponentPlan:
    return ComponentPlan(
        name=name, mode=mode, kind="chart", version=NEW, namespace="kai-scheduler", state="Ready",
        **kw,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("components", "busy", "installed"),
    [
        ([_component()], set(), NEW),
        # Held at its installed version while its upgrade waits for the rollout.
        ([_component(held_at=OLD)], set(), OLD),
        ([_component()], {"kai-scheduler"}, None),
        # A provided scheduler is its owner's; a Standard stack has none.
        ([_component(mode="Provided")], set(), None),
        ([_component(name="grove")], set(), None),
    ],
)
def test_installed_version(
    components: list[ComponentPlan], busy: set[str], installed: str | None
) -> None:
    assert sp.installed_version(KAI, components, busy) == installed


def test_the_version_proven_is_read_from_the_queue_annotation() -> None:
    assert proven_of({"metadata": {"annotations": {sp.PROVEN_ANNOTATION: NEW}}}) == NEW
    assert proven_of({"metadata": {"annotations": {sp.PROVEN_ANNOTATION: 1}}}) is None
    assert proven_of({"metadata": {}}) is None


def _probe(decision: sp.Decision) -> SchedulerProbe:
    probe = SchedulerProbe(lambda *event: None, BOUND)
    probe.last = decision
    return probe


def test_a_probe_out_keeps_the_component_from_ready_without_failing_it() -> None:
    waiting = sp.decide(KAI, NEW, OLD, sp.ABSENT, NOW, BOUND)
    outcome = _probe(waiting).into(Outcome(plan=None))
    assert outcome.proving == {"kai-scheduler": waiting.message}
    assert outcome.failures == {}
    assert outcome.check_in == sp.POLL_SECONDS
    assert decisions.component_state("kai-scheduler", {}, frozenset(), outcome.proving) == (
        decisions.ComponentState.PROVING
    )


def test_a_probe_past_its_bound_is_the_components_failure_with_its_own_reason() -> None:
    failed = sp.decide(KAI, NEW, OLD, _pod(PodState.PENDING, ago=300), NOW, BOUND)
    outcome = _probe(failed).into(Outcome(plan=None))
    assert outcome.failures == {"kai-scheduler": failed.message}
    assert outcome.failure_reasons == {"kai-scheduler": BlockedReason.SCHEDULER_NOT_BINDING}
    reason = decisions.failures_reason(outcome.failures, frozenset(), outcome.failure_reasons)
    assert reason is BlockedReason.SCHEDULER_NOT_BINDING
    # Beside another component's failed action, that one's reason leads.
    both = {**outcome.failure_reasons, "grove": BlockedReason.ACTION_FAILED}
    assert decisions.failures_reason(both, frozenset(), both) is BlockedReason.ACTION_FAILED


def test_ready_says_a_probe_out_as_progressing() -> None:
    outcome = Outcome(plan=None, proving={"kai-scheduler": "waiting for kai-scheduler"})
    ready = desired_status(outcome, 1)["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == (
        "Ready",
        "False",
        ReadyReason.PROGRESSING,
    )
    assert ready["message"] == "kai-scheduler: waiting for kai-scheduler"


def test_a_scheduler_that_binds_nothing_fails_the_upgrade_and_pauses_its_namespace() -> None:
    """The rollout's decision: a probe failure is a failed upgrade, as a helm failure is."""
    failed = sp.decide(KAI, NEW, OLD, _pod(PodState.PENDING, ago=300), NOW, BOUND)
    policy = Policy()
    phase, message = rollout.after_upgrade(
        Phase.UPGRADING,
        Progress(behind=True, ready=False, failed=failed.message),
        NOW - timedelta(minutes=3),
        NOW,
        policy,
    )
    assert phase is Phase.FAILED
    assert "kai-scheduler v0.16.9 did not bind" in message
    upgrade = frozenset({("kai-scheduler", NEW)})
    broken = Member("team/a", Phase.FAILED, wants=upgrade, aims=upgrade)
    waiting = Member("team/b", Phase.PENDING, wants=upgrade, aims=upgrade)
    verdict = rollout.may_start(waiting, [broken, waiting], policy)
    assert (verdict.start, verdict.reason, verdict.paused_by) == (
        False,
        rollout.Reason.PAUSED,
        "team/a",
    )
    # Once the mended scheduler binds the probe, the stack is Ready: the rollout goes on.
    phase, _ = rollout.after_upgrade(
        Phase.FAILED, Progress(behind=False, ready=True), NOW, NOW, policy
    )
    assert phase is Phase.UP_TO_DATE
