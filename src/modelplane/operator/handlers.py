"""kopf wiring: one long-lived reconcile task per ServingStack, and teardown.

Each ServingStack gets a kopf daemon that reconciles, reports, then sleeps
until something that matters changes: its spec (a raw watch event on the
hub), its target (the target watches), or the resync period. One task per
object means reconciles of one stack never overlap, and kopf stops the task
with the object. What a stack's task keeps (what wakes it, the spec it last
saw) lives in kopf's per-object ``memo``, and goes with the object.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import functools
import logging
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx2
import kopf
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from modelplane.actions.helm import Helm, TargetHelm
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from modelplane.api.status_limits import EVENT_MESSAGE, LOG_MESSAGE
from modelplane.credentials.connect import hub_forbidden
from modelplane.credentials.identity.base import IdentityError
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.answers import describe_error
from modelplane.kube.client import open_targets
from modelplane.kube.errors import ErrorKind, Fault, classify
from modelplane.operator import metrics
from modelplane.operator.hub import (
    CHECK_RETRY_SECONDS,
    CrdRefused,
    Watched,
    connection_info,
    ensure_servingstack_crd,
    load_config,
)
from modelplane.operator.leader import LEADER, Elector, exit_now
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.rollout import Rollout
from modelplane.operator.status import (
    READY,
    STATUS_REFUSED,
    TEARDOWN,
    Outcome,
    bounded,
    condition,
    desired_status,
    merge_conditions,
    refused_message,
    status_changed,
)
from modelplane.plan import decisions
from modelplane.plan.decisions import BlockedReason
from modelplane.plan.rollout import RESUME_ANNOTATION
from modelplane.untrusted import printable

log = logging.getLogger("modelplane.operator")

FINALIZER = f"{API_GROUP}/teardown"
# Set on a ServingStack to finish its deletion without touching the target,
# e.g. when the target is gone for good or its credentials were deleted.
SKIP_TEARDOWN_ANNOTATION = "modelplane.ai/skip-teardown"
# The seconds before a teardown that waits for objects to be deleted looks again.
TEARDOWN_POLL_SECONDS = 2.0

# The wake handler's id. It runs on every watch event of every ServingStack
# (our own status writes included), so it is an indexer that indexes
# nothing: kopf logs an indexer's outcome only at DEBUG (or on failure),
# where an event handler's success would be an INFO line per event (on
# bench_fleet, about 6,000 lines in 8 minutes, saying nothing).
WAKE_HANDLER = "wake_on_change"
# The memo key of a stack's ``Wake``.
WAKE = "modelplane_wake"
LEAVE_HANDLER = "stop_when_gone"

# The deletion handler's id, named so that kopf's lines about it can be told
# (its default was the qualname, "register.<locals>.teardown"). It is also
# the key of kopf's progress annotation: a teardown in flight across the
# upgrade that renamed it starts its retry count and wait over, nothing more.
TEARDOWN_HANDLER = "teardown"

# Set by the teardown handler to the retry it is about to raise. kopf logs
# every TemporaryError at ERROR, in the task that ran the handler, as soon
# as the handler has raised it; a stuck teardown would so log an ERROR line
# on every retry. The handler says itself, once per change, what it waits
# for; QuietTeardownRetries demotes kopf's line about that one retry.
_RETRYING: contextvars.ContextVar[kopf.TemporaryError | None] = contextvars.ContextVar(
    "modelplane_teardown_retrying", default=None
)


class QuietTeardownRetries(logging.Filter):
    """Demote to DEBUG kopf's ERROR line for a retry the teardown handler raised.

    Told by the handler's own mark (``_RETRYING``), not by kopf's wording:
    the first ERROR record of the handler's task after it raised a retry is
    kopf's report of it. Any other ERROR passes as it is. A demoted record
    is below kopf's posting level too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR or record.exc_info or _RETRYING.get() is None:
            return True
        _RETRYING.set(None)
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _retry(message: str, delay: float) -> kopf.TemporaryError:
    """The error that has kopf run teardown again in ``delay`` seconds, marked as routine."""
    error = kopf.TemporaryError(message, delay=delay)
    _RETRYING.set(error)
    return error


class FailureLog:
    """One stack's blocked reconciles in the log: a line when the failure
    changes, DEBUG for each backed-off retry that finds it the same."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._last: tuple[str, str] | None = None

    def report(self, outcome: Outcome, retry_in: float, error: BaseException | None) -> None:
        failure = (
            (str(outcome.blocked_reason), printable(outcome.blocked_message or "", LOG_MESSAGE))
            if outcome.blocked_reason is not None
            else None
        )
        if failure is None:
            if self._last is not None:
                log.info("ServingStack %s: no longer blocked (was %s)", self._label, self._last[0])
            self._last = None
            return
        reason, message = failure
        if not decisions.is_new(self._last, failure):
            log.debug(
                "ServingStack %s: still %s: %s; retry in %.0fs",
                self._label,
                reason,
                message,
                retry_in,
            )
            return
        self._last = failure
        # A traceback only with the first of a kind: it says where, once.
        log.warning(
            "ServingStack %s: %s: %s (next try in %.0fs, then less often while it lasts)",
            self._label,
            reason,
            message,
            retry_in,
            exc_info=error,
        )


ServingStackResource = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)


@dataclass
class Runtime:
    """What the operator keeps across ServingStacks; what is one stack's is in its memo."""

    options: OperatorOptions
    hub: AsyncClient
    helm: Helm
    # Cloud identity token sources, by identity and target. Not dropped with
    # a stack (stacks may share an identity and target): bounded instead, the
    # least recently used going first.
    tokens: TokenCache = field(default_factory=TokenCache)
    # The staged rollout of upgrades over this shard's stacks.
    rollout: Rollout = field(init=False)

    def __post_init__(self) -> None:
        self.rollout = Rollout(self.options.rollout_policy())

    def expose(self) -> None:
        """Report the sizes of what is kept in the metrics: a size that only grows is a leak."""
        for what in TRACKED:
            metrics.TRACKED.labels(what=what).set(0)
        metrics.TARGETS_OPEN.set_function(open_targets)


# What each stack's task keeps in its memo, by the names the metrics give them.
TRACKED = ("wakers", "generations")


def _track(change: int) -> None:
    for what in TRACKED:
        metrics.TRACKED.labels(what=what).inc(change)


def _marker(body: kopf.Body) -> tuple[Any, Any, Any]:
    """What of a stack is a reason to reconcile again: its spec, its deletion, a resume."""
    resume = (body.meta.get("annotations") or {}).get(RESUME_ANNOTATION)
    return (body.meta.get("generation"), body.meta.get("deletionTimestamp"), resume)


@dataclass
class Wake:
    """What wakes one stack's reconcile task, and the spec (and deletion) it last saw."""

    seen: tuple[Any, Any, Any]
    event: asyncio.Event = field(default_factory=asyncio.Event)
    # The stack left this operator's watch (deleted, or moved to another shard).
    gone: bool = False

    def see(self, marker: tuple[Any, Any, Any]) -> None:
        # Status writes come back as events too; only a new generation or a
        # deletion is a reason to reconcile again.
        if decisions.is_new(self.seen, marker):
            self.seen = marker
            self.event.set()

    def leave(self) -> None:
        self.gone = True
        self.event.set()


def _left(event: kopf.RawEvent, **_: Any) -> bool:
    return event.get("type") == "DELETED"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(body: kopf.Body, type_: str, reason: str, message: str) -> None:
    """An event on the ServingStack; its message made printable and cut to what events hold."""
    kopf.event(body, type=type_, reason=reason, message=printable(message, EVENT_MESSAGE))


def _emitter(body: kopf.Body) -> Any:
    def emit(type_: str, reason: str, message: str) -> None:
        event(body, type_, reason, message)

    return emit


class StatusWrite(StrEnum):
    """What became of one status write."""

    WRITTEN = "Written"
    UNCHANGED = "Unchanged"  # the hub has it already: nothing sent
    FORBIDDEN = "Forbidden"  # the operator may not patch status (told in the log)
    REFUSED = "Refused"  # the hub refused it, or did not answer: reported, tried again later


# At most this many refused fields are named, each cut to FIELD_SHOWN.
FIELDS_SHOWN = 8
FIELD_SHOWN = 256


async def write_status(rt: Runtime, body: kopf.Body, desired: dict[str, Any]) -> StatusWrite:
    """Patch status only when it differs from what the hub has: no-op writes cost.

    Never raises for what the hub answers: a refused write is reported (a
    Warning event and a log line naming the fields the hub refused) and
    replaced by a minimal status that says so, and the stack's loop goes on.
    """
    current = dict(body.get("status") or {})
    desired = bounded(
        {
            **desired,
            "conditions": merge_conditions(
                desired["conditions"], current.get("conditions") or [], _now()
            ),
        }
    )
    if not status_changed(current, desired):
        return StatusWrite.UNCHANGED
    try:
        await _patch_status(rt, body, desired)
    except ApiError as err:
        if err.status.code == 403:
            # Status is where the operator reports, so this gap can only be told
            # in the log; the stack's loop goes on and tries again next time.
            where = f"ServingStack {_label(body)}"
            log.warning("%s", hub_forbidden(err, "patch", f"{PLURAL}/status", where, API_GROUP))
            return StatusWrite.FORBIDDEN
        if err.status.code == 404:
            log.debug("ServingStack %s: gone before its status was written", _label(body))
            return StatusWrite.REFUSED
        await _status_refused(rt, body, current, desired, err)
        return StatusWrite.REFUSED
    except httpx2.HTTPError as err:
        log.warning(
            "ServingStack %s: its status could not be written: %s: %s",
            _label(body),
            type(err).__name__,
            printable(describe_error(err), LOG_MESSAGE),
        )
        return StatusWrite.REFUSED
    metrics.STATUS_WRITES.inc()
    return StatusWrite.WRITTEN


async def _patch_status(rt: Runtime, body: kopf.Body, status: dict[str, Any]) -> None:
    await rt.hub.patch(
        ServingStackResource.Status,
        body.meta.name or "",
        {"status": status},
        namespace=body.meta.namespace,
        patch_type=PatchType.MERGE,
    )


async def _take_resume(rt: Runtime, body: kopf.Body) -> None:
    """Remove the resume annotation once the status says it was taken: it resumes once."""
    try:
        await rt.hub.patch(
            ServingStackResource,
            body.meta.name or "",
            {"metadata": {"annotations": {RESUME_ANNOTATION: None}}},
            namespace=body.meta.namespace,
            patch_type=PatchType.MERGE,
        )
    except (ApiError, httpx2.HTTPError) as err:
        # Left on, it is taken again only by a later failed upgrade of this stack.
        log.warning(
            "ServingStack %s: could not remove %s: %s",
            _label(body),
            RESUME_ANNOTATION,
            printable(describe_error(err), LOG_MESSAGE),
        )


def refused_fields(err: ApiError) -> list[str]:
    """The fields the hub named in refusing a write, each with why, as a person reads them.

    From the Status's details (causes), never its message: a message may
    quote the refused value, which came from a target.
    """
    details = err.status.details
    causes = (details.causes if details is not None else None) or []
    shown = [
        printable(
            f"{cause.field or 'the object'}: {cause.reason or 'refused'}",
            FIELD_SHOWN,
        )
        for cause in causes[:FIELDS_SHOWN]
    ]
    if len(causes) > FIELDS_SHOWN:
        shown.append(f"{len(causes) - FIELDS_SHOWN} more")
    if not shown:
        shown.append(printable(f"{err.status.code} {err.status.reason or 'refused'}", FIELD_SHOWN))
    return shown


async def _status_refused(
    rt: Runtime,
    body: kopf.Body,
    current: dict[str, Any],
    refused: dict[str, Any],
    err: ApiError,
) -> None:
    """Report a status the hub refused, and write the minimal one that says so.

    The event and the WARNING come once per refusal that changes, as the
    hub's status remembers it (Ready is StatusRefused with this message),
    not once per backed-off retry.
    """
    fields = refused_fields(err)
    message = refused_message(fields)
    ready = next((c for c in current.get("conditions") or [] if c.get("type") == READY), None)
    before = (ready.get("reason"), ready.get("message")) if ready is not None else None
    new = decisions.is_new(before, (STATUS_REFUSED, message))
    log.log(
        logging.WARNING if new else logging.DEBUG,
        "ServingStack %s: the hub refused its status (%s %s): %s",
        _label(body),
        err.status.code,
        printable(err.status.reason or "", FIELD_SHOWN),
        "; ".join(fields),
    )
    if new:
        event(body, "Warning", STATUS_REFUSED, message)
    generation = refused.get("observedGeneration", body.meta.get("generation"))
    minimal = bounded(
        {
            "observedGeneration": generation,
            "conditions": merge_conditions(
                [condition(READY, False, STATUS_REFUSED, message, generation)],
                current.get("conditions") or [],
                _now(),
            ),
        }
    )
    if not status_changed(current, minimal):
        return
    try:
        await _patch_status(rt, body, minimal)
    except (ApiError, httpx2.HTTPError) as again:
        # Nothing more can be said on the hub: the log is all there is.
        log.warning(
            "ServingStack %s: the hub refused the minimal status too: %s",
            _label(body),
            printable(describe_error(again), LOG_MESSAGE),
        )
        return
    metrics.STATUS_WRITES.inc()


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    resource = (API_GROUP, API_VERSION, PLURAL)

    @kopf.index(*resource, registry=registry, id=WAKE_HANDLER)
    async def wake_on_change(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # Every stack's place in the rollout, as its status says it: kopf
        # indexes the first listing before any daemon starts, so a restarted
        # operator knows which stacks were upgrading before it lets one go.
        rt.rollout.observe(body)
        wake = memo.get(WAKE)
        if isinstance(wake, Wake):
            wake.see(_marker(body))

    # Indexers are not called for a DELETED event: the stack is gone from
    # this operator's watch, deleted or moved to another shard by its
    # labels. kopf drops its memo then but keeps its daemon running (it
    # stops daemons for a deletion only), so the daemon is told to stop. One
    # INFO line of kopf's per stack that leaves, not per event.
    @kopf.on.event(*resource, registry=registry, id=LEAVE_HANDLER, when=_left)
    async def stop_when_gone(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        rt.rollout.forget(_label(body))
        wake = memo.get(WAKE)
        if isinstance(wake, Wake):
            wake.leave()

    @kopf.daemon(*resource, registry=registry, cancellation_timeout=30.0)
    async def reconcile_stack(
        body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any
    ) -> None:
        label = _label(body)
        wake = memo[WAKE] = Wake(_marker(body))
        _track(+1)
        reconciler = StackReconciler(
            rt.hub,
            rt.helm,
            rt.options,
            _emitter(body),
            tokens=rt.tokens,
            wake=wake.event.set,
            label=label,
        )
        failure_log = FailureLog(label)
        streak = 0  # consecutive blocked or failed reconciles
        rt.rollout.wakers[label] = wake.event.set
        try:
            while not stopped:
                # Cleared before the reconcile observes, never after: a wake
                # that arrives while it runs (a watch event, a LIST) is kept
                # and brings the next reconcile at once.
                wake.event.clear()
                if wake.gone or body.meta.get("deletionTimestamp"):
                    return
                error: Exception | None = None
                # kopf updates ``body`` in place: the generation reported is
                # the one of the spec this reconcile read, not of one that
                # arrived while it ran (that would call an old spec Ready).
                generation = body.meta.get("generation")
                snapshot = dict(body)
                turn = rt.rollout.begin(snapshot, datetime.datetime.now(datetime.UTC))
                starting = rt.rollout.starting(snapshot, turn)
                if starting is not None:
                    await write_status(rt, body, starting)
                with metrics.RECONCILE_SECONDS.time():
                    try:
                        outcome = await reconciler.reconcile(snapshot, turn.held)
                    except Exception as err:  # reported, never a crashed daemon
                        error = err
                        outcome = Outcome(
                            blocked_reason=BlockedReason.RECONCILE_ERROR,
                            blocked_message=f"{type(err).__name__}: {describe_error(err)}",
                        )
                metrics.RECONCILES.labels(result=outcome.blocked_reason or "ok").inc()
                desired = rt.rollout.finish(
                    snapshot,
                    turn,
                    outcome,
                    desired_status(outcome, generation),
                    datetime.datetime.now(datetime.UTC),
                )
                written = await write_status(rt, body, desired)
                if turn.resumed and written is StatusWrite.WRITTEN:
                    await _take_resume(rt, body)
                # A refused status is retried as a blocked reconcile is: backed off.
                refused = written is StatusWrite.REFUSED
                went_wrong = outcome.blocked_reason is not None or refused
                metrics.record_reconcile(
                    label, desired, outcome, succeeded=not (went_wrong or outcome.failures)
                )
                streak = streak + 1 if went_wrong or outcome.failures else 0
                delay = decisions.sleep_after(
                    blocked=went_wrong,
                    failed=bool(outcome.failures),
                    retry_after=outcome.retry_after,
                    resync_seconds=rt.options.resync_seconds,
                    streak=streak,
                )
                # An upgrade is judged again when its Ready timeout ends.
                delay = min(delay, rt.rollout.judge_in(label, datetime.datetime.now(datetime.UTC)))
                failure_log.report(outcome, delay, error)
                await _sleep(wake.event, stopped, delay)
        finally:
            if rt.rollout.wakers.get(label) == wake.event.set:
                rt.rollout.wakers.pop(label, None)
            await reconciler.close()
            memo.pop(WAKE, None)
            metrics.forget_stack(label)
            _track(-1)

    @kopf.on.delete(*resource, registry=registry, id=TEARDOWN_HANDLER, backoff=2.0)
    async def teardown(body: kopf.Body, runtime: datetime.timedelta, retry: int, **_: Any) -> None:
        _RETRYING.set(None)
        if (body.meta.annotations or {}).get(SKIP_TEARDOWN_ANNOTATION) == "true":
            event(
                body,
                "Warning",
                "TeardownSkipped",
                f"{SKIP_TEARDOWN_ANNOTATION}=true: the target is left as it is",
            )
            return
        reconciler = StackReconciler(rt.hub, rt.helm, rt.options, _emitter(body), tokens=rt.tokens)
        try:
            waiting = await reconciler.teardown(dict(body), runtime.total_seconds())
        except Exception as err:
            # Every failure, the unforeseen ones too, goes the one way: a
            # condition and an event when it changes, and a backed-off retry.
            fault = classify(err)
            reason = decisions.blocked_reason(fault, teardown=True)
            message = teardown_message(fault, err)
            unforeseen = err if fault.kind is ErrorKind.UNEXPECTED else None
            raise await _teardown_blocked(rt, body, reason, message, retry, unforeseen) from None
        if waiting:
            # Progress, not a failure: told at INFO when what it waits for changes.
            if await _teardown_condition(rt, body, "Waiting", waiting):
                log.info("ServingStack %s: teardown %s", _label(body), waiting)
            raise _retry(waiting, TEARDOWN_POLL_SECONDS)
        event(body, "Normal", "TornDown", "teardown finished")


def _label(body: kopf.Body) -> str:
    return f"{body.meta.namespace}/{body.meta.name}"


_SKIP = (
    f"annotate this ServingStack {SKIP_TEARDOWN_ANNOTATION}=true to delete it "
    "without touching the target"
)


def teardown_message(fault: Fault, err: BaseException) -> str:
    """What the Teardown condition says about a fault that stopped teardown, and the way out."""
    match fault.kind:
        case ErrorKind.INVALID:
            # A stack stored under an older, looser CRD: without a valid spec
            # there is no plan of what it installed.
            return (
                f"the spec does not validate ({err}), so teardown cannot tell what this "
                f"ServingStack installed: correct the field, or {_SKIP}"
            )
        case ErrorKind.ADDRESS_DENIED:
            return f"{err}. Teardown does not reach a refused address: {_SKIP}"
        case ErrorKind.CREDENTIALS if fault.reason == BlockedReason.HUB_FORBIDDEN:
            return f"{err}. Teardown needs the target's credentials, or {_SKIP}"
        case ErrorKind.CREDENTIALS if fault.reason == BlockedReason.TARGET_ADDRESS_DENIED:
            return f"{err}. Teardown does not reach a refused address: {_SKIP}"
        case ErrorKind.CREDENTIALS:
            return f"{err}. Teardown needs the target's credentials: restore the Secret, or {_SKIP}"
        case ErrorKind.IDENTITY if isinstance(err, IdentityError):
            # A token refresh failed part way; the kubeconfig's own
            # credentials are never tried instead.
            return (
                f"{err.message}. Teardown needs the target's credentials: fix the identity, "
                f"or {_SKIP}"
            )
        case ErrorKind.HELM_FAILED:
            return (
                f"helm failed: {describe_error(err)}. Teardown tries again; fix what helm "
                f"says, or {_SKIP}"
            )
        case ErrorKind.NAMESPACE_TERMINATING:
            return (
                "waiting for a namespace on the target to finish terminating (the target "
                f"answered {describe_error(err)})"
            )
        case ErrorKind.CLAIM_CONTENDED | ErrorKind.WEBHOOK_NOT_READY:
            return describe_error(err)
        case ErrorKind.UNREACHABLE:
            message = f"teardown could not reach the target: {type(err).__name__}: "
            return (message + describe_error(err))[:1000]
        case ErrorKind.UNEXPECTED:
            return f"teardown failed: {type(err).__name__}: {describe_error(err)}"[:1000]
        case _:
            return f"the target refused teardown: {describe_error(err)}"[:1000]


async def _teardown_blocked(
    rt: Runtime,
    body: kopf.Body,
    reason: BlockedReason,
    message: str,
    retry: int,
    error: BaseException | None = None,
) -> kopf.TemporaryError:
    """Report a teardown that cannot proceed, and the error that retries it later.

    kopf's ``retry`` (how many times the handler ran before) is the streak, so
    a stuck teardown backs off like a blocked reconcile and keeps no state.
    The WARNING and the Event come when the Teardown condition changes, not
    with every retry: each Event is a hub write.
    """
    delay = decisions.blocked_retry_delay(retry + 1, rt.options.resync_seconds)
    if await _teardown_condition(rt, body, reason, message):
        log.warning(
            "ServingStack %s: teardown blocked: %s: %s (next try in %.0fs, then less often "
            "while it lasts)",
            _label(body),
            reason,
            printable(message, LOG_MESSAGE),
            delay,
            exc_info=error,
        )
        event(body, "Warning", "TeardownBlocked", f"{reason}: {message}")
    else:
        log.debug(
            "ServingStack %s: teardown still blocked: %s; retry in %.0fs",
            _label(body),
            reason,
            delay,
        )
    return _retry(message, delay)


async def _teardown_condition(rt: Runtime, body: kopf.Body, reason: str, message: str) -> bool:
    """Set the Teardown condition; True when its reason or message changed.

    Judged by the condition on the stack rather than by the write, so that
    a status the operator may not patch (a 403, told by write_status) does
    not silence the failure.
    """
    current = dict(body.get("status") or {})
    before = next((c for c in current.get("conditions") or [] if c.get("type") == TEARDOWN), None)
    changed = before is None or decisions.is_new(
        (before.get("reason"), before.get("message")), (reason, message)
    )
    conditions = [c for c in current.get("conditions") or [] if c.get("type") != TEARDOWN]
    conditions.append(
        {
            **condition(TEARDOWN, False, reason, message, body.meta.get("generation")),
            "lastTransitionTime": _now(),
        }
    )
    # A refusal (the object may be gone already) is told by write_status.
    await write_status(rt, body, {"conditions": conditions})
    return changed


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, seconds: float) -> None:
    waiter = asyncio.ensure_future(wake.wait())
    stopper = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({waiter, stopper}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        stopper.cancel()
    if wake.is_set():
        await coalesce(wake)


# A burst of target events (a chart brings many CRDs at once, an owner
# applies a directory of them) is folded into one reconcile: wake-ups are
# taken until they pause for COALESCE_QUIET_SECONDS, for at most
# COALESCE_MAX_SECONDS in all. A lone change (the Gateway's address) so
# waits the quiet pause only, where a fixed 0.2 s sleep was most of its
# propagation time (bench/bench_operator.py).
COALESCE_QUIET_SECONDS = 0.03
COALESCE_MAX_SECONDS = 0.2


async def coalesce(
    wake: asyncio.Event,
    quiet: float = COALESCE_QUIET_SECONDS,
    most: float = COALESCE_MAX_SECONDS,
) -> int:
    """Wait out a burst of wake-ups; returns how many more came. ``wake`` is left set."""
    loop = asyncio.get_running_loop()
    end = loop.time() + most
    more = 0
    while (left := end - loop.time()) > 0:
        wake.clear()
        try:
            await asyncio.wait_for(wake.wait(), min(quiet, left))
        except TimeoutError:
            break
        more += 1
    # Set again, so the wake-ups taken here are still owed their reconcile.
    wake.set()
    return more


def settings(selector: str | None = None) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    if selector:
        # Server-side: the hub sends this shard only its own stacks, so the
        # daemons, the event handler and teardown never see another's.
        s.watching.label_selectors[API_GROUP, PLURAL] = selector
    s.persistence.finalizer = FINALIZER
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="modelplane.ai")
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="modelplane.ai", key="last-handled-configuration"
    )
    # kopf would post an event for every handler run (its log lines); ours
    # are explicit, through kopf.event.
    s.posting.loggers = False
    s.posting.level = logging.WARNING
    s.watching.server_timeout = 300
    # A stopped daemon closes its target watches and connections, which
    # takes real I/O, not the few zero-time cycles kopf waits by default.
    # Had kopf not seen it exit, it would keep the finalizer, sleep out the
    # daemon's cancellation timeout, and run the deletion handlers once more
    # after they had succeeded: a teardown that re-claims a target it just
    # released, in a namespace it is deleting.
    s.background.instant_exit_timeout = 5.0
    # kopf would otherwise watch every CRD and, when namespaced, list every
    # namespace on the hub: cluster-wide reads a namespaced install must not
    # need. The ServingStack CRD is installed before the operator (the chart's
    # crds/, or `modelplane crds` first), and the named namespaces are taken
    # as they are. See kopf's reactor/observation.py on scanning.
    s.scanning.disabled = True
    return s


async def run(options: OperatorOptions) -> None:
    """Run the operator until interrupted."""
    # Read once: the hub client and kopf's login both use this one.
    config = load_config(options.hub_kubeconfig)
    hub = AsyncClient(config)
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = Helm.find(Path(home), options.helm_timeout_seconds)
        rt = Runtime(
            options=options, hub=hub, helm=TargetHelm.guarding(helm, options.deny_target_cidrs)
        )
        rt.expose()
        quiet_teardown = QuietTeardownRetries()
        logging.getLogger("kopf.objects").addFilter(quiet_teardown)
        started = asyncio.Event()
        clusterwide = options.all_namespaces or not options.namespaces
        watched = Watched.of(options.namespaces, clusterwide)
        elector = (
            Elector(
                hub,
                options.leader_election,
                # helm runs in process groups of its own: an exit alone
                # would leave them acting for a replica that stepped down.
                step_down=functools.partial(exit_now, rt.helm.kill_running),
            )
            if options.leader_election is not None
            else None
        )
        if elector is None:
            # The only replica reconciles: an alert on no leader must not fire for it.
            LEADER.set(1)
        probes = None
        if options.metrics_port is not None:
            probes = await metrics.serve(
                options.metrics_address,
                options.metrics_port,
                functools.partial(_readiness, started, watched, elector),
            )
        if elector is not None:
            # A standby starts nothing of kopf: no watch, no finalizer, no write.
            await elector.acquire()
        holding = asyncio.create_task(elector.hold()) if elector is not None else None
        registry = kopf.OperatorRegistry()
        register(registry, rt)

        @kopf.on.login(registry=registry)
        def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
            return connection_info(config, trust_env=settings.networking.trust_env)

        @kopf.on.startup(registry=registry)
        async def check_hub(**_: Any) -> None:
            # kopf raises its ready flag once this has passed. Only a leader
            # gets here: a standby writes nothing, the CRD included.
            try:
                if options.manage_crd:
                    change = await ensure_servingstack_crd(hub)
                    watched.crd_problem = None
                    if change.writes:
                        log.info("the hub's ServingStack CRD: %s", change.message)
                await watched.check(hub, ServingStackResource)
            except CrdRefused as err:
                watched.crd_problem = str(err)
                raise kopf.TemporaryError(str(err), delay=CHECK_RETRY_SECONDS) from err
            except (ApiError, httpx2.HTTPError) as err:
                raise kopf.TemporaryError(describe_error(err), delay=CHECK_RETRY_SECONDS) from err

        try:
            await kopf.operator(
                registry=registry,
                settings=settings(options.selector),
                standalone=True,
                clusterwide=clusterwide,
                namespaces=options.namespaces,
                ready_flag=started,
            )
        finally:
            # kopf has cancelled every daemon, and each helm run with it; a
            # run kopf gave up waiting for must not outlive the operator.
            rt.helm.kill_running()
            if holding is not None and elector is not None:
                # kopf has stopped every daemon and handler: nothing acts for
                # us any more, so the Lease can go to a standby at once.
                holding.cancel()
                await elector.release()
            if probes is not None:
                await probes.cleanup()
            await hub.close()
            logging.getLogger("kopf.objects").removeFilter(quiet_teardown)


def _readiness(
    started: asyncio.Event, watched: Watched, elector: Elector | None
) -> metrics.Readiness:
    """Ready once kopf runs and watches ServingStacks on the hub, or as a sound standby.

    A standby has started nothing of kopf, so it is judged by its Lease: it
    is ready while it can read the Lease and finds it held by another
    replica, which is all it needs to take over.
    """
    if elector is not None and not elector.leading:
        holder = elector.standing_by_for
        if holder is not None:
            return metrics.Readiness(
                ready=True, detail=f"standby: the Lease {elector.lease} is held by {holder}"
            )
        if elector.error is not None:
            return metrics.Readiness(
                ready=False, detail=f"the Lease {elector.lease} cannot be read: {elector.error}"
            )
        return metrics.Readiness(ready=False, detail="the operator is starting")
    if watched.crd_problem is not None:
        return metrics.Readiness(ready=False, detail=watched.crd_problem)
    if not started.is_set():
        return metrics.Readiness(ready=False, detail="the operator is starting")
    if not watched.served:
        return metrics.Readiness(
            ready=False,
            detail=f"{PLURAL}.{API_GROUP} is not served by the hub (install the CRD, then restart)",
        )
    if not watched.any_namespace:
        return metrics.Readiness(ready=False, detail="no namespace to watch yet")
    return metrics.READY
