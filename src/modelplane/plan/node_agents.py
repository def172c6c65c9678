"""Rolling a node agent a node at a time, as pure decisions.

A node agent (the DRA driver's kubelet plugin, the NFD worker;
``catalog.types.NodeAgent``) is installed with the OnDelete update
strategy, so ``helm upgrade`` changes its DaemonSet's template and restarts
nothing. The operator then restarts its pods itself, one step per
reconcile (``next_step``): delete the pod of one node still on an old
revision, wait until that node is served again (its new pod Ready at the
current revision, and the proof its component names: the node's
ResourceSlices republished with the same devices, or any on a node that
published none before, or NFD's labels kept), then the next. Never more
than ``max_unavailable`` nodes are without a Ready agent, counting those
that were so before the roll (a DRA plugin Ready on a node that publishes
no slice serves no GPU: it counts). A node where pods holding allocated
DRA claims are terminating is not restarted while they are (Kubernetes
#137122: such a pod hangs until a plugin answers on its node). A node
not served again within ``timeout`` stops the roll there (``Failed``),
naming it: the other nodes keep the old agent.

Nothing here reads the cluster or a clock: ``operator.node_agents`` reads
the DaemonSet's current revision, its pods, each node's proof and the
terminating claim pods, and keeps what a node proved before its restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from modelplane.catalog.types import Component, NodeProof
from modelplane.faults import ErrorKind, KnownError
from modelplane.plan.model import Work
from modelplane.plan.release_health import ReleaseWorkload
from modelplane.plan.workloads import Kind
from modelplane.vocabulary import BlockedReason

# The label the DaemonSet controller puts on each pod: its template's revision.
REVISION_LABEL = "controller-revision-hash"
# How many names a message lists before it counts the rest.
MAX_NAMED = 3


class NodeAgentFailed(KnownError):
    """A node agent's roll stopped at a node: the component's action failed there.

    A retry decides again from what the nodes show (a node that recovers
    lets the roll go on); the version that failed is a person's to change.
    """

    kind = ErrorKind.INVALID

    def condition_reason(self) -> str | None:
        return BlockedReason.NODE_AGENT_FAILED


class StepKind(StrEnum):
    RESTART = "Restart"  # delete the old-revision pod on ``node``
    WAIT = "Wait"  # for ``node``, ``why``
    DONE = "Done"
    FAILED = "Failed"  # at ``node``, ``why``


@dataclass(frozen=True)
class AgentPod:
    """One pod of the agent's DaemonSet, as far as the roll reads it."""

    name: str
    node: str
    revision: str  # its controller-revision-hash label
    ready: bool
    created: datetime | None = None
    deleting: bool = False


@dataclass(frozen=True)
class NodeState:
    """One node the agent runs on, or ran on before the operator restarted it.

    ``proof``: what the node shows now (device names of its slices, or its
    NFD vendor labels). ``before``: what it showed when the operator
    restarted its pod; None when that is not known (not restarted in this
    roll, or by an operator that has since restarted). ``restarted``: when
    the operator deleted its old pod, if it remembers. ``claims_terminating``:
    the pods on the node holding DRA claims that are being deleted, and
    ``claims_since`` the earliest of their deletions.
    """

    name: str
    pods: tuple[AgentPod, ...] = ()
    proof: frozenset[str] = frozenset()
    before: frozenset[str] | None = None
    restarted: datetime | None = None
    claims_terminating: tuple[str, ...] = ()
    claims_since: datetime | None = None


@dataclass(frozen=True)
class Roll:
    """What one step of a roll is decided from."""

    daemon_set: str  # "namespace/name", for the messages
    revision: str  # the DaemonSet's current revision (controller-revision-hash)
    nodes: tuple[NodeState, ...]
    proof: NodeProof
    max_unavailable: int
    timeout: timedelta
    now: datetime


@dataclass(frozen=True)
class Step:
    kind: StepKind
    node: str | None = None
    pod: str | None = None  # the pod to delete, for RESTART
    why: str = ""
    # Nodes on the current revision and served, of all the agent's nodes.
    done: int = 0
    total: int = 0


@dataclass(frozen=True)
class _Judged:
    state: NodeState
    current: AgentPod | None  # its pod at the current revision, not being deleted
    old: AgentPod | None  # its pod at an older revision, not being deleted
    serving: bool
    failure: str | None = None
    waiting: str = ""  # why it is not served yet, while its restart is under way


def _words(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    more = len(names) - MAX_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def _seconds(span: timedelta) -> str:
    return f"{span.total_seconds():g}s"


def _proof_problem(roll: Roll, node: NodeState) -> str | None:
    """What the node's proof lacks now, against what it showed before; None when served."""
    if roll.proof is NodeProof.SLICES and not node.proof:
        # Whatever it showed before: a plugin whose node publishes no slice serves nothing.
        return "its ResourceSlices are not published again"
    if not node.before or node.proof == node.before:
        # Not known (the operator restarted since), or nothing before: what
        # shows now is the best sign left, and a node that never had any NFD
        # labels is not asked for them.
        return None
    if not node.proof:
        return "lost its NFD labels"
    changes = [
        f"{verb} {_words(sorted(names))}"
        for verb, names in (
            ("lost", node.before - node.proof),
            ("gained", node.proof - node.before),
        )
        if names
    ]
    what = "devices" if roll.proof is NodeProof.SLICES else "labels"
    return f"its {what} changed: {', '.join(changes)}"


def _shows_served(roll: Roll, node: NodeState) -> bool:
    """Whether a node not restarted yet shows its proof: a GPU node's plugin publishes slices."""
    return roll.proof is not NodeProof.SLICES or bool(node.proof)


def _lapsed(roll: Roll, node: NodeState) -> str | None:
    """NFD labels that must never lapse and did: a failure at once, however early."""
    if roll.proof is not NodeProof.LABELS or node.before is None:
        return None
    lost = sorted(node.before - node.proof)
    if not lost:
        return None
    return f"lost NFD label{'s' if len(lost) > 1 else ''} {_words(lost)} the DRA plugin selects on"


def _timed(roll: Roll, j: _Judged, started: datetime | None, waiting: str, failed: str) -> _Judged:
    """``j`` waiting, or failed once its restart is older than the roll's timeout."""
    if started is not None and roll.now - started > roll.timeout:
        return replace(j, failure=f"{failed} within {_seconds(roll.timeout)} of its restart")
    return replace(j, waiting=waiting)


def _judge(roll: Roll, node: NodeState) -> _Judged:
    live = [p for p in node.pods if not p.deleting]
    current = next((p for p in live if p.revision == roll.revision), None)
    old = next((p for p in live if p.revision != roll.revision), None)
    j = _Judged(node, current, old, serving=False)
    lapsed = _lapsed(roll, node)
    if lapsed is not None:
        return replace(j, failure=lapsed)
    restarting = node.restarted is not None or any(p.deleting for p in node.pods)
    if current is None and old is not None and not restarting:
        # Not started on this node: served as it was, if its pod is Ready and
        # the node shows it (a plugin Ready that publishes nothing serves no GPU).
        return replace(j, serving=old.ready and _shows_served(roll, node))
    started = min(
        (t for t in (node.restarted, current.created if current else None) if t is not None),
        default=None,
    )
    if current is None:
        return _timed(
            roll, j, started, "no agent pod of the current revision there yet",
            "no agent pod of the current revision started",
        )  # fmt: skip
    if not current.ready:
        what = f"agent pod {current.name} is not Ready"
        return _timed(roll, j, started, what, f"agent pod {current.name} not Ready")
    problem = _proof_problem(roll, node)
    if problem is None:
        return replace(j, serving=True)
    return _timed(roll, j, started, problem, problem)


def _choose(roll: Roll, judged: list[_Judged]) -> tuple[StepKind, str | None, str, str | None]:
    """(kind, node, why, pod to delete) of the next step."""
    failed = next((j for j in judged if j.failure is not None), None)
    if failed is not None:
        return StepKind.FAILED, failed.state.name, failed.failure or "", None
    unavailable = sum(1 for j in judged if not j.serving)
    # On an old revision, not restarted yet; one not Ready before its restart
    # is restarted first: that takes nothing more away.
    pending = sorted(
        (j for j in judged if j.current is None and j.old is not None and not j.waiting),
        key=lambda j: j.serving,
    )
    for j in pending:
        if j.serving and unavailable >= roll.max_unavailable:
            break
        if not j.state.claims_terminating:
            assert j.old is not None
            return StepKind.RESTART, j.state.name, "", j.old.name
    in_flight = [j for j in judged if j.waiting]
    if in_flight:
        return StepKind.WAIT, in_flight[0].state.name, in_flight[0].waiting, None
    blocked = [j for j in pending if j.state.claims_terminating]
    if blocked:
        return _claims_wait(roll, blocked[0].state)
    if pending:
        why = f"{unavailable} node(s) without a Ready agent, at most {roll.max_unavailable}"
        return StepKind.WAIT, pending[0].state.name, why, None
    return StepKind.DONE, None, "", None


def _claims_wait(roll: Roll, node: NodeState) -> tuple[StepKind, str | None, str, str | None]:
    pods = _words(sorted(node.claims_terminating))
    since = node.claims_since
    if since is not None and roll.now - since > roll.timeout:
        why = (
            f"pods holding DRA claims still terminating {_seconds(roll.timeout)} after their "
            f"deletion: {pods}"
        )
        return StepKind.FAILED, node.name, why, None
    why = (
        f"pods holding allocated DRA claims are terminating there ({pods}); its agent is "
        "restarted once they are gone"
    )
    return StepKind.WAIT, node.name, why, None


def next_step(roll: Roll) -> Step:
    """The one thing to do next in ``roll``: restart a node, wait, done, or failed."""
    judged = [_judge(roll, n) for n in sorted(roll.nodes, key=lambda n: n.name)]
    done = sum(1 for j in judged if j.current is not None and j.serving)
    kind, node, why, pod = _choose(roll, judged)
    return Step(kind, node, pod, why, done, len(judged))


def message(roll: Roll, step: Step) -> str:
    """What the step says on the hub (the component's message, the node's event)."""
    where = f"DaemonSet {roll.daemon_set}"
    counted = f"{step.done} of {step.total} nodes on revision {roll.revision}"
    if step.kind is StepKind.RESTART:
        return f"{where}: restarting its pod on node {step.node} ({counted})"
    if step.kind is StepKind.WAIT:
        return f"{where}: waiting for node {step.node}: {step.why} ({counted})"
    if step.kind is StepKind.FAILED:
        return (
            f"{where}: stopped at node {step.node}: {step.why}; the nodes not restarted keep "
            f"the old agent ({counted})"
        )
    return f"{where}: every node on revision {roll.revision}"


# ---- whether a roll is under way, from the DaemonSet's status --------------------------


@dataclass(frozen=True)
class DaemonSetSeen:
    """A node agent's DaemonSet as the release's workloads show it."""

    component: str
    shown: str  # "DaemonSet ns/name"
    generation: int | None
    observed_generation: int | None
    desired: int | None
    updated: int | None


def rolling(ds: DaemonSetSeen) -> bool:
    """Whether the DaemonSet has nodes left on an old revision (or a template not seen yet)."""
    if ds.generation is not None and ds.observed_generation != ds.generation:
        return True
    return (ds.updated or 0) < (ds.desired or 0)


def roll_work(daemon_sets: Sequence[DaemonSetSeen]) -> list[Work]:
    """The node agents with a roll under way: work left for their components."""
    return [
        Work(
            component=ds.component,
            what=f"{ds.shown}: {ds.updated or 0} of {ds.desired or 0} nodes on its new "
            "revision, rolled a node at a time",
            roll=True,
        )
        for ds in daemon_sets
        if rolling(ds)
    ]


def _on_delete(desired: object) -> bool:
    spec = desired.get("spec") if isinstance(desired, dict) else None
    strategy = spec.get("updateStrategy") if isinstance(spec, dict) else None
    return isinstance(strategy, dict) and strategy.get("type") == "OnDelete"


def agent_daemon_sets(
    components: Sequence[Component], in_sync: set[str], workloads: Sequence[ReleaseWorkload]
) -> list[DaemonSetSeen]:
    """The node agents' DaemonSets of the releases in sync, as the target shows them.

    Only one its release installs with OnDelete is the operator's to roll: a
    revision from before (RollingUpdate) is rolled by its own controller.
    """
    agents = {c.name: c.node_agent for c in components if c.node_agent is not None}
    out = []
    for w in workloads:
        agent = agents.get(w.component)
        key = w.manifest.key
        if (
            agent is None
            or w.release not in in_sync
            or key.kind is not Kind.DAEMON_SET
            or key.name != agent.daemon_set
            or w.live is None
            or not _on_delete(w.desired)
        ):
            continue
        live = w.live
        out.append(
            DaemonSetSeen(
                w.component,
                key.shown,
                live.generation,
                live.observed_generation,
                live.desired_scheduled,
                live.updated_scheduled,
            )
        )
    return out
