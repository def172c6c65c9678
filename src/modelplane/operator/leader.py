"""Leader election among replicas of one operator shard, on a hub Lease.

Only the replica that holds the ``coordination.k8s.io/v1`` Lease starts
kopf; the others wait, watching nothing and writing nothing but their tries
at the Lease. The algorithm is client-go's (``k8s.io/client-go/tools/
leaderelection``, defaults 15 s / 10 s / 2 s as controller-runtime uses):

- a candidate takes the Lease when it names nobody, or when the record has
  not changed for ``lease_duration`` as measured on the candidate's own clock
  (renewTime written by another machine is never compared with ours, so the
  election tolerates clock skew);
- every write is a create or a replace at the resourceVersion read, so two
  candidates can never both win one round;
- the leader renews every ``retry_period``; when it has not renewed for
  ``renew_deadline`` (< ``lease_duration``) it steps down by exiting at once,
  killing the helm runs in flight first (their process groups, which
  ``actions.helm.Helm`` owns). It therefore stops acting before any
  standby may take over, which is the split-brain margin a renew failure
  (a partitioned leader) gets: lease_duration - renew_deadline;
- on an orderly shutdown it empties the Lease, so a standby takes over
  within one retry period instead of a full lease duration.

Like client-go's, this is no fencing: it relies on the leader's own clock
running at about the rate of the standby's.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from prometheus_client import Gauge
from pydantic import BaseModel, ConfigDict, Field, model_validator

from modelplane.backoff import Attempts, Backoff
from modelplane.kube.answers import describe_error
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

log = logging.getLogger("modelplane.operator.leader")

LEADER = Gauge(
    "modelplane_leader",
    "1 while this replica holds its shard's leader Lease and reconciles; 0 while it stands by.",
)

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LEASE_PREFIX = "modelplane-operator"


class LeaderElection(BaseModel):
    """Where the Lease lives and its timing; see the module for the algorithm."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    identity: str = Field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)

    @model_validator(mode="after")
    def _margins(self) -> LeaderElection:
        # The leader must give up before a standby may take over.
        if self.renew_deadline_seconds >= self.lease_duration_seconds:
            raise ValueError(
                "the renew deadline must be shorter than the lease duration "
                f"({self.renew_deadline_seconds} >= {self.lease_duration_seconds})"
            )
        if self.retry_period_seconds >= self.renew_deadline_seconds:
            raise ValueError(
                "the retry period must be shorter than the renew deadline "
                f"({self.retry_period_seconds} >= {self.renew_deadline_seconds})"
            )
        return self


def lease_name(namespaces: list[str], selector: str | None) -> str:
    """The Lease of one shard: replicas of a shard share it, shards never do."""
    if not namespaces and not selector:
        return LEASE_PREFIX
    shard = "\n".join([*sorted(set(namespaces)), f"selector={selector or ''}"])
    return f"{LEASE_PREFIX}-{hashlib.sha256(shard.encode()).hexdigest()[:10]}"


def default_namespace(watched: list[str]) -> str:
    """The operator's own namespace in a pod, else the first watched one, else default."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        pass
    return watched[0] if watched else "default"


def retry_policy(config: LeaderElection) -> Backoff:
    """client-go's fixed retry period, between tries at the Lease by leader and standby alike."""
    period = config.retry_period_seconds
    # A factor of 1, not just the cap: a standby's count of tries has no end,
    # and a growing factor would overflow a float after a thousand of them.
    return Backoff(first=period, cap=period, factor=1.0)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Elector:
    """One candidate for one Lease."""

    def __init__(
        self,
        hub: AsyncClient,
        config: LeaderElection,
        step_down: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hub = hub
        self._cfg = config
        self._step_down = step_down or exit_now
        # This replica's own clock, never compared with another's: when a
        # record was seen to change, and how long renewals have failed.
        self._clock = clock
        self._period = retry_policy(config)
        # client-go's observedRecord/observedTime: expiry is judged by when we
        # saw the record change, on our clock.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leading = False
        # What a standby learnt at its last try, for /readyz: the holder it
        # found, or why the Lease could not be read.
        self._holder_seen: str | None = None
        self._error: str | None = None
        LEADER.set(0)

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def lease(self) -> str:
        return f"{self._cfg.namespace}/{self._cfg.name}"

    @property
    def standing_by_for(self) -> str | None:
        """The other replica holding the Lease, as this standby's last try found it.

        None while leading, before the first try, and after a try that failed:
        a standby that cannot reach its Lease could not take over either.
        """
        if self._leading or self._error is not None:
            return None
        return self._holder_seen

    @property
    def error(self) -> str | None:
        """Why the last try at the Lease failed; None when it was answered."""
        return self._error

    async def acquire(self) -> None:
        """Return once this replica holds the Lease."""
        cfg = self._cfg
        waiting_for: str | None = None
        tries = Attempts(self._period)
        while True:
            try:
                holder = await self.try_once()
                self._error = None
            except Exception as err:  # the hub may be unreachable: try again
                self._error = describe_error(err)
                log.warning("leader election: %s", self._error)
                holder = None
            if holder is not None:
                self._holder_seen = holder
            if holder == cfg.identity:
                self._leading = True
                LEADER.set(1)
                log.info(
                    "leader election: %s holds Lease %s/%s", cfg.identity, cfg.namespace, cfg.name
                )
                return
            if holder is not None and holder != waiting_for:
                waiting_for = holder
                log.info(
                    "leader election: Lease %s/%s is held by %s; standing by",
                    cfg.namespace,
                    cfg.name,
                    holder,
                )
            await asyncio.sleep(tries.fail())

    async def hold(self) -> None:
        """Renew until cancelled; step down when a renewal cannot be made in time."""
        cfg = self._cfg
        renewed = self._clock()
        # The failed renewals since the last that held. The period is fixed,
        # so the next try is due one retry period on whatever the last gave.
        unrenewed = Attempts(self._period)
        delay = self._period.delay(0)
        while True:
            await asyncio.sleep(delay)
            left = cfg.renew_deadline_seconds - (self._clock() - renewed)
            holder: str | None = None
            try:
                async with asyncio.timeout(max(left, 0.01)):
                    holder = await self.try_once()
            except TimeoutError:
                pass
            except Exception as err:  # reported, then retried until the deadline
                log.warning("leader election: renewing failed: %s", describe_error(err))
            if holder == cfg.identity:
                renewed = self._clock()
                unrenewed.reset()
                delay = self._period.delay(0)
                continue
            if holder is not None or self._clock() - renewed >= cfg.renew_deadline_seconds:
                self._leading = False
                LEADER.set(0)
                log.error(
                    "leader election: lost Lease %s/%s (%s); stepping down",
                    cfg.namespace,
                    cfg.name,
                    f"now held by {holder}"
                    if holder
                    else f"not renewed for {cfg.renew_deadline_seconds:g}s",
                )
                self._step_down()
                return
            delay = unrenewed.fail()

    async def release(self) -> None:
        """Empty the Lease we hold so that a standby need not wait for it to expire."""
        if not self._leading:
            return
        self._leading = False
        LEADER.set(0)
        cfg = self._cfg
        try:
            lease = await self._hub.get(Lease, cfg.name, namespace=cfg.namespace)
            if lease.spec is None or lease.spec.holderIdentity != cfg.identity:
                return
            lease.spec.holderIdentity = None
            lease.spec.leaseDurationSeconds = 1
            lease.spec.renewTime = _now()
            await self._hub.replace(lease)
            log.info("leader election: released Lease %s/%s", cfg.namespace, cfg.name)
        except Exception as err:  # the standby then waits out the lease duration
            log.warning("leader election: releasing failed: %s", describe_error(err))

    async def try_once(self) -> str | None:
        """One round of client-go's tryAcquireOrRenew; the holder after it.

        None when the round lost a race for the Lease to another writer.
        """
        cfg = self._cfg
        now = _now()
        try:
            lease = await self._hub.get(Lease, cfg.name, namespace=cfg.namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
            return await self._create(now)
        spec = lease.spec
        assert spec is not None and lease.metadata is not None
        record = (
            spec.holderIdentity,
            str(spec.renewTime),
            spec.leaseDurationSeconds,
            lease.metadata.resourceVersion,
        )
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        holder = spec.holderIdentity
        duration = spec.leaseDurationSeconds or cfg.lease_duration_seconds
        expired = self._clock() - self._observed_at >= duration
        if holder and holder != cfg.identity and not expired:
            return holder
        if holder != cfg.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = cfg.identity
        spec.leaseDurationSeconds = int(cfg.lease_duration_seconds)
        spec.renewTime = now
        try:
            # At the resourceVersion read: a concurrent writer makes this 409.
            written = await self._hub.replace(lease)
        except ApiError as err:
            if err.status.code == 409:
                return None
            raise
        self._remember(written)
        return cfg.identity

    async def _create(self, now: datetime.datetime) -> str | None:
        cfg = self._cfg
        lease = Lease(
            metadata=ObjectMeta(
                name=cfg.name, namespace=cfg.namespace, labels={MANAGED_BY_LABEL: MANAGED_BY}
            ),
            spec=LeaseSpec(
                holderIdentity=cfg.identity,
                leaseDurationSeconds=int(cfg.lease_duration_seconds),
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            ),
        )
        try:
            written = await self._hub.create(lease)
        except ApiError as err:
            if err.status.code == 409:  # another candidate created it first
                return None
            raise
        self._remember(written)
        return cfg.identity

    def _remember(self, lease: Lease) -> None:
        spec = lease.spec
        assert spec is not None and lease.metadata is not None
        self._observed = (
            spec.holderIdentity,
            str(spec.renewTime),
            spec.leaseDurationSeconds,
            lease.metadata.resourceVersion,
        )
        self._observed_at = self._clock()


def exit_now(stop_acting: Callable[[], None] = lambda: None) -> None:
    """Step down: stop acting at once, before a standby can take the Lease.

    ``stop_acting`` first ends what acts for this replica outside the
    process (the operator passes ``Helm.kill_running``): an exit does not
    end helm, which runs in process groups of its own. An orderly kopf
    shutdown waits for daemons (up to their cancellation timeout), which
    could outlast the lease, so the process exits and its supervisor (the
    pod's restart policy) starts it again as a candidate.
    """
    stop_acting()
    logging.shutdown()
    os._exit(1)
