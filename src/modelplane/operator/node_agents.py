"""Carrying out a node agent's roll: one step per reconcile (plan.node_agents decides it).

After ``helm upgrade`` of a node agent (its DaemonSet on OnDelete), the plan
names the roll as work left (``plan.node_agents.roll_work``); each
reconcile then reads what one step needs, in bounded reads of the agent's
own objects (its DaemonSet, its ControllerRevisions and its pods by its
selector, the driver's ResourceSlices or the Nodes' metadata, and the pods
of the one node about to be restarted), asks ``next_step`` and carries it
out: a pod deleted, a wait, or a failure recorded through the component's
guard (``ComponentFailures``), which stops the roll there and, as any
failed upgrade, pauses the fleet's rollout. The stack reconciles again
soon while a roll is under way (``requeue_after``), with no watch of
every pod.

What a node showed before its restart (its devices, its labels) and when
it was restarted are kept here, per component and revision: safe to lose.
A restarted operator then judges the nodes by what they show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from modelplane.actions.claim import Emit
from modelplane.catalog.components import BY_NAME
from modelplane.catalog.facts import DAEMON_SETS, NODES, RESOURCE_SLICES
from modelplane.catalog.gpu_nodes import is_nfd_vendor_label
from modelplane.catalog.types import NodeAgent, NodeProof
from modelplane.kube.client import METADATA_LIST, Target, collection_path, get_json, list_objects
from modelplane.observe.state import PODS
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.options import OperatorOptions
from modelplane.operator.status import Outcome
from modelplane.plan import Plan
from modelplane.plan.node_agents import (
    REVISION_LABEL,
    AgentPod,
    NodeAgentFailed,
    NodeState,
    Roll,
    Step,
    StepKind,
    message,
    next_step,
)
from modelplane.untrusted import printable, timestamp
from modelplane.vocabulary import EventReason
from modelplane.wire import ApiRef

log = logging.getLogger("modelplane.operator")

CONTROLLER_REVISIONS = ApiRef("apps", "v1", "controllerrevisions")
# How soon a stack whose node agent rolls is reconciled again.
REQUEUE_SECONDS = 3.0
# The most nodes one step looks at for terminating claim pods before it waits.
MAX_CLAIM_CHECKS = 4

Memory = dict[str, Any]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def selector_of(ds: Mapping[str, Any]) -> str:
    """The DaemonSet's matchLabels as a label selector (the charts set no expressions)."""
    labels = _map(_map(_map(ds.get("spec")).get("selector")).get("matchLabels"))
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def current_revision(ds: Mapping[str, Any], revisions: list[dict[str, Any]]) -> str | None:
    """The hash of the DaemonSet's newest ControllerRevision: its pods' current template."""
    uid = _map(ds.get("metadata")).get("uid")
    owned = [
        r
        for r in revisions
        if any(
            _map(o).get("uid") == uid for o in _map(r.get("metadata")).get("ownerReferences") or []
        )
        and isinstance(r.get("revision"), int)
    ]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r["revision"]))
    found = _map(_map(newest.get("metadata")).get("labels")).get(REVISION_LABEL)
    return str(found) if found else None


def agent_pod(pod: Mapping[str, Any]) -> AgentPod | None:
    """One of the DaemonSet's pods, as the roll reads it; None when not on a node."""
    meta, spec, status = _map(pod.get("metadata")), _map(pod.get("spec")), _map(pod.get("status"))
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    ready = any(
        _map(c).get("type") == "Ready" and _map(c).get("status") == "True"
        for c in status.get("conditions") or []
    )
    return AgentPod(
        name=str(meta.get("name", "")),
        node=node,
        revision=str(_map(meta.get("labels")).get(REVISION_LABEL, "")),
        ready=ready,
        created=timestamp(meta.get("creationTimestamp")),
        deleting=meta.get("deletionTimestamp") is not None,
    )


def slice_devices(slices: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Per node, the names of the devices its ResourceSlices publish."""
    out: dict[str, set[str]] = {}
    for s in slices:
        spec = _map(s.get("spec"))
        node = spec.get("nodeName")
        if isinstance(node, str):
            names = {str(_map(d).get("name")) for d in spec.get("devices") or []}
            out.setdefault(node, set()).update(names)
    return {n: frozenset(d) for n, d in out.items()}


def nfd_labels(agent: NodeAgent, nodes: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Per node, the NFD vendor labels it carries (those the DRA plugin selects on)."""
    out: dict[str, frozenset[str]] = {}
    for n in nodes:
        meta = _map(n.get("metadata"))
        labels = _map(meta.get("labels"))
        out[str(meta.get("name"))] = frozenset(
            f"{k}={v}" for k, v in labels.items() if is_nfd_vendor_label(agent.gpus, k, str(v))
        )
    return out


def terminating_claims(pods: list[dict[str, Any]]) -> tuple[tuple[str, ...], datetime | None]:
    """The pods holding DRA claims that are being deleted, and since when the first was."""
    names: list[str] = []
    since: list[datetime] = []
    for pod in pods:
        meta = _map(pod.get("metadata"))
        if not _map(pod.get("spec")).get("resourceClaims") or meta.get("deletionTimestamp") is None:
            continue
        names.append(f"{meta.get('namespace')}/{meta.get('name')}")
        deadline = timestamp(meta.get("deletionTimestamp"))
        grace = meta.get("deletionGracePeriodSeconds")
        if deadline is not None:
            since.append(deadline - timedelta(seconds=grace if isinstance(grace, int) else 0))
    return tuple(sorted(names)), min(since, default=None)


@dataclass
class NodeAgentRolls:
    """Each stack's node-agent rolls: one step per reconcile; what the nodes proved."""

    emit: Emit
    failures: ComponentFailures
    max_unavailable: int = 1
    timeout: timedelta = timedelta(minutes=5)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # Per component: the revision rolled to, and per node what it proved
    # before its restart and when it was restarted.
    revision: dict[str, str] = field(default_factory=dict)
    before: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    restarted: dict[str, dict[str, datetime]] = field(default_factory=dict)
    # What each rolling component's last step said: its message on the hub.
    said: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, options: OperatorOptions, emit: Emit, failures: ComponentFailures
    ) -> NodeAgentRolls:
        """As the operator's flags set it (--node-agent-max-unavailable, --node-agent-timeout)."""
        return cls(
            emit,
            failures,
            options.node_agent_max_unavailable,
            timedelta(seconds=options.node_agent_timeout_seconds),
        )

    @property
    def requeue_after(self) -> float | None:
        """Seconds until the stack should look again; None when nothing rolls."""
        failed = self.failures.failures
        return REQUEUE_SECONDS if any(c not in failed for c in self.said) else None

    def into(self, outcome: Outcome) -> Outcome:
        """``outcome`` with what the rolls said of each component, and when to look again."""
        outcome.requeue_after = self.requeue_after
        outcome.notes = {**outcome.notes, **self.said}
        return outcome

    async def act(self, p: Plan, target: Target) -> bool:
        """One step of each node agent the plan says rolls; True if a pod was deleted."""
        rolling = sorted({w.component for w in p.work if w.roll})
        for gone in set(self.said) - set(rolling):
            self.said.pop(gone, None)
        deleted = False
        for component in rolling:
            agent = BY_NAME[component].node_agent
            if agent is None or not self.failures.due(component):
                continue
            steps: list[bool] = []
            await self.failures.guard(
                component,
                self._recorded(steps, component, agent, target),
                what=f"the roll of {agent.daemon_set}",
            )
            deleted |= any(steps)
        return deleted

    async def _recorded(
        self, into: list[bool], component: str, agent: NodeAgent, target: Target
    ) -> None:
        # The guard takes an awaitable and keeps no result: the step's is kept here.
        into.append(await self._step(component, agent, target))

    async def _step(self, component: str, agent: NodeAgent, target: Target) -> bool:
        namespace = BY_NAME[component].namespace
        client = target.client
        path = f"{collection_path(DAEMON_SETS, namespace)}/{agent.daemon_set}"
        ds = _map(await get_json(client, path))
        shown = f"{namespace}/{agent.daemon_set}"
        meta, status = _map(ds.get("metadata")), _map(ds.get("status"))
        if status.get("observedGeneration") != meta.get("generation"):
            self.said[component] = (
                f"DaemonSet {shown}: its controller has not seen its new template"
            )
            return False
        selector = selector_of(ds)
        revisions = await list_objects(
            client, CONTROLLER_REVISIONS, namespace=namespace, labels=selector
        )
        revision = current_revision(ds, revisions)
        if revision is None:
            self.said[component] = f"DaemonSet {shown}: no current revision found yet"
            return False
        self._begin(component, revision)
        pods = [
            found
            for pod in await list_objects(client, PODS, namespace=namespace, labels=selector)
            if (found := agent_pod(pod)) is not None
        ]
        proofs = await self._proofs(agent, target)
        nodes = self._nodes(component, pods, proofs, {})
        roll = Roll(
            shown, revision, nodes, agent.proof, self.max_unavailable, self.timeout, self.clock()
        )
        step = next_step(roll)
        claims: dict[str, tuple[tuple[str, ...], datetime | None]] = {}
        while (
            step.kind is StepKind.RESTART
            and step.node not in claims
            and len(claims) < MAX_CLAIM_CHECKS
        ):
            assert step.node is not None
            claims[step.node] = terminating_claims(
                await list_objects(client, PODS, fields=f"spec.nodeName={step.node}")
            )
            if not claims[step.node][0]:
                break
            roll = Roll(
                shown, revision, self._nodes(component, pods, proofs, claims), agent.proof,
                self.max_unavailable, self.timeout, roll.now,
            )  # fmt: skip
            step = next_step(roll)
        return await self._carry_out(component, roll, step, proofs, target)

    def _begin(self, component: str, revision: str) -> None:
        if self.revision.get(component) != revision:
            self.revision[component] = revision
            self.before[component] = {}
            self.restarted[component] = {}

    async def _proofs(self, agent: NodeAgent, target: Target) -> dict[str, frozenset[str]]:
        if agent.proof is NodeProof.SLICES:
            slices = await list_objects(
                target.client, RESOURCE_SLICES, fields=f"spec.driver={agent.gpus.driver}"
            )
            return slice_devices(slices)
        nodes = await list_objects(target.client, NODES, accept=METADATA_LIST)
        return nfd_labels(agent, nodes)

    def _nodes(
        self,
        component: str,
        pods: list[AgentPod],
        proofs: Mapping[str, frozenset[str]],
        claims: Mapping[str, tuple[tuple[str, ...], datetime | None]],
    ) -> tuple[NodeState, ...]:
        before, restarted = self.before[component], self.restarted[component]
        names = sorted({p.node for p in pods} | set(restarted))
        return tuple(
            NodeState(
                name=n,
                pods=tuple(p for p in pods if p.node == n),
                proof=proofs.get(n, frozenset()),
                before=before.get(n),
                restarted=restarted.get(n),
                claims_terminating=claims.get(n, ((), None))[0],
                claims_since=claims.get(n, ((), None))[1],
            )
            for n in names
        )

    async def _carry_out(
        self,
        component: str,
        roll: Roll,
        step: Step,
        proofs: Mapping[str, frozenset[str]],
        target: Target,
    ) -> bool:
        said = printable(message(roll, step), 1024)
        if step.kind is StepKind.FAILED:
            self.said[component] = said
            raise NodeAgentFailed(said)
        if step.kind is StepKind.DONE:
            if self.said.pop(component, None) is not None:
                self.emit("Normal", EventReason.NODE_AGENTS_ROLLED, said)
            return False
        self.said[component] = said
        if step.kind is StepKind.WAIT:
            log.info("%s", said)
            return False
        assert step.node is not None and step.pod is not None
        self.before[component][step.node] = proofs.get(step.node, frozenset())
        self.restarted[component][step.node] = roll.now
        namespace = BY_NAME[component].namespace
        try:
            await target.client.delete(Pod, step.pod, namespace=namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
        self.emit("Normal", EventReason.NODE_AGENT_RESTARTED, said)
        return True
