"""The status a reconcile reports, computed from the plan and what went wrong."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from modelplane.api import status_limits
from modelplane.api.status_limits import CA_CERTIFICATE
from modelplane.plan import decisions, progress, pull_secrets
from modelplane.plan.decisions import ComponentState
from modelplane.plan.model import GatewayReport, Plan, RequirementStatus, Severity
from modelplane.plan.progress import Progress
from modelplane.untrusted import printable
from modelplane.vocabulary import (
    BlockedReason,
    CAReason,
    ConditionReason,
    ConditionType,
    PullSecretsReason,
    ReadyReason,
    RequirementsReason,
    VerifiedReason,
    VersionsReason,
)

READY = ConditionType.READY
RECONCILING = ConditionType.RECONCILING
STALLED = ConditionType.STALLED
REQUIREMENTS_MET = ConditionType.REQUIREMENTS_MET
VERSIONS_SUPPORTED = ConditionType.VERSIONS_SUPPORTED
TEARDOWN = ConditionType.TEARDOWN
# There only when a CA was found (published or not).
CA_PUBLISHED = ConditionType.CA_CERTIFICATE_PUBLISHED
# There only when pull Secrets are given. Never stops Ready: the Secret may
# come later, and the condition clears when it does.
PULL_SECRETS_PRESENT = ConditionType.PULL_SECRETS_PRESENT
# True with the count, False with the failing advisory's reason, Unknown
# before any GPU node joins. Never stops Ready: a pool that scales from zero
# is not a fault.
GPUS_AVAILABLE = ConditionType.GPUS_AVAILABLE
TARGET_VERIFIED = ConditionType.TARGET_VERIFIED
# Ready's reason when the hub refused the status the operator wrote.
STATUS_REFUSED = BlockedReason.STATUS_REFUSED
ACTION_FAILED = BlockedReason.ACTION_FAILED
# Ready's reason while the target cannot call an admission webhook yet.
WEBHOOK_NOT_READY = BlockedReason.WEBHOOK_NOT_READY
WAITING_FOR_WEBHOOK = ComponentState.WAITING_FOR_WEBHOOK


@dataclass
class Outcome:
    """What one reconcile found and did, beyond the plan itself."""

    plan: Plan | None = None
    # component name -> error message of its last failed action
    failures: dict[str, str] = field(default_factory=dict)
    # A problem that stopped the reconcile before or while planning.
    blocked_reason: BlockedReason | None = None
    blocked_message: str | None = None
    # The failed components whose failure is an admission webhook the target
    # could not call yet: a wait, not a fault of theirs.
    waiting_on_webhook: frozenset[str] = frozenset()
    # The failed components whose failure no retry clears (plan.progress).
    refused: frozenset[str] = frozenset()
    # Each failed component's reason (its event's), for Ready's.
    failure_reasons: dict[str, BlockedReason] = field(default_factory=dict)
    # Seconds until the next failed action is due again; None when none is.
    retry_after: float | None = None
    # Seconds until the next reconcile while a node agent rolls (operator.node_agents).
    requeue_after: float | None = None
    # What a rolling node agent's last step said, per component: its message.
    notes: dict[str, str] = field(default_factory=dict)
    # What is unsafe about this round's connection to the target (an
    # insecure-skip-tls-verify kubeconfig); None when it did not connect.
    connection_warnings: tuple[str, ...] | None = None
    # status.releases: what the operator's helm wrote of each release
    # (operator.release_records); None leaves the hub's as it is.
    releases: list[dict[str, Any]] | None = None
    # Components whose scheduler probe is out, within its bound, and what it
    # waits for (operator.scheduler_probe): not Ready yet, and not failed.
    proving: dict[str, str] = field(default_factory=dict)
    # Seconds until the probe is worth looking at again; None: no probe out.
    check_in: float | None = None


def condition(
    type_: ConditionType, ok: bool, reason: ConditionReason, message: str, generation: int | None
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


# Why Ready is False: a reason and a message, or None when this cause is absent.
Cause = Callable[[Outcome], tuple[ConditionReason, str] | None]


def _blocked(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    if outcome.blocked_reason is None:
        return None
    return outcome.blocked_reason, outcome.blocked_message or ""


def _failed(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    if not outcome.failures:
        return None
    failed = [f"{name}: {msg}" for name, msg in sorted(outcome.failures.items())]
    reason = decisions.failures_reason(
        outcome.failures, outcome.waiting_on_webhook, outcome.failure_reasons
    )
    return reason, "; ".join(failed + _unhealthy_parts(outcome.plan, set(outcome.failures)))


def _progressing(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    plan = outcome.plan
    if plan is None or not (plan.pending or not plan.requirements_met):
        return None
    pending = plan.pending or ["waiting for requirements"]
    # Upgraded, and only the node agents' restarts a node at a time left.
    rolling = bool(plan.work) and all(w.roll for w in plan.work)
    reason = ReadyReason.NODE_AGENTS_ROLLING if rolling else ReadyReason.PROGRESSING
    return reason, "; ".join(pending + _unhealthy_parts(plan))


def _proving(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    """A scheduler probe out: installed, and not yet seen to schedule (plan.scheduler_probe)."""
    if not outcome.proving:
        return None
    waits = [f"{name}: {message}" for name, message in sorted(outcome.proving.items())]
    return ReadyReason.PROGRESSING, "; ".join(waits + _unhealthy_parts(outcome.plan))


def _unhealthy(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    """A release's workload not available: the worst one's reason, each one named.

    The reason is plan.health's (``WorkloadMissing``, ``PodCrashLooping``,
    ``Unschedulable``, ...); the message names each such component's
    workloads and what their pods say.
    """
    plan = outcome.plan
    if plan is None or not plan.unhealthy:
        return None
    unhealthy = plan.unhealthy
    return unhealthy[0].reason, "; ".join(f"{h.component}: {h.message}" for h in unhealthy)


def _not_serving(outcome: Outcome) -> tuple[ConditionReason, str] | None:
    # Installed, and still not serving: the plan says why (Managed mode).
    problem = outcome.plan.not_serving if outcome.plan is not None else None
    return (problem.reason, problem.message) if problem is not None else None


# Ready's causes, first first, as cluster-api declares its conditions'
# summary: the first that holds gives Ready its reason; with none, the stack
# is Reconciled. A stop comes before a failed action, which comes before
# work left, a workload short of its target, and a Gateway not serving: the
# earlier cause keeps the later ones from being judged (or fixed).
READY_CAUSES: tuple[tuple[str, Cause], ...] = (
    ("blocked", _blocked),
    ("failed", _failed),
    ("progressing", _progressing),
    ("proving", _proving),
    ("unhealthy", _unhealthy),
    ("not serving", _not_serving),
)


def ready_condition(outcome: Outcome, generation: int | None) -> dict[str, Any] | None:
    """Ready, from the first of its causes that holds; None before anything was planned."""
    for _, cause in READY_CAUSES:
        found = cause(outcome)
        if found is not None:
            return condition(READY, False, *found, generation)
    if outcome.plan is None:
        return None
    message = "every release and object is in place"
    return condition(READY, True, ReadyReason.RECONCILED, message, generation)


def progress_conditions(
    ready: dict[str, Any], refused: bool, generation: int | None
) -> list[dict[str, Any]]:
    """Reconciling and Stalled, each with Ready's reason (plan.progress)."""
    state = progress.progress(ready["status"] == "True", ready["reason"], refused)
    reconciling, stalled = progress.said(state, ready["message"])
    reason = ready["reason"]
    return [
        condition(RECONCILING, state is Progress.RECONCILING, reason, reconciling, generation),
        condition(STALLED, state is Progress.STALLED, reason, stalled, generation),
    ]


def desired_status(outcome: Outcome, generation: int | None) -> dict[str, Any]:
    """The status without transition times (see ``merge_conditions``)."""
    conditions: list[dict[str, Any]] = []
    plan = outcome.plan
    ready = ready_condition(outcome, generation)
    if ready is not None:
        refused = bool(outcome.refused & set(outcome.failures))
        conditions += [ready, *progress_conditions(ready, refused, generation)]

    if outcome.connection_warnings is not None:
        conditions.append(verified_condition(outcome.connection_warnings, generation))
    status: dict[str, Any] = {"observedGeneration": generation}
    if outcome.releases is not None:
        status["releases"] = outcome.releases
    if plan is not None:
        unmet = plan.unmet
        if unmet:
            conditions.append(
                condition(
                    REQUIREMENTS_MET,
                    False,
                    RequirementsReason.UNMET,
                    "; ".join(r.message for r in unmet),
                    generation,
                )
            )
        else:
            checked = [r for r in plan.requirements if r.severity is Severity.REQUIRED]
            message = f"all {len(checked)} checked requirements are met"
            # Warnings never turn the condition False, but a person should see them.
            warnings = [
                r.message
                for r in plan.requirements
                if r.severity is Severity.ADVISORY and r.status is RequirementStatus.WARNING
            ]
            if warnings:
                message += f"; {len(warnings)} warning(s): " + "; ".join(warnings)
            conditions.append(
                condition(REQUIREMENTS_MET, True, RequirementsReason.MET, message, generation)
            )
        conditions.append(versions_condition(plan, generation))
        status["components"] = [
            {
                "name": c.name,
                "mode": c.mode,
                "version": c.version,
                "state": decisions.component_state(
                    c.name, outcome.failures, outcome.waiting_on_webhook, outcome.proving
                )
                or c.state,
                "message": outcome.failures.get(c.name)
                or outcome.proving.get(c.name)
                or outcome.notes.get(c.name, c.message),
            }
            for c in plan.components
        ]
        ca, ca_condition = _ca(plan.gateway, generation)
        if ca_condition is not None:
            conditions.append(ca_condition)
        gateway = {k: v for k, v in (("address", plan.gateway.address), ("caCertificate", ca)) if v}
        status["gateway"] = gateway or None
        if plan.image_pull_secrets:
            conditions.append(pull_secrets_condition(plan, generation))
        if plan.gpus is not None:
            gpus = plan.gpus
            # Three-valued, unlike the others: Unknown is not a failure here.
            conditions.append(
                {
                    **condition(GPUS_AVAILABLE, False, gpus.reason, gpus.message, generation),
                    "status": str(gpus.status),
                }
            )
        status["imageMirrors"] = _mirrors(plan.image_mirrors) or None
        # Kept as last read when this round did not read it: a quiet
        # resync says nothing new of the target, and must not blank it.
        if plan.target is not None:
            status["target"] = plan.target.model_dump(by_alias=True)
    status["conditions"] = conditions
    return status


def _unhealthy_parts(plan: Plan | None, named: set[str] | None = None) -> list[str]:
    """Each unhealthy component's message, after a failure or pending work.

    Ready has one reason, the first cause in its order, but its message
    names every component that keeps the stack from Ready: a DaemonSet
    short of its nodes must not hide behind another component's failure.
    """
    if plan is None:
        return []
    return [
        f"{h.component}: {h.message}" for h in plan.unhealthy if h.component not in (named or set())
    ]


def _mirrors(rules: list[str]) -> list[str]:
    """The rules in force; past the list's limit, the last item says how many more."""
    limit = status_limits.list_limit("imageMirrors")
    if len(rules) <= limit:
        return list(rules)
    return [*rules[: limit - 1], f"and {len(rules) - limit + 1} more"]


def pull_secrets_condition(plan: Plan, generation: int | None) -> dict[str, Any]:
    """Which pull Secrets the target lacks where the pods that name them run."""
    missing = plan.missing_pull_secrets
    if missing:
        message = pull_secrets.condition_message(missing)
        return condition(
            PULL_SECRETS_PRESENT, False, pull_secrets.PULL_SECRET_MISSING, message, generation
        )
    verb = "exists" if len(plan.image_pull_secrets) == 1 else "exist"
    message = f"{', '.join(plan.image_pull_secrets)} {verb} where every component's pods run"
    return condition(PULL_SECRETS_PRESENT, True, PullSecretsReason.PRESENT, message, generation)


def _ca(gateway: GatewayReport, generation: int | None) -> tuple[str | None, dict[str, Any] | None]:
    """The CA certificate to publish, and the condition that says whether it is.

    A CA is published whole or not at all: a cut PEM would look like a
    certificate to whoever reads it and fail only in their TLS handshake.
    """
    problem = gateway.ca_problem
    ca = gateway.ca_certificate
    limit = status_limits.string_limit(CA_CERTIFICATE)
    if problem is None and ca is not None and len(ca) > limit:
        problem = (
            f"the Bundle's certificates are {len(ca)} characters, more than the {limit} "
            "status.gateway.caCertificate holds"
        )
    if problem is not None:
        message = f"the CA certificate is not published: {problem}"
        return None, condition(CA_PUBLISHED, False, CAReason.NOT_PUBLISHED, message, generation)
    if ca:
        message = "status.gateway.caCertificate holds the CA that signs the gateway's certificate"
        return ca, condition(CA_PUBLISHED, True, CAReason.PUBLISHED, message, generation)
    return None, None


def bounded(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` as the hub takes it: every string printable and cut to its field's limit.

    The limits are the CRD's own (``api.status_limits``), so no value a target
    holds can make the hub refuse the write. Lists past their limit lose
    their tail; the CA certificate is kept whole or left out.
    """
    out: dict[str, Any] = _bound(status, "")
    return out


def _bound(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return {k: _bound(v, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        kept = value[: status_limits.list_limit(path)]
        return [_bound(v, f"{path}[]") for v in kept]
    if isinstance(value, str):
        limit = status_limits.string_limit(path)
        if path == CA_CERTIFICATE:
            return value if len(value) <= limit else None
        return printable(value, limit)
    return value


def refused_message(fields: list[str]) -> str:
    """Ready's message when the hub refused a status write."""
    named = ", ".join(fields) if fields else "no field named"
    return (
        f"the hub refused this ServingStack's status ({named}); what is shown here is "
        "not the current state: the operator goes on and writes it again"
    )


def verified_condition(warnings: tuple[str, ...], generation: int | None) -> dict[str, Any]:
    """An unchecked target certificate is allowed, but stated where tools look, not only once."""
    if warnings:
        return condition(
            TARGET_VERIFIED,
            False,
            VerifiedReason.INSECURE_SKIP_TLS_VERIFY,
            "; ".join(warnings),
            generation,
        )
    message = "the target's TLS certificate is checked on every connection"
    return condition(TARGET_VERIFIED, True, VerifiedReason.VERIFIED, message, generation)


def versions_condition(plan: Plan, generation: int | None) -> dict[str, Any]:
    """Pins outside their supported range are accepted; this says so where tools look."""
    if plan.version_warnings:
        message = "; ".join(w.message for w in plan.version_warnings)
        return condition(
            VERSIONS_SUPPORTED, False, VersionsReason.OUT_OF_RANGE, message, generation
        )
    return condition(
        VERSIONS_SUPPORTED,
        True,
        VersionsReason.IN_RANGE,
        "every pinned version is supported",
        generation,
    )


def merge_conditions(
    new: list[dict[str, Any]], old: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Keep lastTransitionTime where a condition's status did not change."""
    previous = {c.get("type"): c for c in old}
    merged = []
    for cond in new:
        before = previous.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            merged.append({**cond, "lastTransitionTime": before.get("lastTransitionTime", now)})
        else:
            merged.append({**cond, "lastTransitionTime": now})
    # Conditions this reconcile does not speak about (Teardown) are kept.
    merged += [
        c for t, c in previous.items() if t not in {m["type"] for m in merged} and t == TEARDOWN
    ]
    return merged


def status_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    current = current or {}
    return any(current.get(k) != v for k, v in desired.items())
