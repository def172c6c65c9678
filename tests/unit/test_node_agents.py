"""The node agents' roll, a node at a time: the pure decision (plan.node_agents)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml
from tests.shared_fixtures import real_chart

from modelplane.catalog.components import BY_NAME
from modelplane.catalog.types import NodeProof
from modelplane.operator.node_agents import current_revision, slice_devices, terminating_claims
from modelplane.plan.node_agents import (
    AgentPod,
    DaemonSetSeen,
    NodeState,
    Roll,
    StepKind,
    next_step,
    roll_work,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
EARLY = NOW - timedelta(seconds=30)
LONG_AGO = NOW - timedelta(minutes=10)
GPUS = frozenset({"gpu-0"})


def old(node: str, ready: bool = True) -> NodeState:
    """A node not restarted yet: its pod on the old revision, its slices published."""
    return NodeState(
        node, (AgentPod(f"p-{node}", node, "old", ready),), GPUS if ready else frozenset()
    )


def new(
    node: str, ready: bool = True, proof: frozenset[str] = GPUS, at: datetime = EARLY
) -> NodeState:
    """A node the operator restarted at ``at``: its new pod, what it shows now."""
    pod = AgentPod(f"n-{node}", node, "new", ready, created=at)
    return NodeState(node, (pod,), proof, before=GPUS, restarted=at)


def silent(node: str) -> NodeState:
    """A node not restarted yet whose plugin pod is Ready and publishes no slice."""
    return NodeState(node, old(node).pods, frozenset())


def back(node: str, proof: frozenset[str] = GPUS, at: datetime = EARLY) -> NodeState:
    """A node restarted while it published nothing, its new pod Ready, showing ``proof``."""
    pod = AgentPod(f"n-{node}", node, "new", True, created=at)
    return NodeState(node, (pod,), proof, before=frozenset(), restarted=at)


def gone(node: str, at: datetime = EARLY) -> NodeState:
    """A node restarted: its old pod deleted, no new pod yet."""
    return NodeState(node, (), frozenset(), before=GPUS, restarted=at)


def claims(node: str, since: datetime = EARLY) -> NodeState:
    return NodeState(
        node, old(node).pods, GPUS, claims_terminating=("team/job-0",), claims_since=since
    )


def roll(*nodes: NodeState, most: int = 1, proof: NodeProof = NodeProof.SLICES) -> Roll:
    return Roll("ns/plugin", "new", nodes, proof, most, timedelta(minutes=5), NOW)


CASES = [
    # (nodes, max unavailable, kind, node, words in why)
    ((old("a"), old("b")), 1, StepKind.RESTART, "a", ""),
    ((new("a"), old("b")), 1, StepKind.RESTART, "b", ""),
    ((new("a"), new("b")), 1, StepKind.DONE, None, ""),
    ((gone("a"), old("b")), 1, StepKind.WAIT, "a", "no agent pod"),
    ((new("a", ready=False), old("b")), 1, StepKind.WAIT, "a", "not Ready"),
    ((new("a", proof=frozenset()), old("b")), 1, StepKind.WAIT, "a", "not published again"),
    # Two at once when allowed; the second restart while the first is not back.
    ((new("a", ready=False), old("b")), 2, StepKind.RESTART, "b", ""),
    # A node unready before the roll counts, and goes first.
    ((old("a"), old("b", ready=False)), 1, StepKind.RESTART, "b", ""),
    ((old("a"), old("b", ready=False), new("c", ready=False)), 2, StepKind.RESTART, "b", ""),
    ((old("a"), new("b", ready=False), new("c", ready=False)), 2, StepKind.WAIT, "b", ""),
    # A plugin Ready that publishes nothing (a failed roll's node) serves no
    # GPU: it counts, and goes first.
    ((old("a"), silent("b")), 1, StepKind.RESTART, "b", ""),
    ((old("a"), silent("b"), old("c")), 2, StepKind.RESTART, "b", ""),
    # Restarted while it published nothing: served once it publishes, not before.
    ((back("a"), old("b")), 1, StepKind.RESTART, "b", ""),
    ((back("a", proof=frozenset()), old("b")), 1, StepKind.WAIT, "a", "not published"),
    # Past the timeout: stopped there, naming why.
    ((new("a", ready=False, at=LONG_AGO), old("b")), 1, StepKind.FAILED, "a", "not Ready"),
    (
        (new("a", proof=frozenset(), at=LONG_AGO), old("b")),
        1,
        StepKind.FAILED,
        "a",
        "not published",
    ),
    ((gone("a", at=LONG_AGO), old("b")), 1, StepKind.FAILED, "a", "started within"),
    (
        (new("a", proof=frozenset({"gpu-1"}), at=LONG_AGO), old("b")),
        1,
        StepKind.FAILED,
        "a",
        "devices changed: lost gpu-0, gained gpu-1",
    ),
    # Terminating claim pods: another node first, else a bounded wait.
    ((claims("a"), old("b")), 1, StepKind.RESTART, "b", ""),
    ((claims("a"), new("b")), 1, StepKind.WAIT, "a", "team/job-0"),
    ((claims("a", since=LONG_AGO), new("b")), 1, StepKind.FAILED, "a", "still terminating"),
]


@pytest.mark.parametrize(("nodes", "most", "kind", "node", "why"), CASES)
def test_next_step(
    nodes: tuple[NodeState, ...], most: int, kind: StepKind, node: str | None, why: str
) -> None:
    step = next_step(roll(*nodes, most=most))
    assert (step.kind, step.node) == (kind, node), step
    assert why in step.why


def test_a_restart_names_the_old_pod_and_counts_the_nodes_done() -> None:
    step = next_step(roll(new("a"), old("b"), old("c")))
    assert (step.pod, step.done, step.total) == ("p-b", 1, 3)


@pytest.mark.parametrize("restarting", [False, True])
def test_nfd_labels_must_never_lapse(restarting: bool) -> None:
    label = frozenset({"feature.node.kubernetes.io/pci-0302_10de.present=true"})
    pod = AgentPod("n-a", "a", "new", ready=not restarting, created=EARLY)
    node = NodeState("a", (pod,), frozenset(), before=label, restarted=EARLY)
    step = next_step(roll(node, old("b"), proof=NodeProof.LABELS))
    assert step.kind is StepKind.FAILED and "lost NFD label" in step.why


@pytest.mark.parametrize(
    ("generation", "observed", "desired", "updated", "rolls"),
    [(2, 2, 4, 4, False), (2, 2, 4, 1, True), (3, 2, 4, 4, True), (2, 2, 0, 0, False)],
)
def test_a_roll_is_work_while_nodes_are_left_on_an_old_revision(
    generation: int, observed: int, desired: int, updated: int, rolls: bool
) -> None:
    ds = DaemonSetSeen(
        "nvidia-dra-driver-gpu", "DaemonSet ns/x", generation, observed, desired, updated
    )
    work = roll_work([ds])
    assert bool(work) is rolls
    assert all(w.roll for w in work)


def test_the_current_revision_is_the_newest_owned_one() -> None:
    ds = {"metadata": {"uid": "u1"}}

    def rev(n: int, h: str, uid: str = "u1") -> dict[str, object]:
        meta = {"ownerReferences": [{"uid": uid}], "labels": {"controller-revision-hash": h}}
        return {"metadata": meta, "revision": n}

    assert current_revision(ds, [rev(1, "a"), rev(3, "c"), rev(2, "b"), rev(9, "z", "u2")]) == "c"
    assert current_revision(ds, [rev(9, "z", "u2")]) is None


def test_slices_and_terminating_claim_pods_are_read_per_node() -> None:
    slices = [
        {"spec": {"nodeName": "a", "devices": [{"name": "gpu-0"}]}},
        {"spec": {"nodeName": "a", "devices": [{"name": "gpu-1"}]}},
    ]
    assert slice_devices(slices) == {"a": frozenset({"gpu-0", "gpu-1"})}
    pods = [
        {"metadata": {"namespace": "t", "name": "x"}, "spec": {"resourceClaims": [{"name": "g"}]}},
        {
            "metadata": {
                "namespace": "t", "name": "y", "deletionTimestamp": "2026-01-01T12:00:30Z",
                "deletionGracePeriodSeconds": 30,
            },
            "spec": {"resourceClaims": [{"name": "g"}]},
        },
        {"metadata": {"namespace": "t", "name": "z", "deletionTimestamp": "2026-01-01T12:00:30Z"}},
    ]  # fmt: skip
    assert terminating_claims(pods) == (("t/y",), NOW)


@pytest.mark.parametrize("name", ["nvidia-dra-driver-gpu", "node-feature-discovery"])
def test_the_catalog_names_a_daemon_set_the_real_chart_renders(name: str) -> None:
    component = BY_NAME[name]
    assert component.chart is not None and component.node_agent is not None
    chart = real_chart(component.chart.chart, component.version)
    docs = yaml.safe_load_all((chart / "rendered-standard.yaml").read_text())
    names = {
        d["metadata"]["name"] for d in docs if isinstance(d, dict) and d.get("kind") == "DaemonSet"
    }
    assert component.node_agent.daemon_set in names
