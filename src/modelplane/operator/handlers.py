"""kopf wiring: one long-lived reconcile task per ServingStack, and teardown.

Each ServingStack gets a kopf daemon that reconciles, reports, then sleeps
until something that matters changes: its spec (a raw watch event on the
hub), its target (the target watches), or the resync period. One task per
object means reconciles of one stack never overlap, and kopf stops the task
with the object. What a stack's task keeps (what wakes it, the spec it last
saw) lives in kopf's per-object ``memo``, and goes with the object.

What the handlers write to the hub is ``operator.hub_writes``'s; the
process that runs them, ``operator.process``'s.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from modelplane.api.models import API_GROUP, API_VERSION, PLURAL
from modelplane.api.status_limits import LOG_MESSAGE
from modelplane.credentials.identity.base import IdentityError
from modelplane.kube.answers import describe_error
from modelplane.kube.errors import ErrorKind, Fault, classify
from modelplane.operator import metrics
from modelplane.operator.hub_writes import (
    StatusWrite,
    emitter,
    event,
    take_resume,
    teardown_condition,
    write_status,
)
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.rollout import Canaries, MirrorAnswer
from modelplane.operator.rollout_reads import canaries_for
from modelplane.operator.runtime import Runtime, stack_label, track
from modelplane.operator.status import Outcome, desired_status
from modelplane.operator.upgrade_images import UpgradeImages
from modelplane.plan import decisions
from modelplane.plan.rollout import RESUME_ANNOTATION
from modelplane.untrusted import printable
from modelplane.vocabulary import BlockedReason, EventReason

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


async def _asked(
    upgrade_images: UpgradeImages,
    rt: Runtime,
    body: dict[str, Any],
    now: datetime.datetime,
    canaries: Canaries | None,
    reconciler: StackReconciler,
) -> MirrorAnswer | None:
    return await upgrade_images.ask(
        rt.rollout, body, now, canaries, lambda: reconciler.connected(body)
    )


def _left(event: kopf.RawEvent, **_: Any) -> bool:
    return event.get("type") == "DELETED"


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
        rt.rollout.forget(stack_label(body))
        wake = memo.get(WAKE)
        if isinstance(wake, Wake):
            wake.leave()

    @kopf.daemon(*resource, registry=registry, cancellation_timeout=30.0)
    async def reconcile_stack(
        body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any
    ) -> None:
        label = stack_label(body)
        wake = memo[WAKE] = Wake(_marker(body))
        track(+1)
        reconciler = StackReconciler(
            rt.hub,
            rt.helm,
            rt.options,
            emitter(body),
            tokens=rt.tokens,
            wake=wake.event.set,
            label=label,
            target_reads=rt.target_reads,
            mirror=rt.mirror,
        )
        failure_log = FailureLog(label)
        upgrade_images = (
            UpgradeImages(rt.mirror, rt.options.sources(), reconciler.emit, label)
            if rt.mirror is not None
            else None
        )
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
                now = datetime.datetime.now(datetime.UTC)
                canaries = await canaries_for(rt, snapshot, now)
                # Before the turn, not at its first helm run: an image the
                # mirror lacks keeps the stack waiting, its slot free.
                mirror = (
                    await _asked(upgrade_images, rt, snapshot, now, canaries, reconciler)
                    if upgrade_images is not None
                    else None
                )
                # Read first: begin decides and records the turn with no
                # await inside it, so no other stack takes the slot between.
                turn = rt.rollout.begin(snapshot, now, canaries, mirror)
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
                    await take_resume(rt, body)
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
                # One held by the mirror looks again once its answer expires.
                delay = min(delay, turn.retry_in)
                # A node agent rolling a node at a time looks again soon.
                if outcome.requeue_after is not None:
                    delay = min(delay, outcome.requeue_after)
                # A scheduler probe out is looked at again soon (plan.scheduler_probe).
                delay = min(delay, outcome.check_in or delay)
                failure_log.report(outcome, delay, error)
                # The round's plan, its status and its error are not kept
                # while the stack sleeps: the next round makes its own, and a
                # Plan is most of a stack's pydantic objects.
                del outcome, desired, error
                await _sleep(wake.event, stopped, delay)
        finally:
            if rt.rollout.wakers.get(label) == wake.event.set:
                rt.rollout.wakers.pop(label, None)
            await reconciler.close()
            memo.pop(WAKE, None)
            metrics.forget_stack(label)
            track(-1)

    @kopf.on.delete(*resource, registry=registry, id=TEARDOWN_HANDLER, backoff=2.0)
    async def teardown(body: kopf.Body, runtime: datetime.timedelta, retry: int, **_: Any) -> None:
        _RETRYING.set(None)
        if (body.meta.annotations or {}).get(SKIP_TEARDOWN_ANNOTATION) == "true":
            event(
                body,
                "Warning",
                EventReason.TEARDOWN_SKIPPED,
                f"{SKIP_TEARDOWN_ANNOTATION}=true: the target is left as it is",
            )
            return
        reconciler = StackReconciler(rt.hub, rt.helm, rt.options, emitter(body), tokens=rt.tokens)
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
        if waiting is not None:
            # Progress, not a failure: told at INFO when what it waits for changes.
            said = waiting.message
            if await teardown_condition(rt, body, waiting.reason, said):
                log.info("ServingStack %s: teardown %s", stack_label(body), said)
                if waiting.reason is BlockedReason.CLAIMS_HELD:
                    # The pods a person may have to delete, named once per change.
                    event(body, "Warning", EventReason.CLAIMS_HELD, said)
            raise _retry(said, TEARDOWN_POLL_SECONDS)
        event(body, "Normal", EventReason.TORN_DOWN, "teardown finished")


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
    if await teardown_condition(rt, body, reason, message):
        log.warning(
            "ServingStack %s: teardown blocked: %s: %s (next try in %.0fs, then less often "
            "while it lasts)",
            stack_label(body),
            reason,
            printable(message, LOG_MESSAGE),
            delay,
            exc_info=error,
        )
        event(body, "Warning", EventReason.TEARDOWN_BLOCKED, f"{reason}: {message}")
    else:
        log.debug(
            "ServingStack %s: teardown still blocked: %s; retry in %.0fs",
            stack_label(body),
            reason,
            delay,
        )
    return _retry(message, delay)


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
