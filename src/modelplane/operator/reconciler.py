"""One ServingStack's reconcile and teardown: observe, plan, act, report.

The reconciler holds no rule the plan could hold: it reads credentials,
observes the target, calls ``plan`` and carries out the actions it names.
The only state it keeps between reconciles is backoff after failures and a
cache of fetched manifests; both are safe to lose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from pydantic import ValidationError

from modelplane.actions import claim
from modelplane.actions.apply import (
    WebhookNotReady,
    apply_object,
    delete_object,
    fetch_manifests,
    vet_manifests,
)
from modelplane.actions.helm import Helm, HelmError
from modelplane.api.models import ServingStack
from modelplane.catalog.components import BY_NAME, components_for
from modelplane.catalog.facts import ClusterFacts
from modelplane.credentials.connect import (
    ADDRESS_DENIED,
    CredentialsError,
    connect,
    read_credentials,
)
from modelplane.credentials.identity.base import IdentityError
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_error
from modelplane.kube.client import ApiStatusError, Target, TargetError
from modelplane.kube.discovery import APIS
from modelplane.observe.facts import observe_cluster
from modelplane.observe.state import observe, read_listed, to_observed, wanted
from modelplane.observe.watches import WatchCache
from modelplane.operator.options import OperatorOptions
from modelplane.operator.status import WEBHOOK_NOT_READY, Outcome
from modelplane.pins import ComponentsMode
from modelplane.plan import Plan, plan
from modelplane.plan.model import ObjectAction, PlannedManifests, PlannedRelease, ReleaseAction
from modelplane.plan.teardown import DeleteObjects, TeardownStep, UninstallRelease, teardown_steps
from modelplane.wire import stamp

log = logging.getLogger("modelplane.operator")

Emit = Callable[[str, str, str], None]  # (type, reason, message) -> event on the ServingStack

# Each round re-observes after acting, so an install that brings new APIs
# unblocks the objects waiting for them in the same reconcile.
MAX_ROUNDS = 6
UNREACHABLE = (httpx2.HTTPError, OSError, asyncio.TimeoutError)


INVALID_SPEC = "InvalidSpec"
# A hand edit of fields the operator owns, taken back (see plan.drift).
DRIFT_CORRECTED = "DriftCorrected"


class InvalidSpecError(Exception):
    """The stored spec does not validate, so there is no plan to tear down by."""


# A webhook that cannot be called yet usually answers within a minute or
# two of its chart's install; a longer wait between tries would only delay
# Ready by as much once it does.
WEBHOOK_RETRY_CAP = 60.0
# The shortest sleep until a retry, so a deadline just passed is no spin.
MIN_RETRY_SECONDS = 1.0


@dataclass
class Backoff:
    attempts: int = 0
    not_before: float = 0.0

    def fail(self, now: float, cap: float = 300.0) -> None:
        self.attempts += 1
        self.not_before = now + min(cap, 5.0 * 2 ** (self.attempts - 1))


@dataclass
class StackReconciler:
    hub: AsyncClient
    helm: Helm
    options: OperatorOptions
    emit: Emit
    backoff: dict[str, Backoff] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    # The failed components whose failure is a webhook the target cannot call yet.
    waiting_on_webhook: set[str] = field(default_factory=set)
    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    # The out-of-range pins last reported by event, so a resync that finds
    # the same ones stays quiet; safe to lose (a restart reports them once).
    version_warnings: frozenset[str] = frozenset()
    # The spec error last reported by event, likewise.
    invalid_spec: str | None = None
    # When the target was last read directly, for the full relist; and
    # whether the last reconcile acted on nothing. The watch copy is
    # trusted only then: right after a write its events may still be on
    # their way, and a stale copy would only cost a second, idle apply.
    last_direct: float | None = None
    settled: bool = False
    # Provided mode's advisory facts, with what they were read for (the
    # components and the served APIs): read again only with a direct read
    # of the target, or when either changed. Watching what they come from
    # (every Deployment, Node, Service and ConfigMap of the cluster) would
    # hold a copy of much of the cluster per target, for warnings a person
    # reads; so they are as fresh as the last direct read (--relist).
    facts: tuple[tuple[str, ...], APIS, ClusterFacts] | None = None
    # Cloud identity tokens, shared with the stack's target watches and kept
    # across reconciles (each opens its target afresh).
    tokens: TokenCache = field(default_factory=TokenCache)

    # -- reconcile -----------------------------------------------------------

    async def reconcile(self, body: dict[str, Any], cache: WatchCache | None = None) -> Outcome:
        """One reconcile; ``cache`` (the target watches' copy) spares a settled resync the reads."""
        settled, self.settled = self.settled, False
        try:
            stack = ServingStack.model_validate(_without_status(body))
        except ValidationError as err:
            # The hub's CRD refuses most bad specs; what it lets through (a
            # stack stored under an older, looser CRD) is reported here, in an
            # event once and in Ready for as long as it stands.
            message = _first_error(err)
            if message != self.invalid_spec:
                self.emit("Warning", INVALID_SPEC, message)
            self.invalid_spec = message
            return Outcome(blocked_reason=INVALID_SPEC, blocked_message=message)
        self.invalid_spec = None
        try:
            target = await self._target(stack)
        except CredentialsError as err:
            return Outcome(blocked_reason=err.reason, blocked_message=str(err))
        current: Plan | None = None
        try:
            # Nothing is written to a target another ServingStack holds.
            blocked = await claim.before_reconcile(
                target.client, stack, self.emit, body.get("status")
            )
            if blocked is not None:
                return Outcome(blocked_reason=blocked.reason, blocked_message=blocked.message)

            want = wanted(stack.spec)
            from_cache = (
                cache is not None
                and cache.want == want
                and settled
                and self.last_direct is not None
                and self.clock() - self.last_direct < self.options.relist_seconds
            )
            acted = False
            for _ in range(MAX_ROUNDS):
                listed = await cache.listed(target.client) if cache and from_cache else None
                direct = listed is None
                if listed is None:
                    listed = await read_listed(target.client, want)
                    self.last_direct = self.clock()
                observed = to_observed(listed)
                if stack.spec.components is ComponentsMode.PROVIDED:
                    # The silent failures the spec cannot check: only a
                    # provided substrate needs them watched, and they cost a
                    # few LISTs more.
                    facts = await self._cluster_facts(target, stack, observed.apis, direct)
                    observed = observed.model_copy(update={"cluster": facts})
                current = plan(stack, observed, self.options.sources())
                if not await self._act(current, target):
                    break
                # What this round wrote is not in the watch copy yet.
                acted, from_cache = True, False
            self.settled = not acted
        except AddressDenied as err:
            # The name resolved to a refused address after the target was opened.
            return Outcome(plan=None, blocked_reason=ADDRESS_DENIED, blocked_message=str(err))
        except IdentityError as err:
            # A refresh failed mid-reconcile; never retried with other credentials.
            return Outcome(
                plan=None,
                blocked_reason=err.failure.value,
                blocked_message=_identity_message(stack, err),
            )
        except ApiStatusError as err:
            reason = "TargetUnauthorized" if err.status in (401, 403) else "TargetError"
            return Outcome(
                plan=current,
                blocked_reason=reason,
                blocked_message=_refused_identity(stack, err.status)
                or f"the target API server answered: {err}",
            )
        except ApiError as err:
            reason = "TargetUnauthorized" if err.status.code in (401, 403) else "TargetError"
            return Outcome(
                plan=current,
                blocked_reason=reason,
                blocked_message=_refused_identity(stack, err.status.code)
                or f"the target API server answered {describe_error(err)}",
            )
        except (*UNREACHABLE, TargetError) as err:
            return Outcome(
                plan=None,
                blocked_reason="TargetUnreachable",
                blocked_message=f"cannot reach the target API server: {describe_error(err)}",
            )
        finally:
            await target.close()
        if current is not None:
            self.forget_settled(current)
            self._report_versions(current)
        return Outcome(
            plan=current,
            failures=dict(self.failures),
            waiting_on_webhook=frozenset(self.waiting_on_webhook),
            retry_after=self.retry_after(),
        )

    async def _cluster_facts(
        self, target: Target, stack: ServingStack, apis: APIS, direct: bool
    ) -> ClusterFacts:
        """The advisories' facts: read with each direct read, else the last ones if still apt."""
        components = components_for(stack.spec)
        names = tuple(c.name for c in components)
        kept = self.facts
        if not direct and kept is not None and kept[0] == names and kept[1] == apis:
            return kept[2]
        facts = await observe_cluster(target.client, components, apis)
        self.facts = (names, apis, facts)
        return facts

    def retry_after(self) -> float | None:
        """Seconds until the first failed component is due again; None when none waits.

        The daemon sleeps this long rather than a fixed period, so a retry
        comes when its backoff ends, and nothing is observed in between.
        """
        now = self.clock()
        ahead = [
            b.not_before - now
            for name, b in self.backoff.items()
            if name in self.failures and b.not_before > now
        ]
        return max(MIN_RETRY_SECONDS, min(ahead)) if ahead else None

    def forget_settled(self, p: Plan) -> None:
        """Drop the failures (and backoff) of components with no work left.

        A failure stands only while its component still has something to do:
        a pin put back, or a component the spec no longer has, clears it.
        """
        for settled in set(self.failures) - p.components_with_work:
            self.failures.pop(settled)
            self.backoff.pop(settled, None)
            self.waiting_on_webhook.discard(settled)

    def _report_versions(self, p: Plan) -> None:
        """One Warning event per out-of-range pin, when it appears, not on every resync."""
        messages = frozenset(w.message for w in p.version_warnings)
        for message in sorted(messages - self.version_warnings):
            self.emit("Warning", "VersionOutOfRange", message)
        self.version_warnings = messages

    async def _target(self, stack: ServingStack) -> Target:
        """Open the stack's target; the caller closes it. Refusals are ``CredentialsError``."""
        credentials = await read_credentials(
            self.hub,
            stack.spec,
            stack.metadata.namespace,
            cross_namespace_refs=not self.options.no_cross_namespace_refs,
        )
        return await connect(
            credentials,
            allow_unsafe=self.options.allow_unsafe_kubeconfig,
            timeout=self.options.target_timeout_seconds,
            deny=self.options.deny_target_cidrs,
            tokens=self.tokens,
            endpoints=self.options.endpoints(),
        )

    async def _act(self, p: Plan, target: Target) -> bool:
        """Carry out what the plan says now; True if anything changed."""
        changed = False
        for m in p.manifests:
            if m.action is ObjectAction.APPLY and self._due(m.component):
                changed |= await self._guard(m.component, self._apply_manifests(m, target))
        for o in p.objects:
            if o.action is ObjectAction.APPLY and self._due(o.component):
                applied = await self._guard(o.component, apply_object(target.client, o.object))
                if applied and o.drift:
                    # Field paths only, never values: a value may be a secret.
                    self.emit(
                        "Normal", DRIFT_CORRECTED, f"restored {o.shown}: {', '.join(o.drift)}"
                    )
                changed |= applied
        releases = [
            r
            for r in p.releases
            if r.action not in (ReleaseAction.NONE, ReleaseAction.WAIT) and self._due(r.component)
        ]
        # Releases the plan lets go now do not depend on each other.
        results = await asyncio.gather(*(self._release(r, target) for r in releases))
        return changed or any(results)

    async def _apply_manifests(self, m: PlannedManifests, target: Target) -> None:
        if m.url not in self.manifests:
            source = BY_NAME[m.component].manifests
            others = source.other_crds if source is not None else ()
            # Vetted before it is cached: a refused set is fetched afresh next time.
            self.manifests[m.url] = vet_manifests(
                await fetch_manifests(m.url), m.crds, others, m.url
            )
        for body in self.manifests[m.url]:
            await apply_object(target.client, stamp(body, m.digest))

    async def _release(self, release: PlannedRelease, target: Target) -> bool:
        verb = {
            ReleaseAction.INSTALL: "Install",
            ReleaseAction.UPGRADE: "Upgrade",
            ReleaseAction.REINSTALL: "Reinstall",
            ReleaseAction.ROLLBACK: "Rollback",
        }[release.action]
        # Minted (or taken from the cache) per release: helm gets a token
        # fresh enough for its run, never the identity's key.
        kubeconfig = await target.helm_kubeconfig()
        ok = await self._guard(
            release.component,
            self.helm.apply(release, kubeconfig),
            what=f"{verb.lower()} of release {release.name}",
        )
        if ok:
            self.emit(
                "Normal",
                f"{verb}Succeeded",
                f"{verb.lower()} of {release.name} {release.chart} {release.version} "
                f"in {release.namespace} succeeded",
            )
        return ok

    def _due(self, component: str) -> bool:
        backoff = self.backoff.get(component)
        return backoff is None or backoff.not_before <= self.clock()

    async def _guard(self, component: str, action: Any, what: str | None = None) -> bool:
        try:
            await action
        except WebhookNotReady as err:
            message = str(err)
            # One event when the wait starts or its cause changes, not one per
            # retry; the status carries it meanwhile.
            changed = self.failures.get(component) != message
            if changed:
                self.emit("Warning", WEBHOOK_NOT_READY, message)
            self.failures[component] = message
            self.waiting_on_webhook.add(component)
            backoff = self.backoff.setdefault(component, Backoff())
            backoff.fail(self.clock(), cap=WEBHOOK_RETRY_CAP)
            # Logged when the wait starts or changes; each retry only at DEBUG.
            log.log(
                logging.INFO if changed else logging.DEBUG,
                "%s; retry %d in %.0fs",
                message,
                backoff.attempts,
                backoff.not_before - self.clock(),
            )
            return False
        except (
            HelmError,
            ApiError,
            httpx2.HTTPStatusError,
            # Fetching manifests from an upstream release or a mirror.
            httpx2.HTTPError,
            yaml.YAMLError,
            ValueError,
        ) as err:
            message = f"{what or component} failed: {describe_error(err)}"
            changed = self.failures.get(component) != message
            self.failures[component] = message
            self.waiting_on_webhook.discard(component)
            self.backoff.setdefault(component, Backoff()).fail(self.clock())
            self.emit("Warning", "ActionFailed", message)
            # A failure that repeats on each backed-off retry is logged once.
            log.log(logging.WARNING if changed else logging.DEBUG, "%s", message)
            return False
        self.failures.pop(component, None)
        self.backoff.pop(component, None)
        self.waiting_on_webhook.discard(component)
        return True

    # -- teardown ------------------------------------------------------------

    async def teardown(self, body: dict[str, Any], waited_seconds: float) -> str | None:
        """One pass of teardown. Returns what it still waits for, or None when done."""
        try:
            stack = ServingStack.model_validate(_without_status(body))
        except ValidationError as err:
            raise InvalidSpecError(_first_error(err)) from err
        target = await self._target(stack)
        try:
            if not await claim.before_teardown(target.client, stack, self.emit):
                return None  # another stack's target: this one installed nothing there

            observed = await observe(target.client, stack.spec)
            steps = teardown_steps(plan(stack, observed, self.options.sources()), observed)
            give_up = waited_seconds > self.options.teardown_wait_seconds
            waiting = await self._carry_out(steps, target, give_up)
            if waiting is None:
                await claim.after_teardown(target.client, stack, self.emit)
        finally:
            await target.close()
        return waiting

    async def _carry_out(
        self, steps: list[TeardownStep], target: Target, give_up: bool
    ) -> str | None:
        """Do the steps in order, up to the first whose objects are still there."""
        for step in steps:
            if isinstance(step, UninstallRelease):
                await self._uninstall(step, target)
                continue
            remaining = await self._delete(step, target)
            if not (step.wait and remaining):
                continue
            if not give_up:
                return f"waiting for {', '.join(remaining)} to be deleted"
            self.emit(
                "Warning",
                "TeardownTimeout",
                f"gave up waiting for {', '.join(remaining)}; going on",
            )
        return None

    async def _delete(self, step: DeleteObjects, target: Target) -> list[str]:
        """Delete the step's objects; the ones still there (finalizers may hold them)."""
        remaining = []
        for ref in step.objects:
            still_there = await delete_object(target.client, ref.body())
            log.info("teardown: deleted %s", ref)
            if still_there:
                remaining.append(str(ref))
        return remaining

    async def _uninstall(self, step: UninstallRelease, target: Target) -> None:
        await self.helm.uninstall(step.release, step.namespace, await target.helm_kubeconfig())
        log.info("teardown: uninstalled release %s", step.release)
        self.emit(
            "Normal", "Uninstalled", f"uninstalled release {step.release} from {step.namespace}"
        )


def _identity_message(stack: ServingStack, err: IdentityError) -> str:
    entry = stack.spec.cloud_identity
    return f"the {entry.type if entry else 'cloud'} identity: {err.message}"


def _refused_identity(stack: ServingStack, code: int | None) -> str | None:
    """Say a 401 that stood after a fresh token as the identity's, or None otherwise.

    The token service vouched for the identity, so the target does not take
    it: most often the identity has no access to this cluster, or (EKS) the
    token was made for another cluster name than the target's own.
    """
    entry = stack.spec.cloud_identity
    if entry is None or code != 401:
        return None
    where = f"{entry.namespace}/{entry.name}" if entry.namespace else entry.name
    return (
        f"the target API server refused the {entry.type} identity (Secret {where}, key "
        f"{entry.key}) with 401 Unauthorized, also with a freshly minted token: give the "
        "identity access to this cluster (an EKS access entry for the role, RBAC for a "
        "GKE service account) and check that the kubeconfig's cluster name (or the "
        "identity's clusterName) is the cluster's own"
    )


def _without_status(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
