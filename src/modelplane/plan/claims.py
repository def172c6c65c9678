"""Who holds a DRA driver's claims, and whether its uninstall waits for them.

A pod whose ResourceClaim a DRA driver allocated is prepared on its node by
that driver's kubelet plugin, and only the plugin can unprepare it. Once the
driver is uninstalled, such a pod that terminates stays ``Terminating``: the
kubelet has no plugin to ask (kubernetes/kubernetes#137122). So the driver's
release is not uninstalled, by teardown or a reinstall, while pods hold its
claims; the wait is bounded by ``spec.claimWaitTimeout``, after which the
uninstall goes on and says so.

A claim is held when the driver allocated one of its devices
(``status.allocation.devices.results[].driver``) and a pod is among those it
is reserved for (``status.reservedFor``, which names consumers in the claim's
own namespace). The resourceclaim controller takes a pod out of
``reservedFor`` once it is gone or done, so the claims alone say who holds
them; no pod is read.

Pure: what a target sent is judged here as hostile input (any shape, any
length), and only names reach a message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from modelplane.plan.frozen import Frozen
from modelplane.untrusted import as_dict, printable

# A pod is a core-group resource: a consumer of another group or resource
# (a custom workload controller's object) is not a pod.
_POD_RESOURCE = "pods"
# Kubernetes caps both lists (ResourceClaimReservedForMaxSize 256,
# AllocationResultsMaxSize 32 in resource.k8s.io/v1); a hostile server may
# not, and what is read of one claim stays small.
MAX_RESERVED = 256
MAX_RESULTS = 32
# An object's namespace is at most 63 characters, its name 253.
_NAME = 253
# Pods named in one message; the rest are counted.
NAMED = 10


class Holder(Frozen):
    """A pod holding a claim the driver allocated."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClaimWait(StrEnum):
    """What an uninstall of the driver does about the pods holding its claims."""

    # No pod holds one: uninstall.
    FREE = "free"
    WAIT = "wait"
    # Pods hold some, and the wait has lasted spec.claimWaitTimeout: uninstall, and say so.
    TIMED_OUT = "timed-out"


def outline(claim: Mapping[str, Any]) -> dict[str, Any]:
    """Only what ``holders`` reads of a ResourceClaim: what a LIST keeps of each."""
    metadata = as_dict(claim.get("metadata"))
    status = as_dict(claim.get("status"))
    devices = as_dict(as_dict(status.get("allocation")).get("devices"))
    results = _list(devices.get("results"))[:MAX_RESULTS]
    reserved = _list(status.get("reservedFor"))[:MAX_RESERVED]
    return {
        "metadata": {k: metadata[k] for k in ("name", "namespace") if k in metadata},
        "status": {
            "allocation": {
                "devices": {"results": [{"driver": as_dict(r).get("driver")} for r in results]}
            },
            "reservedFor": [
                {k: as_dict(c).get(k) for k in ("apiGroup", "resource", "name")} for c in reserved
            ],
        },
    }


def holders(claims: Iterable[Mapping[str, Any]], driver: str) -> list[Holder]:
    """The pods holding claims ``driver`` allocated, each once, sorted by namespace and name."""
    found: set[Holder] = set()
    for claim in claims:
        if allocated_by(claim, driver):
            found.update(_pods_reserved(claim))
    return sorted(found, key=lambda h: (h.namespace, h.name))


def allocated_by(claim: Mapping[str, Any], driver: str) -> bool:
    """Whether ``driver`` allocated any device of the claim."""
    devices = as_dict(as_dict(as_dict(claim.get("status")).get("allocation")).get("devices"))
    results = _list(devices.get("results"))[:MAX_RESULTS]
    return any(as_dict(r).get("driver") == driver for r in results)


def _pods_reserved(claim: Mapping[str, Any]) -> list[Holder]:
    namespace = as_dict(claim.get("metadata")).get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return []
    pods: list[Holder] = []
    for consumer in _list(as_dict(claim.get("status")).get("reservedFor"))[:MAX_RESERVED]:
        c = as_dict(consumer)
        name = c.get("name")
        pod = c.get("resource") == _POD_RESOURCE and not c.get("apiGroup")
        if pod and isinstance(name, str) and name:
            pods.append(Holder(namespace=_shown(namespace), name=_shown(name)))
    return pods


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _shown(value: str) -> str:
    return printable(value, _NAME)


def claim_wait(held: Sequence[Holder], waited_seconds: float, timeout_seconds: float) -> ClaimWait:
    """Whether the uninstall waits: while pods hold claims, until the timeout has passed."""
    if not held:
        return ClaimWait.FREE
    return ClaimWait.TIMED_OUT if waited_seconds >= timeout_seconds else ClaimWait.WAIT


def named(held: Sequence[Holder], limit: int = NAMED) -> str:
    """The pods as a message names them: the first ``limit``, and how many more."""
    shown = ", ".join(str(h) for h in held[:limit])
    more = len(held) - limit
    return f"{shown} and {more} more" if more > 0 else shown


def held_message(release: str, driver: str, held: Sequence[Holder], timeout: str) -> str:
    """Why the release waits, with the pods: what ``ClaimsHeld`` says."""
    return (
        f"release {release} is not uninstalled while {_pods(len(held))} hold ResourceClaims "
        f"allocated by {driver} (a pod whose claim outlives the driver stays Terminating): "
        f"{named(held)}; waiting for them to go, at most spec.claimWaitTimeout ({timeout})"
    )


def timed_out_message(release: str, driver: str, held: Sequence[Holder], timeout: str) -> str:
    """What ``ClaimWaitTimeout`` says as the uninstall goes on."""
    return (
        f"spec.claimWaitTimeout ({timeout}) passed with {_pods(len(held))} still holding "
        f"ResourceClaims allocated by {driver}: {named(held)}; uninstalling release {release} "
        "anyway (such a pod may stay Terminating until the driver is back on its node)"
    )


def _pods(n: int) -> str:
    return "1 pod" if n == 1 else f"{n} pods"
