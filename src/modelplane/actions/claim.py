"""The claim on a target: one ServingStack at a time acts on a target cluster.

Two ServingStacks that point at one target (from one hub or two) would each
upgrade the shared releases to their own values on every resync, without
end. So before a reconcile or a teardown writes anything to a target, the
target must name its ServingStack as the owner.

The claim is a ``coordination.k8s.io/v1`` Lease, ``modelplane-claim`` in
``modelplane-system``, whose ``holderIdentity`` is ``namespace/name/uid`` of
the owning ServingStack on its hub. A Lease because it is the Kubernetes
object that says who holds something: every cluster serves it without a CRD
(a Provided target must be claimed before anything is applied to it), and
``kubectl get lease`` prints the holder. The UID, made by the hub's API
server, keeps two hubs' ``platform/west`` apart; the namespace and name tell
a person where to look. A ``modelplane apply`` run from a laptop, without a
hub, claims the target as ``cli:user@host`` (``LocalRun``): the same Lease,
so a laptop and a hub refuse each other rather than fight over one cluster.

The claim never expires and is not renewed: a no-op resync reads it (one GET)
and writes nothing, and an owner whose hub is down for a while does not lose
its target to a competitor that would then fight it when it comes back. A
claim whose owner is gone for good (deleted with the skip-teardown
annotation, or its hub lost) is therefore left to a person: the blocked
stack's condition names the owner and says how to release the claim.
"""

from __future__ import annotations

import datetime
import getpass
import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from pydantic import BaseModel, ConfigDict

from modelplane.actions.apply import apply_object
from modelplane.api.models import ServingStack
from modelplane.api.status_limits import CLAIM_HOLDER
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE, configuration_for
from modelplane.kube.client import TargetError
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.kube.resources import unless_missing
from modelplane.untrusted import printable
from modelplane.vocabulary import BlockedReason, EventReason
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL, stamp

log = logging.getLogger("modelplane.operator.claim")

Emit = Callable[
    [str, EventReason, str], None
]  # (type, reason, message) -> event on the ServingStack

# The Ready reason of a stack whose target another ServingStack holds.
TARGET_CLAIMED = BlockedReason.TARGET_CLAIMED
# Attempts at acquiring a free claim: each lost race re-reads the holder, so
# more than one is only needed when the claim is freed again right away.
ACQUIRE_ATTEMPTS = 3


class StackIdentity(BaseModel):
    """A ServingStack on some hub, as a claim names it."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, stack: ServingStack) -> StackIdentity:
        uid = (stack.metadata.model_extra or {}).get("uid")
        if not uid:
            # Every object read from a hub has one; a claim without it could
            # not tell two hubs' stacks of one name apart.
            raise ValueError("metadata.uid: a ServingStack from the hub always has one; missing")
        return cls(namespace=stack.metadata.namespace, name=stack.metadata.name, uid=str(uid))

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}/{self.uid}"

    def __str__(self) -> str:
        return f"ServingStack {self.namespace}/{self.name} (uid {self.uid})"


# A laptop's holder: ``cli:`` and a user and host name of these characters.
LOCAL_PREFIX = "cli:"
_LOCAL_PART = re.compile(r"[^A-Za-z0-9._-]")
# Each of user and host is cut to this many characters, so the holder is
# bounded (far below CLAIM_HOLDER) whatever the machine is called.
LOCAL_PART_MAX = 63


class Claimant(Protocol):
    """Whoever acts on a target: what its claim's ``holderIdentity`` says."""

    @property
    def holder(self) -> str: ...


class LocalRun(BaseModel):
    """A ``modelplane apply`` or ``delete`` run by a person, without a hub.

    Named by user and host, so that the same person's next run (or their
    ``delete``) holds the claim, and anyone else's is refused.
    """

    model_config = ConfigDict(frozen=True)

    user: str
    host: str

    @classmethod
    def here(cls) -> LocalRun:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry and no $USER
            user = "unknown"
        return cls.of(user, socket.gethostname())

    @classmethod
    def of(cls, user: str, host: str) -> LocalRun:
        def clean(part: str) -> str:
            return _LOCAL_PART.sub("-", part)[:LOCAL_PART_MAX] or "unknown"

        return cls(user=clean(user), host=clean(host))

    @property
    def holder(self) -> str:
        return f"{LOCAL_PREFIX}{self.user}@{self.host}"

    def __str__(self) -> str:
        return f"modelplane apply run by {self.user}@{self.host}"


class ClaimState(StrEnum):
    """Who holds a target, as seen from one ServingStack."""

    OURS = "Ours"  # it names this stack: act
    FREE = "Free"  # no Lease, or one that names nobody: acquire, then act
    HELD = "Held"  # it names another stack: write nothing


def decide(holder: str | None, ours: Claimant) -> ClaimState:
    """The state of the claim whose Lease names ``holder`` (None: no Lease)."""
    if not holder:
        # Kubernetes' own leader election releases a Lease by emptying the
        # holder, so an empty holder is a free claim, whoever emptied it.
        return ClaimState.FREE
    return ClaimState.OURS if holder == ours.holder else ClaimState.HELD


def _parse(holder: str) -> StackIdentity | None:
    namespace, _, rest = holder.partition("/")
    name, _, uid = rest.partition("/")
    if namespace and name and uid and "/" not in uid:
        return StackIdentity(namespace=namespace, name=name, uid=uid)
    return None


def describe_holder(holder: str) -> str:
    """The owner as a person reads it; a holder we did not write is shown as is.

    Whoever can write the target's Lease writes the holder, so what is shown
    of it is printable and cut, whatever it holds.
    """
    owner = _owner(holder)
    shown = str(owner) if owner is not None else f"holder {holder!r}"
    return printable(shown, CLAIM_HOLDER)


def _owner(holder: str) -> StackIdentity | LocalRun | None:
    """The holder as one of ours wrote it; None for anything else."""
    if len(holder) > CLAIM_HOLDER:
        return None
    if holder.startswith(LOCAL_PREFIX):
        user, at, host = holder[len(LOCAL_PREFIX) :].partition("@")
        local = LocalRun.of(user, host) if at else None
        return local if local is not None and local.holder == holder else None
    return _parse(holder)


def blocked_message(holder: str, ours: Claimant) -> str:
    """The Ready message of a stack blocked by another owner: stable, so a
    resync that finds the same owner writes no status."""
    owner = _owner(holder)
    if isinstance(owner, LocalRun):
        # Nothing on a hub to delete: the person who ran it hands it over.
        return (
            f"the target is claimed by {owner} (Lease {CLAIM_NAMESPACE}/{CLAIM_NAME} on the "
            "target); two owners of one target would overwrite each other's releases, so "
            f"this one writes nothing there. To hand the target over, run modelplane delete "
            f"as {owner.user} on {owner.host}, or, if that run is gone for good, release the "
            f"claim by hand on the target: kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}"
        )
    namesake = ""
    if (
        isinstance(owner, StackIdentity)
        and isinstance(ours, StackIdentity)
        and (owner.namespace, owner.name) == (ours.namespace, ours.name)
    ):
        # Looks like "claimed by myself" at a glance; say what it is.
        namesake = (
            ", which has this ServingStack's name but another UID: an earlier "
            "ServingStack of this name, or one on another hub"
        )
    return (
        f"the target is claimed by {describe_holder(holder)}{namesake} (Lease "
        f"{CLAIM_NAMESPACE}/{CLAIM_NAME} on the target); two ServingStacks on one "
        "target would overwrite each other's releases, so this one writes nothing "
        "there. To hand the target over, delete the owner: its teardown releases the "
        "claim. If the owner is gone "
        "(deleted with modelplane.ai/skip-teardown, or its hub is lost), release the "
        f"claim by hand on the target: kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}"
    )


def already_reported(status: Mapping[str, Any] | None, message: str) -> bool:
    """True when the hub's status already says the stack is blocked by this owner.

    The Warning event goes out once per owner, not once per resync, and the
    status on the hub (not operator memory) remembers it across restarts.
    """
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("reason") == TARGET_CLAIMED and cond.get("message") == message)
    return False


class ClaimContendedError(KnownError):
    """The claim kept changing hands while this stack tried to take it."""

    kind = ErrorKind.CLAIM_CONTENDED


@dataclass(frozen=True)
class Blocked:
    """The reconcile stops here: another stack holds the target."""

    reason: BlockedReason
    message: str


# -- on the target -----------------------------------------------------------


async def before_reconcile(
    client: AsyncClient,
    stack: ServingStack,
    emit: Emit,
    status: Mapping[str, Any] | None,
    ours: Claimant | None = None,
) -> Blocked | None:
    """Hold the claim before acting; None when this stack holds it.

    ``ours`` is who claims: the stack on its hub unless given (``LocalRun``).
    """
    ours = ours or StackIdentity.of(stack)
    holder = await _hold(client, stack, emit, ours)
    if holder is None:
        return None
    message = blocked_message(holder, ours)
    if not already_reported(status, message):
        emit("Warning", EventReason.TARGET_CLAIMED, message)
    return Blocked(TARGET_CLAIMED, message)


async def before_teardown(
    client: AsyncClient, stack: ServingStack, emit: Emit, ours: Claimant | None = None
) -> bool:
    """True when teardown may touch the target: this stack holds (or took) the claim.

    A stack that another one's claim blocked never installed anything there,
    so its deletion leaves the owner's releases and objects alone. A free
    claim is taken first, so no other stack starts installing while this one
    uninstalls.
    """
    holder = await _hold(client, stack, emit, ours or StackIdentity.of(stack))
    if holder is None:
        return True
    emit(
        "Normal",
        EventReason.TEARDOWN_SKIPPED,
        f"the target is claimed by {describe_holder(holder)}: this ServingStack never "
        "acted on it, so its deletion leaves the target as it is",
    )
    return False


async def after_teardown(
    client: AsyncClient, stack: ServingStack, emit: Emit, ours: Claimant | None = None
) -> None:
    """Release the claim, the last step of teardown: only if it still names us."""
    ours = ours or StackIdentity.of(stack)
    lease = await _read(client)
    if lease is None or decide(_holder_of(lease), ours) is not ClaimState.OURS:
        return
    # lightkube's delete sends no preconditions. Between the read and the
    # delete the holder could change only if a person deleted the Lease and
    # another stack claimed the target in those milliseconds.
    try:
        await client.delete(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
    except ApiError as err:
        if err.status.code != 404:
            raise
        return
    log.info("teardown: released the claim on the target (%s)", ours)
    emit(
        "Normal",
        EventReason.CLAIM_RELEASED,
        f"released the target: Lease {CLAIM_NAMESPACE}/{CLAIM_NAME}",
    )


async def _hold(client: AsyncClient, stack: ServingStack, emit: Emit, ours: Claimant) -> str | None:
    """Make sure the claim names ``ours``; the other holder when it cannot."""
    lease = await _read(client)
    for _ in range(ACQUIRE_ATTEMPTS):
        holder = _holder_of(lease)
        state = decide(holder, ours)
        if state is ClaimState.OURS:
            return None
        if state is ClaimState.HELD:
            return holder
        if await _acquire(client, stack, ours, lease):
            log.info("claimed the target for %s", ours)
            emit(
                "Normal",
                EventReason.CLAIM_ACQUIRED,
                f"claimed the target: Lease {CLAIM_NAMESPACE}/{CLAIM_NAME} names "
                f"{'this ServingStack' if isinstance(ours, StackIdentity) else ours} as its owner",
            )
            return None
        # Lost a race: someone else wrote the Lease in between. Whoever won
        # is what the next read says.
        log.debug("%s lost the race for the claim; reading it again", ours)
        lease = await _read(client)
    holder = _holder_of(lease)
    if decide(holder, ours) is ClaimState.FREE:
        raise ClaimContendedError(
            f"Lease {CLAIM_NAMESPACE}/{CLAIM_NAME} on the target was freed and taken "
            f"{ACQUIRE_ATTEMPTS} times while this ServingStack tried to claim it; trying later"
        )
    return None if decide(holder, ours) is ClaimState.OURS else holder


async def _acquire(
    client: AsyncClient, stack: ServingStack, ours: Claimant, lease: Lease | None
) -> bool:
    """Write the claim atomically; False when another writer got there first."""
    now = datetime.datetime.now(datetime.UTC)
    try:
        if lease is None:
            await _create(client, stack, _new_lease(ours, now))
        else:
            # A Lease that names nobody: replacing it at the resourceVersion
            # read is atomic, as a create is for an absent one.
            spec = lease.spec or LeaseSpec()
            spec.holderIdentity = ours.holder
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            lease.spec = spec
            await client.replace(lease)
    except ApiError as err:
        if err.status.code == 409:  # AlreadyExists, or Conflict on the resourceVersion
            return False
        raise
    return True


async def _create(client: AsyncClient, stack: ServingStack, lease: Lease) -> None:
    try:
        await client.create(lease)
        return
    except ApiError as err:
        if err.status.code != 404:
            raise
    # The namespace is missing. Created as the configuration would create it,
    # so the plan finds it in place and teardown removes it with the rest.
    await apply_object(client, stamp(namespace_body(stack)))
    await client.create(lease)


def namespace_body(stack: ServingStack) -> dict[str, Any]:
    """The product's namespace, as the stack's configuration declares it."""
    for config in configuration_for(stack.spec):
        meta = config.body["metadata"]
        if config.body["kind"] == "Namespace" and meta["name"] == CLAIM_NAMESPACE:
            return config.body
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLAIM_NAMESPACE}}


def _new_lease(ours: Claimant, now: datetime.datetime) -> Lease:
    return Lease(
        metadata=ObjectMeta(
            name=CLAIM_NAME,
            namespace=CLAIM_NAMESPACE,
            labels={MANAGED_BY_LABEL: MANAGED_BY},
        ),
        # No leaseDurationSeconds: the claim does not expire (see the module).
        spec=LeaseSpec(holderIdentity=ours.holder, acquireTime=now, leaseTransitions=0),
    )


async def _read(client: AsyncClient) -> Lease | None:
    lease = await unless_missing(lambda: client.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE))
    if lease is None:
        return None
    # lightkube decodes any JSON object as the kind asked for; something
    # that is not our Lease must not be replaced as if it were one.
    if lease.metadata is None or lease.metadata.name != CLAIM_NAME:
        raise TargetError(
            f"GET Lease {CLAIM_NAMESPACE}/{CLAIM_NAME}: the target answered with an object "
            "that is not that Lease"
        )
    return lease


def _holder_of(lease: Lease | None) -> str | None:
    if lease is None or lease.spec is None:
        return None
    return lease.spec.holderIdentity
