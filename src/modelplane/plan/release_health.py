"""What each Managed release runs, judged: workload health and drift from the stored manifest.

``observe`` hands over, per workload a release's stored manifest installs
(only the revision it already took for the release), the manifest's body,
the live object's status, its pods and the fields the release's field
managers own; this module decides, with no read and no clock of its own:

- each workload's health, by ``plan.health.judge``: the replicas the
  manifest asks for (a hand scale to zero is seen), and for a DaemonSet the
  nodes it should run on (``nodes_expected``: what the manifest's pod
  template tolerates and selects, so a hand edit that drops a toleration is
  seen too);
- each workload's drift: deleted, or a field the manifest sets that neither
  Helm nor the operator owns any more (``plan.drift.drifted_fields``, the
  rule for the product's own objects: a field another manager only added is
  left alone) and that a restore would change (``apply_changes``, a dry run:
  the API server stores no zero value its types omit, so nobody owns it).

A revision whose manifest puts a workload outside the release's own
namespace is refused (``outside_namespace``): none of its workloads is
judged, followed or restored, and the component is Degraded, saying which
release and namespace. Whoever can write a Secret in a release's namespace
can write a revision Helm would read; the operator's own credentials must
not carry what it wrote into any other namespace.

A Job is judged while it exists and never restored: applied again it would
run again, and one deleted once done (its TTL, a clean-up) has simply ended.

DaemonSet placement is the scheduler's rule (``catalog.placement``): the
pod template's ``nodeSelector`` and required node affinity select the
node, and its tolerations cover the node's ``NoSchedule`` and
``NoExecute`` taints. The DRA driver's kubelet plugin picks GPU nodes by
affinity on NFD's PCI labels alone; read by its nodeSelector only, it would
be expected on every node and reported short forever. A template the
scheduler could not read (a malformed requirement) is counted on fewer
nodes, never more, so it is never reported short by a rule it does not
have. The taints the DaemonSet controller tolerates on every DaemonSet's
pods (a cordon, not-ready) are not added: a node that has one is left out
of the count, which only lowers it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from modelplane.catalog.placement import placement
from modelplane.plan.component_health import ComponentHealth, component_health
from modelplane.plan.drift import drifted_fields
from modelplane.plan.frozen import Frozen
from modelplane.plan.health import MAX_MESSAGE, Reason, State, judge
from modelplane.plan.manifest import ManifestWorkload
from modelplane.plan.workloads import MAX_NAME, Kind, PodSignal, WorkloadKey, WorkloadStatus
from modelplane.untrusted import printable

# The most drifted field paths named per object; the rest are counted.
MAX_DRIFT_PATHS = 8
# The most workloads a refused revision's message names outside its namespace.
MAX_REFUSED_NAMED = 3


class DriftMode(StrEnum):
    """``--release-drift``: what the operator does about a release's objects changed by hand."""

    OFF = "off"
    WARN = "warn"
    CORRECT = "correct"


class Taint(Frozen):
    key: str
    value: str = ""
    effect: str = ""


class NodeFacts(Frozen):
    """A node, as far as DaemonSet placement goes."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)


class ReleaseWorkload(Frozen):
    """One workload of a release: what the stored manifest says, and what the target holds."""

    component: str
    release: str
    manifest: ManifestWorkload
    # The manifest's body of it, its namespace filled in: what a restore applies.
    desired: dict[str, Any]
    # None when the object is not on the target.
    live: WorkloadStatus | None = None
    pods: list[PodSignal] = Field(default_factory=list)
    # The fields (fieldsV1) Helm and the operator own on the live object;
    # None when not observed (drift is then not judged).
    owned: dict[str, Any] | None = None
    # A HorizontalPodAutoscaler of the release scales it: its replicas are
    # the autoscaler's, neither drift nor a scale-down to report.
    autoscaled: bool = False
    # The live object's resourceVersion ("" when not on the target), and
    # whether restoring ``desired`` would change it, as a dry run of it
    # answered (see ``drift_of``); None when not asked.
    version: str = ""
    apply_changes: bool | None = None


class ReleaseObject(Frozen):
    """One object of a release other than a workload: the stored manifest's body, and
    what the target holds of it (its metadata only).

    ``present`` is False when the object is not on the target. A Secret
    (``data_owned_elsewhere``) is judged by presence alone: a chart often
    creates one empty that a controller then fills (a webhook's serving
    certificate), and its data is never read, compared or put back.
    """

    component: str
    release: str
    shown: str  # "Service ns/name"
    desired: dict[str, Any]
    present: bool
    owned: dict[str, Any] | None = None
    data_owned_elsewhere: bool = False
    # Why a restore of it is refused whatever the mode (see
    # plan.restorable.held_back); "" when it may be restored.
    held: str = ""
    # As ``ReleaseWorkload``'s.
    version: str = ""
    apply_changes: bool | None = None


class ReleaseDrift(Frozen):
    component: str
    release: str
    shown: str  # "Deployment ns/name"
    deleted: bool = False
    fields: list[str] = Field(default_factory=list)
    # The body to apply when the mode is correct; None when only reported.
    restore: dict[str, Any] | None = None
    # Why it is only reported even under correct (a grant the operator
    # will not make from a stored revision); "" otherwise.
    held: str = ""

    @property
    def message(self) -> str:
        if self.deleted:
            what = "was deleted"
        else:
            shown = self.fields[:MAX_DRIFT_PATHS]
            more = len(self.fields) - len(shown)
            what = (
                "was changed by hand: " + ", ".join(shown) + (f" and {more} more" if more else "")
            )
        verb = (
            "restored"
            if self.restore is not None
            else f"not restored ({self.held or '--release-drift=warn'})"
        )
        return f"{self.shown} of release {self.release} {what}; {verb}"


class UnjudgedRelease(Frozen):
    """A release whose stored manifest was refused: its workloads are not judged, and why."""

    component: str
    release: str
    message: str  # why, made printable and cut where it was made


class RefusedRevision(Frozen):
    """A stored revision that installs workloads outside its release's namespace."""

    component: str
    release: str
    revision: int
    namespace: str  # the release's
    outside: list[WorkloadKey]

    @property
    def message(self) -> str:
        shown = [k.shown for k in self.outside[:MAX_REFUSED_NAMED]]
        more = len(self.outside) - len(shown)
        what = ", ".join(shown) + (f" and {more} more" if more else "")
        return printable(
            f"revision {self.revision} of release {printable(self.release, MAX_NAME)} installs "
            f"{what} outside the release's namespace {self.namespace}: refused, its workloads "
            "are neither followed nor restored",
            MAX_MESSAGE,
        )

    def health(self) -> ComponentHealth:
        return ComponentHealth(
            component=printable(self.component, MAX_NAME),
            state=State.DEGRADED,
            reason=Reason.RELEASE_OUTSIDE_NAMESPACE,
            message=self.message,
        )


def outside_namespace(keys: Sequence[WorkloadKey], namespace: str) -> list[WorkloadKey]:
    """The workloads of a release's manifest that are not in the release's ``namespace``."""
    return [k for k in keys if k.namespace != namespace]


class ReleaseReport(Frozen):
    health: list[ComponentHealth] = Field(default_factory=list)
    drift: list[ReleaseDrift] = Field(default_factory=list)
    unjudged: list[UnjudgedRelease] = Field(default_factory=list)

    def unhealthy(self) -> list[ComponentHealth]:
        return [h for h in self.health if h.state is not State.HEALTHY]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def nodes_expected(desired: Mapping[str, Any], nodes: Sequence[NodeFacts]) -> int:
    """How many of ``nodes`` the DaemonSet ``desired`` (a manifest's body) should run on."""
    pod = placement(_map(_map(_map(desired.get("spec")).get("template")).get("spec")))
    return sum(1 for n in nodes if pod.admits(n.name, n.labels, n.taints))


def drift_candidates(
    desired: Mapping[str, Any], owned: Mapping[str, Any], *, autoscaled: bool = False
) -> list[str]:
    """The fields ``desired`` sets that neither Helm nor the operator owns: drift, unless the
    API server simply does not store them.

    Ownership alone cannot tell a hand edit from a value the API server
    drops: a chart's ``hostNetwork: false`` or an env var's ``value: ""``
    (zero values the typed object omits), or a field whose feature gate is
    off (a DeviceClass's ``extendedResourceName``), is stored by nobody, so
    no manager owns it. Those candidates are settled by a dry run of the
    manifest (``apply_changes``, asked by ``actions.dry_runs``).
    """
    return [
        f
        for f in drifted_fields(_pruned(desired), dict(owned))
        if not (autoscaled and f == "spec.replicas")
    ]


def drift_of(w: ReleaseWorkload, mode: DriftMode) -> ReleaseDrift | None:
    """The workload's drift from its manifest; None when there is none, or the mode is off.

    A field no manager owns is drift only if applying the manifest would
    change the live object: when a dry run of it said it would not
    (``apply_changes`` False), the API server stores the manifest as the
    object already is.
    """
    if mode is DriftMode.OFF or w.manifest.key.kind is Kind.JOB:
        # A Job applied again runs again: that is no restore.
        return None
    restore = _restorable(w) if mode is DriftMode.CORRECT else None
    common = {"component": w.component, "release": w.release, "shown": w.manifest.key.shown}
    if w.live is None:
        return ReleaseDrift(**common, deleted=True, restore=restore)
    if w.owned is None or w.apply_changes is False:
        return None
    fields = drift_candidates(w.desired, w.owned, autoscaled=w.autoscaled)
    if not fields:
        return None
    return ReleaseDrift(**common, fields=[printable(f, 256) for f in fields], restore=restore)


def object_drift(o: ReleaseObject, mode: DriftMode) -> ReleaseDrift | None:
    """A release object's drift from its manifest, by the workloads' rule; None if none.

    Deleted, or a field the manifest sets that neither Helm nor the operator
    owns any more and that applying the manifest would change. A Secret is
    only ever recreated when it is gone, from the manifest's body, never
    edited back: what a controller wrote into it stays.
    """
    if mode is DriftMode.OFF:
        return None
    restore = o.desired if mode is DriftMode.CORRECT and not o.held else None
    common = {"component": o.component, "release": o.release, "shown": o.shown, "held": o.held}
    if not o.present:
        return ReleaseDrift(**common, deleted=True, restore=restore)
    if o.owned is None or o.data_owned_elsewhere or o.apply_changes is False:
        return None
    fields = drift_candidates(o.desired, o.owned)
    if not fields:
        return None
    return ReleaseDrift(**common, fields=[printable(f, 256) for f in fields], restore=restore)


def _restorable(w: ReleaseWorkload) -> dict[str, Any]:
    """What a restore applies: the manifest's body, less the replicas an autoscaler keeps."""
    if not w.autoscaled:
        return w.desired
    spec = {k: v for k, v in _map(w.desired.get("spec")).items() if k != "replicas"}
    return {**w.desired, "spec": spec}


def _pruned(value: Any) -> Any:
    """``value`` without empty maps and lists: the API server keeps none of them, so
    no manager owns them, and a chart's ``resources: {}`` is no drift."""
    if isinstance(value, Mapping):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def release_report(
    workloads: Sequence[ReleaseWorkload],
    nodes: Sequence[NodeFacts] | None,
    now: datetime,
    mode: DriftMode,
    *,
    unjudged: Sequence[UnjudgedRelease] = (),
    refused: Sequence[RefusedRevision] = (),
    objects: Sequence[ReleaseObject] = (),
) -> ReleaseReport:
    """Each component's health from its releases' workloads, every drift found, and what is not.

    ``objects`` are the releases' other objects (Services, RBAC, ...), judged
    for drift only. ``unjudged`` are the releases whose stored manifest was refused. A
    component whose revision is ``refused`` is Degraded by that alone: its
    workloads were never read, and nothing of it is restored.
    """
    judged: dict[str, list[Any]] = {}
    drift: list[ReleaseDrift] = []
    refusals = {r.component: r for r in refused}
    for w in workloads:
        if w.component in refusals:
            continue
        if w.live is None and w.manifest.key.kind is Kind.JOB:
            # A Job that ran is often deleted once done (its TTL, a clean-up);
            # gone is how it ends, and applying it again would run it again.
            continue
        expected = (
            nodes_expected(w.desired, nodes)
            if w.manifest.key.kind is Kind.DAEMON_SET and nodes is not None
            else None
        )
        health = judge(
            w.manifest.key,
            w.live,
            w.pods,
            now=now,
            manifest_replicas=None if w.autoscaled else w.manifest.replicas,
            nodes_expected=expected,
        )
        judged.setdefault(w.component, []).append(health)
        found = drift_of(w, mode)
        if found is not None:
            drift.append(found)
    for o in objects:
        if o.component not in refusals and (found := object_drift(o, mode)) is not None:
            drift.append(found)
    components = [component_health(c, hs) for c, hs in judged.items()]
    components += [r.health() for _, r in sorted(refusals.items())]
    return ReleaseReport(health=components, drift=drift, unjudged=list(unjudged))
