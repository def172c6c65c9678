"""Done, at work, or stalled: what Ready's reason means to kstatus, Flux and Argo CD.

Tools that wait on many kinds of object read a custom resource by two
abnormal-true conditions beside ``Ready`` (kstatus's conventions,
https://github.com/kubernetes-sigs/cli-utils/blob/master/pkg/kstatus/README.md):
``Reconciling`` while the controller works on the latest spec, ``Stalled``
once it cannot get there without someone changing something. Without them a
stack blocked for good reads as for ever in progress, and a waiting pipeline
waits out its timeout instead of failing.

A reason stalls only when no retry can clear it: the input is refused (the
spec, the kubeconfig, the identity's data, an address the operator may not
reach), another party must act first (the target is another stack's, a
release's storage was rewritten), or a workload made insufficient progress
as kstatus judges one (crash-looping, unschedulable, past its deadline).
Everything else is retried by the operator, and reads as Reconciling: a
missing Secret may come with the same apply, a token service or a target
may come back, a grant may still be propagating.
"""

from __future__ import annotations

from enum import StrEnum

from modelplane.faults import ErrorKind, Fault
from modelplane.vocabulary import BlockedReason, WorkloadReason


class Progress(StrEnum):
    """The stack as kstatus reads it (its status names: Current, InProgress, Failed)."""

    CURRENT = "Current"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


# Ready's reasons that no retry clears: Stalled while they stand.
STALLS: frozenset[str] = frozenset(
    {
        # Input the operator refuses, whatever the target does.
        BlockedReason.INVALID_SPEC,
        BlockedReason.KUBECONFIG_INVALID,
        BlockedReason.KUBECONFIG_REFUSED,
        BlockedReason.CROSS_NAMESPACE_REF_DENIED,
        BlockedReason.CLOUD_IDENTITY_UNSUPPORTED,
        BlockedReason.IDENTITY_INVALID,
        BlockedReason.TARGET_ADDRESS_DENIED,
        # Someone else must act first (troubleshooting.md says who).
        BlockedReason.TARGET_CLAIMED,
        BlockedReason.TARGET_COLLECTION_TOO_LARGE,
        BlockedReason.RELEASE_STORAGE_TAMPERED,
        # The target runs what a release would clash with: removed or adopted.
        BlockedReason.CONFLICTS_FOUND,
        # A node agent's roll stopped at a node: a version that works is set.
        BlockedReason.NODE_AGENT_FAILED,
        WorkloadReason.RELEASE_OUTSIDE_NAMESPACE,
        # kstatus's own Failed for a workload: insufficient progress.
        WorkloadReason.POD_CRASH_LOOPING,
        WorkloadReason.IMAGE_PULL_FAILED,
        WorkloadReason.CONTAINER_CONFIG_ERROR,
        WorkloadReason.UNSCHEDULABLE,
        WorkloadReason.JOB_FAILED,
        WorkloadReason.PROGRESS_DEADLINE_EXCEEDED,
        WorkloadReason.WORKLOAD_UNAVAILABLE,
    }
)


def action_refused(fault: Fault) -> bool:
    """Whether a component's failed action fails the same way however often it is retried.

    A chart CRD upgrade refused (plan.chart_crds), an object the target
    rejects as invalid: input that does not get better by itself.
    """
    return fault.kind is ErrorKind.INVALID


def progress(ready: bool, reason: str, refused: bool = False) -> Progress:
    """Where a stack stands, from Ready's status and reason.

    ``refused``: some component's failed action is one no retry clears
    (``action_refused``), which Ready says only as ``ActionFailed``.
    """
    if ready:
        return Progress.CURRENT
    if reason in STALLS:
        return Progress.STALLED
    if refused and reason == BlockedReason.ACTION_FAILED:
        return Progress.STALLED
    return Progress.RECONCILING


def said(state: Progress, ready_message: str) -> tuple[str, str]:
    """The messages of Reconciling and Stalled: the True one carries Ready's words."""
    reconciling = ready_message if state is Progress.RECONCILING else "no work in progress"
    stalled = ready_message if state is Progress.STALLED else "not stalled"
    return reconciling, stalled
