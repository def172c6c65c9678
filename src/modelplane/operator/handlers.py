"""kopf wiring: one long-lived reconcile task per ServingStack, and teardown.

Each ServingStack gets a kopf daemon that reconciles, reports, then sleeps
until something that matters changes: its spec (a raw watch event on the
hub), its target (the target watches), or the resync period. One task per
object means reconciles of one stack never overlap, and kopf stops the task
with the object.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import kopf
from kopf._cogs.structs.references import Insights
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from modelplane.actions.helm import Helm
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from modelplane.credentials.connect import (
    ADDRESS_DENIED,
    HUB_FORBIDDEN,
    Credentials,
    CredentialsError,
    TargetHelm,
    connect,
    hub_forbidden,
    read_credentials,
)
from modelplane.credentials.identity.base import IdentityError
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_error
from modelplane.kube.client import TargetError, open_targets
from modelplane.observe.state import wanted
from modelplane.operator import metrics
from modelplane.operator.leader import Elector
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import INVALID_SPEC, InvalidSpecError, StackReconciler
from modelplane.operator.status import (
    TEARDOWN,
    Outcome,
    condition,
    desired_status,
    merge_conditions,
    status_changed,
)
from modelplane.operator.watch import TargetWatcher

log = logging.getLogger("modelplane.operator")

FINALIZER = f"{API_GROUP}/teardown"
# Set on a ServingStack to finish its deletion without touching the target,
# e.g. when the target is gone for good or its credentials were deleted.
SKIP_TEARDOWN_ANNOTATION = "modelplane.ai/skip-teardown"
# While credentials are missing or the target is unreachable, look again
# sooner than the resync period: after 10 s, then twice as long each time it
# stays blocked, up to BLOCKED_BACKOFF_MAX_SECONDS (or the resync period if
# shorter). A spec change still wakes the stack at once. Without the backoff
# a hub of 1,000 failing stacks costs 100 reconciles a second (bench_fleet).
RETRY_BLOCKED_SECONDS = 10.0
BLOCKED_BACKOFF_MAX_SECONDS = 120.0


# The event handler's id. kopf logs "Handler '<id>' succeeded." at INFO
# after every run, and it runs on every watch event of every ServingStack
# (our own status writes included): on a fleet that was most of the log
# (bench_fleet: about 6,000 lines in 8 minutes), saying nothing.
WAKE_HANDLER = "wake_on_change"
_WAKE_SUCCEEDED = f"Handler {WAKE_HANDLER!r} succeeded."


class QuietWakes(logging.Filter):
    """Demote kopf's success line of the wake handler to DEBUG (see kopf's
    _core/actions/execution.py, which logs every handler's success at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.getMessage() == _WAKE_SUCCEEDED:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


# The deletion handler's id, named so that kopf's lines about it can be told
# (its default was the qualname, "register.<locals>.teardown"). It is also
# the key of kopf's progress annotation: a teardown in flight across the
# upgrade that renamed it starts its retry count and wait over, nothing more.
TEARDOWN_HANDLER = "teardown"
_TEARDOWN_RETRY = f"Handler {TEARDOWN_HANDLER!r} failed temporarily: "


class QuietTeardownRetries(logging.Filter):
    """Demote kopf's line for each retry of teardown to DEBUG.

    kopf logs every TemporaryError at ERROR (_core/actions/execution.py),
    and its K8sPoster posts every record at or above settings.posting.level
    as an Event on the hub: a stuck teardown cost one hub write per retry,
    forever. The handler says itself, once per change, what it waits for.
    A demoted record is below the posting level, so it is not posted.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.getMessage().startswith(_TEARDOWN_RETRY):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


class FailureLog:
    """One stack's blocked reconciles in the log: a line when the failure
    changes, DEBUG for each backed-off retry that finds it the same."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._last: tuple[str, str] | None = None

    def report(self, outcome: Outcome, retry_in: float, error: BaseException | None) -> None:
        failure = (
            (outcome.blocked_reason, outcome.blocked_message or "")
            if outcome.blocked_reason is not None
            else None
        )
        if failure is None:
            if self._last is not None:
                log.info("ServingStack %s: no longer blocked (was %s)", self._label, self._last[0])
            self._last = None
            return
        reason, message = failure
        if failure == self._last:
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


def retry_delay(streak: int, resync_seconds: float) -> float:
    """Seconds before the ``streak``-th consecutive blocked reconcile is retried.

    Jittered by up to 10% so that stacks that failed together (a hub of
    them after an operator restart) do not retry in lockstep.
    """
    ceiling = min(BLOCKED_BACKOFF_MAX_SECONDS, max(resync_seconds, RETRY_BLOCKED_SECONDS))
    base = min(RETRY_BLOCKED_SECONDS * 2.0 ** max(streak - 1, 0), ceiling)
    return base * random.uniform(0.9, 1.0)


ServingStackResource = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)


@dataclass
class Runtime:
    """What the operator keeps across ServingStacks; every entry goes with its stack."""

    options: OperatorOptions
    hub: AsyncClient
    helm: Helm
    # The reconcile task of each live stack waits on its event.
    wakers: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    # The (generation, deletionTimestamp) last seen per stack, dropped when
    # the stack is deleted.
    generations: dict[tuple[str, str], Any] = field(default_factory=dict)
    # Cloud identity token sources, by identity and target. Not dropped with
    # a stack (stacks may share an identity and target): bounded instead, the
    # least recently used going first.
    tokens: TokenCache = field(default_factory=TokenCache)

    def expose(self) -> None:
        """Report the sizes of what is kept in the metrics: a size that only grows is a leak."""
        metrics.TRACKED.labels(what="wakers").set_function(lambda: len(self.wakers))
        metrics.TRACKED.labels(what="generations").set_function(lambda: len(self.generations))
        metrics.TARGETS_OPEN.set_function(open_targets)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _emitter(body: kopf.Body) -> Any:
    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])

    return emit


async def write_status(rt: Runtime, body: kopf.Body, desired: dict[str, Any]) -> bool:
    """Patch status only when it differs from what the hub has: no-op writes cost."""
    current = dict(body.get("status") or {})
    desired = {
        **desired,
        "conditions": merge_conditions(
            desired["conditions"], current.get("conditions") or [], _now()
        ),
    }
    if not status_changed(current, desired):
        return False
    try:
        await rt.hub.patch(
            ServingStackResource.Status,
            body.meta.name or "",
            {"status": desired},
            namespace=body.meta.namespace,
            patch_type=PatchType.MERGE,
        )
    except ApiError as err:
        if err.status.code != 403:
            raise
        # Status is where the operator reports, so this gap can only be told
        # in the log; the stack's loop goes on and tries again next time.
        where = f"ServingStack {body.meta.namespace}/{body.meta.name}"
        log.warning("%s", hub_forbidden(err, "patch", f"{PLURAL}/status", where, API_GROUP))
        return False
    metrics.STATUS_WRITES.inc()
    return True


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    resource = (API_GROUP, API_VERSION, PLURAL)

    @kopf.on.event(*resource, registry=registry, id=WAKE_HANDLER)
    async def wake_on_change(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
        key = (body.meta.namespace or "", body.meta.name or "")
        if event.get("type") == "DELETED":
            # The object is gone: forget it. Its daemon stops and drops its waker.
            rt.generations.pop(key, None)
            if key in rt.wakers:
                rt.wakers[key].set()
            return
        # Status writes come back as events too; only a new generation (spec)
        # or a deletion is a reason to reconcile again.
        marker = (body.meta.get("generation"), body.meta.get("deletionTimestamp"))
        if rt.generations.get(key) != marker:
            rt.generations[key] = marker
            if key in rt.wakers:
                rt.wakers[key].set()

    @kopf.daemon(*resource, registry=registry, cancellation_timeout=30.0)
    async def reconcile_stack(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
        key = (body.meta.namespace or "", body.meta.name or "")
        wake = rt.wakers.setdefault(key, asyncio.Event())
        reconciler = StackReconciler(rt.hub, rt.helm, rt.options, _emitter(body), tokens=rt.tokens)
        watcher: TargetWatcher | None = None
        watched_credentials: Credentials | None = None
        label = "/".join(key)
        failure_log = FailureLog(label)
        streak = 0  # consecutive blocked or failed reconciles
        try:
            while not stopped:
                # Cleared before the reconcile observes, never after: a wake
                # that arrives while it runs (a watch event, a LIST) is kept
                # and brings the next reconcile at once.
                wake.clear()
                if body.meta.get("deletionTimestamp"):
                    return
                error: Exception | None = None
                # kopf updates ``body`` in place: the generation reported is
                # the one of the spec this reconcile read, not of one that
                # arrived while it ran (that would call an old spec Ready).
                generation = body.meta.get("generation")
                snapshot = dict(body)
                with metrics.RECONCILE_SECONDS.time():
                    try:
                        outcome = await reconciler.reconcile(
                            snapshot, watcher.cache if watcher is not None else None
                        )
                    except Exception as err:  # reported, never a crashed daemon
                        error = err
                        outcome = Outcome(
                            blocked_reason="ReconcileError",
                            blocked_message=f"{type(err).__name__}: {describe_error(err)}",
                        )
                metrics.RECONCILES.labels(result=outcome.blocked_reason or "ok").inc()
                await write_status(rt, body, desired_status(outcome, generation))
                if outcome.blocked_reason is None:
                    watcher, watched_credentials = await _ensure_watcher(
                        rt, body, wake, watcher, watched_credentials, label
                    )
                streak = streak + 1 if outcome.blocked_reason or outcome.failures else 0
                delay = _delay(outcome, rt.options.resync_seconds, streak)
                failure_log.report(outcome, delay, error)
                await _sleep(wake, stopped, delay)
        finally:
            if watcher is not None:
                await watcher.close()
            rt.wakers.pop(key, None)

    @kopf.on.delete(*resource, registry=registry, id=TEARDOWN_HANDLER, backoff=2.0)
    async def teardown(body: kopf.Body, runtime: datetime.timedelta, retry: int, **_: Any) -> None:
        if (body.meta.annotations or {}).get(SKIP_TEARDOWN_ANNOTATION) == "true":
            kopf.event(
                body,
                type="Warning",
                reason="TeardownSkipped",
                message=f"{SKIP_TEARDOWN_ANNOTATION}=true: the target is left as it is",
            )
            return
        reconciler = StackReconciler(rt.hub, rt.helm, rt.options, _emitter(body), tokens=rt.tokens)
        skip = (
            f"annotate this ServingStack {SKIP_TEARDOWN_ANNOTATION}=true to delete it "
            "without touching the target"
        )
        try:
            waiting = await reconciler.teardown(dict(body), runtime.total_seconds())
        except InvalidSpecError as err:
            # A stack stored under an older, looser CRD: without a valid spec
            # there is no plan of what it installed.
            message = (
                f"the spec does not validate ({err}), so teardown cannot tell what this "
                f"ServingStack installed: correct the field, or {skip}"
            )
            raise await _teardown_blocked(rt, body, INVALID_SPEC, message, retry) from err
        except AddressDenied as err:
            message = f"{err}. Teardown does not reach a refused address: {skip}"
            raise await _teardown_blocked(rt, body, ADDRESS_DENIED, message, retry) from err
        except CredentialsError as err:
            if err.reason == HUB_FORBIDDEN:
                message = f"{err}. Teardown needs the target's credentials, or {skip}"
            elif err.reason == ADDRESS_DENIED:
                message = f"{err}. Teardown does not reach a refused address: {skip}"
            else:
                message = (
                    f"{err}. Teardown needs the target's credentials: restore the Secret, or {skip}"
                )
            raise await _teardown_blocked(rt, body, err.reason, message, retry) from err
        except IdentityError as err:
            # A token refresh failed part way; the kubeconfig's own
            # credentials are never tried instead.
            message = (
                f"{err.message}. Teardown needs the target's credentials: fix the identity, "
                f"or {skip}"
            )
            raise await _teardown_blocked(rt, body, err.failure.value, message, retry) from None
        except (OSError, ApiError, TargetError, httpx2.HTTPError) as err:
            message = f"teardown could not reach the target: {type(err).__name__}: "
            message += describe_error(err)
            raise await _teardown_blocked(
                rt, body, "TargetUnreachable", message[:1000], retry
            ) from err
        if waiting:
            # Progress, not a failure: told at INFO when what it waits for changes.
            if await _teardown_condition(rt, body, "Waiting", waiting):
                log.info("ServingStack %s: teardown %s", _label(body), waiting)
            raise kopf.TemporaryError(waiting, delay=2.0)
        kopf.event(body, type="Normal", reason="TornDown", message="teardown finished")


def _label(body: kopf.Body) -> str:
    return f"{body.meta.namespace}/{body.meta.name}"


async def _teardown_blocked(
    rt: Runtime, body: kopf.Body, reason: str, message: str, retry: int
) -> kopf.TemporaryError:
    """Report a teardown that cannot proceed, and the error that retries it later.

    kopf's ``retry`` (how many times the handler ran before) is the streak, so
    a stuck teardown backs off like a blocked reconcile and keeps no state.
    The WARNING and the Event come when the Teardown condition changes, not
    with every retry: each Event is a hub write.
    """
    delay = retry_delay(retry + 1, rt.options.resync_seconds)
    if await _teardown_condition(rt, body, reason, message):
        log.warning(
            "ServingStack %s: teardown blocked: %s: %s (next try in %.0fs, then less often "
            "while it lasts)",
            _label(body),
            reason,
            message,
            delay,
        )
        kopf.event(
            body, type="Warning", reason="TeardownBlocked", message=f"{reason}: {message}"[:1000]
        )
    else:
        log.debug(
            "ServingStack %s: teardown still blocked: %s; retry in %.0fs",
            _label(body),
            reason,
            delay,
        )
    return kopf.TemporaryError(message, delay=delay)


async def _teardown_condition(rt: Runtime, body: kopf.Body, reason: str, message: str) -> bool:
    """Set the Teardown condition; True when its reason or message changed.

    Judged by the condition on the stack rather than by the write, so that
    a status the operator may not patch (a 403, told by write_status) does
    not silence the failure.
    """
    current = dict(body.get("status") or {})
    before = next((c for c in current.get("conditions") or [] if c.get("type") == TEARDOWN), None)
    changed = before is None or (before.get("reason"), before.get("message")) != (
        reason,
        message,
    )
    conditions = [c for c in current.get("conditions") or [] if c.get("type") != TEARDOWN]
    conditions.append(
        {
            **condition(TEARDOWN, False, reason, message, body.meta.get("generation")),
            "lastTransitionTime": _now(),
        }
    )
    try:
        await write_status(rt, body, {"conditions": conditions})
    except ApiError as err:  # the object may be gone already
        log.debug("teardown status: %s", err.status.message)
    return changed


async def _ensure_watcher(
    rt: Runtime,
    body: kopf.Body,
    wake: asyncio.Event,
    watcher: TargetWatcher | None,
    watched: Credentials | None,
    label: str,
) -> tuple[TargetWatcher | None, Credentials | None]:
    """Keep one set of target watches, restarted when the credentials or what to watch change."""
    from modelplane.api.models import ServingStack

    try:
        stack = ServingStack.model_validate(
            {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        )
        credentials = await read_credentials(
            rt.hub,
            stack.spec,
            stack.metadata.namespace,
            cross_namespace_refs=not rt.options.no_cross_namespace_refs,
        )
    except (CredentialsError, ApiError, ValueError):
        return watcher, watched
    want = wanted(stack.spec)
    if watcher is not None and credentials == watched and watcher.want == want:
        return watcher, watched
    if watcher is not None:
        await watcher.close()
    try:
        target = await connect(
            credentials,
            allow_unsafe=rt.options.allow_unsafe_kubeconfig,
            timeout=rt.options.target_timeout_seconds,
            deny=rt.options.deny_target_cidrs,
            tokens=rt.tokens,
            endpoints=rt.options.endpoints(),
        )
    except CredentialsError:
        # The next reconcile reports why; a closed watcher is not kept.
        return None, None
    fresh = TargetWatcher(
        target, want, wake.set, label=label, watch_timeout=rt.options.watch_timeout_seconds
    )
    fresh.start()
    return fresh, credentials


def _delay(outcome: Outcome, resync: float, streak: int = 1) -> float:
    """How long to sleep after a reconcile, unless something wakes the stack.

    ``streak`` counts the consecutive blocked or failed reconciles so far.
    """
    if outcome.failures and outcome.retry_after is not None:
        # When the backoff of a failed action ends: a fixed period would
        # retry late, and observe the target for nothing until then.
        return min(outcome.retry_after, resync)
    if outcome.blocked_reason or outcome.failures:
        # Nothing says when it may work again: back off, so that a fleet of
        # unreachable targets stays quiet.
        return retry_delay(streak, resync)
    return resync


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
    # kopf would post an event for every handler run; ours are explicit.
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
    config = (
        KubeConfig.from_file(options.hub_kubeconfig)
        if options.hub_kubeconfig
        else KubeConfig.from_env()
    )
    hub = AsyncClient(config)
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = Helm.find(Path(home), options.helm_timeout_seconds)
        rt = Runtime(
            options=options, hub=hub, helm=TargetHelm.guarding(helm, options.deny_target_cidrs)
        )
        rt.expose()
        quiet, quiet_teardown = QuietWakes(), QuietTeardownRetries()
        logging.getLogger("kopf.objects").addFilter(quiet)
        logging.getLogger("kopf.objects").addFilter(quiet_teardown)
        started = asyncio.Event()
        # kopf takes this object as an argument of kopf.operator but does not
        # export its class; it is filled once discovery on the hub succeeded.
        insights = Insights()
        elector = (
            Elector(hub, options.leader_election) if options.leader_election is not None else None
        )
        probes = None
        if options.metrics_port is not None:
            probes = await metrics.serve(
                options.metrics_address,
                options.metrics_port,
                functools.partial(_readiness, started, insights, elector),
            )
        if elector is not None:
            # A standby starts nothing of kopf: no watch, no finalizer, no write.
            await elector.acquire()
        holding = asyncio.create_task(elector.hold()) if elector is not None else None
        registry = kopf.OperatorRegistry()
        register(registry, rt)

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            # The order lightkube's KubeConfig.from_env takes for the hub
            # client: a pod of the chart has its ServiceAccount, no kubeconfig.
            if options.hub_kubeconfig is None:
                in_cluster = kopf.login_with_service_account(**kwargs)
                if in_cluster is not None:
                    return in_cluster
            return kopf.login_with_kubeconfig(**kwargs)

        try:
            await kopf.operator(
                registry=registry,
                settings=settings(options.selector),
                standalone=True,
                clusterwide=options.all_namespaces or not options.namespaces,
                namespaces=options.namespaces,
                ready_flag=started,
                insights=insights,
            )
        finally:
            if holding is not None and elector is not None:
                # kopf has stopped every daemon and handler: nothing acts for
                # us any more, so the Lease can go to a standby at once.
                holding.cancel()
                await elector.release()
            if probes is not None:
                await probes.cleanup()
            await hub.close()
            logging.getLogger("kopf.objects").removeFilter(quiet)
            logging.getLogger("kopf.objects").removeFilter(quiet_teardown)


def _readiness(
    started: asyncio.Event, insights: Insights, elector: Elector | None
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
    if not started.is_set():
        return metrics.Readiness(ready=False, detail="the operator is starting")
    if not any(r.group == API_GROUP and r.plural == PLURAL for r in insights.watched_resources):
        return metrics.Readiness(
            ready=False,
            detail=f"{PLURAL}.{API_GROUP} is not served by the hub (install the CRD, then restart)",
        )
    if not insights.namespaces:
        return metrics.Readiness(ready=False, detail="no namespace to watch yet")
    return metrics.READY
