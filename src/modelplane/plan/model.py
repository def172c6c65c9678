"""The plan: everything a ServingStack should have on its target right now."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from modelplane.catalog.configuration import Hold, TeardownWave

# Requirement results speak the catalog's words; re-exported for callers of the plan.
from modelplane.catalog.types import RequirementStatus as RequirementStatus
from modelplane.catalog.types import Severity as Severity
from modelplane.plan.capacity import GpuAvailability, TargetSummary
from modelplane.plan.component_health import ComponentHealth
from modelplane.plan.frozen import Frozen
from modelplane.plan.health import State
from modelplane.plan.images import ImageUse
from modelplane.plan.pull_secrets import MissingPullSecret
from modelplane.plan.release_health import ReleaseDrift
from modelplane.vocabulary import ReadyReason

# The component the product's own objects (Namespace, Gateway, ...) are
# planned under, next to the catalog's components.
CONFIGURATION = "configuration"


class ReleaseState(StrEnum):
    """What Helm's storage says about a release, next to what is desired."""

    ABSENT = "Absent"
    IN_SYNC = "InSync"
    OUT_OF_SYNC = "OutOfSync"
    # A revision left pending-*, typically by an operator killed mid-operation.
    LOCKED = "Locked"
    FAILED = "Failed"


class ReleaseAction(StrEnum):
    INSTALL = "install"
    UPGRADE = "upgrade"
    # Undo a locked or failed first install, then install again.
    REINSTALL = "reinstall"
    # Roll a locked upgrade back to the last good revision, then upgrade.
    ROLLBACK = "rollback"
    NONE = "none"
    # Dependencies are not ready yet.
    WAIT = "wait"


class ObjectAction(StrEnum):
    APPLY = "apply"
    NONE = "none"
    HOLD = "hold"


class PlannedRelease(Frozen):
    component: str
    name: str
    chart: str
    repository: str
    version: str
    namespace: str
    values: dict[str, Any]
    wait: bool
    depends_on: list[str]
    digest: str
    state: ReleaseState
    action: ReleaseAction
    waiting_for: list[str] = Field(default_factory=list)
    # Every image the release runs, before and after the mirror rules.
    images: list[ImageUse] = Field(default_factory=list)
    # The values paths the product would set that the chart at this version
    # does not read (plan.chart_values): left unset, and said in the notes.
    refused: list[str] = Field(default_factory=list)


class PlannedManifests(Frozen):
    """Manifests fetched from a URL and applied object by object."""

    component: str
    url: str
    version: str
    digest: str
    # The CRDs the manifests must bring (their digest annotation tells
    # whether this exact source was applied).
    crds: list[str]
    action: ObjectAction
    teardown: bool  # whether teardown deletes them (config role in Managed/Provided, or Managed)


class PlannedObject(Frozen):
    key: str
    component: str  # "configuration" or the substrate component that is made of objects
    object: dict[str, Any]
    needs: list[str]
    action: ObjectAction
    # Set exactly when the action is hold: why, and in words for a person.
    hold: Hold | None = None
    hold_reason: str | None = None
    teardown_wave: TeardownWave
    # The fields a hand edit took from the operator (see plan.drift), which
    # the apply takes back; set only with action apply.
    drift: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _held_exactly_when_hold(self) -> PlannedObject:
        held = self.action is ObjectAction.HOLD
        if held != (self.hold is not None) or held != (self.hold_reason is not None):
            raise ValueError(f"{self.key}: a hold and its reason go with action hold, and only")
        if self.drift and self.action is not ObjectAction.APPLY:
            raise ValueError(f"{self.key}: drift goes with action apply, and only")
        return self

    @property
    def shown(self) -> str:
        """``Kind namespace/name`` (``Kind name`` when cluster-scoped), for a person."""
        meta = self.object["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{self.object['kind']} {where}{meta['name']}"


class RequirementResult(Frozen):
    component: str
    requirement: str
    status: RequirementStatus
    message: str
    severity: Severity = Severity.REQUIRED


class VersionWarning(Frozen):
    """A component's pinned version outside its supported range: accepted, and reported."""

    component: str
    version: str
    message: str


class ComponentPlan(Frozen):
    name: str
    mode: str  # Managed or Provided (config-role components are always Managed)
    kind: str  # chart, manifests, objects
    version: str  # the desired version: the spec's pin, or the default one
    namespace: str
    # The installed version it is held at while its upgrade waits for the
    # rollout (plan.rollout); None when it is planned at ``version``.
    held_at: str | None = None
    chart: str | None = None
    repository: str | None = None
    state: str
    message: str = ""


class Work(Frozen):
    """One thing that still stands between a component and done."""

    component: str
    what: str  # for a person: "release mp-lws: install", "modelplane-system/x: apply"
    # A node agent rolled a node at a time after its upgrade (plan.node_agents).
    roll: bool = False


def work_left(
    releases: list[PlannedRelease],
    manifests: list[PlannedManifests],
    objects: list[PlannedObject],
) -> list[Work]:
    """Everything not done yet, in plan order: the one rule of "has work left".

    Waiting counts (a release for its dependencies, an object for its API):
    it is not done. An object the spec withholds does not: nothing changes
    until the spec does.
    """
    out: list[Work] = []
    for r in releases:
        if r.action is ReleaseAction.WAIT:
            out.append(
                Work(
                    component=r.component,
                    what=f"release {r.name} waits for {', '.join(r.waiting_for)}",
                )
            )
        elif r.action is not ReleaseAction.NONE:
            out.append(Work(component=r.component, what=f"release {r.name}: {r.action}"))
    out += [
        Work(component=m.component, what=f"manifests of {m.component}: apply")
        for m in manifests
        if m.action is not ObjectAction.NONE
    ]
    for o in objects:
        if o.action is ObjectAction.APPLY and o.drift:
            what = f"{_short(o.key)}: restore {', '.join(o.drift)}"
            out.append(Work(component=o.component, what=what))
        elif o.action is ObjectAction.APPLY:
            out.append(Work(component=o.component, what=f"{_short(o.key)}: apply"))
        elif o.hold is Hold.WAITING_FOR_API:
            out.append(Work(component=o.component, what=f"{_short(o.key)}: {o.hold_reason}"))
    return out


class GatewayReport(Frozen):
    address: str | None = None
    ca_certificate: str | None = None
    # Why the Bundle's CA is not published (e.g. its ConfigMap holds more than
    # certificates); never any of the ConfigMap's content. Set by the planner.
    ca_problem: str | None = None


class NotServing(Frozen):
    reason: ReadyReason
    message: str


class Plan(Frozen):
    name: str
    namespace: str
    stack: str
    mode: str
    components: list[ComponentPlan]
    releases: list[PlannedRelease]
    manifests: list[PlannedManifests]
    objects: list[PlannedObject]
    requirements: list[RequirementResult]
    notes: list[str]
    gateway: GatewayReport
    # Computed once by the planner (work_left); the status, component states
    # and the reconciler's failures all read it.
    work: list[Work]
    version_warnings: list[VersionWarning] = Field(default_factory=list)
    # clientCAs entries admitted but doubtful (not a CA, expired); also in notes.
    client_ca_warnings: list[str] = Field(default_factory=list)
    # The image mirror rules in force ("FROM=TO"), and every image the plan
    # runs (releases and the product's own objects) before and after them.
    image_mirrors: list[str] = Field(default_factory=list)
    images: list[ImageUse] = Field(default_factory=list)
    # The Secrets every rewritten pod pulls with, and those the target was
    # seen to lack where a component's pods run (never held back for).
    image_pull_secrets: list[str] = Field(default_factory=list)
    missing_pull_secrets: list[MissingPullSecret] = Field(default_factory=list)
    # What the cluster offers (status.target) and whether it offers GPUs
    # (GPUsAvailable); None when the target's facts were not read.
    target: TargetSummary | None = None
    gpus: GpuAvailability | None = None
    # Managed mode: why the installed stack does not serve although nothing
    # is left to do (the Gateway not programmed); Ready says it. None when it
    # serves, or in Provided mode, where the same finding is an advisory.
    not_serving: NotServing | None = None
    # Managed mode: each component's health from its releases' workloads
    # (plan.release_health), and the releases' objects changed by hand.
    health: list[ComponentHealth] = Field(default_factory=list)
    release_drift: list[ReleaseDrift] = Field(default_factory=list)

    @property
    def unhealthy(self) -> list[ComponentHealth]:
        """The components whose workloads are not all available, worst first."""
        order = (State.DEGRADED, State.PROGRESSING)
        return sorted(
            (h for h in self.health if h.state in order),
            key=lambda h: (order.index(h.state), h.component),
        )

    @property
    def unmet(self) -> list[RequirementResult]:
        return [
            r
            for r in self.requirements
            if r.severity is Severity.REQUIRED and r.status is not RequirementStatus.MET
        ]

    @property
    def requirements_met(self) -> bool:
        return not self.unmet

    @property
    def pending(self) -> list[str]:
        """What still stands between the target and Ready, for a person to read."""
        return [w.what for w in self.work]

    @property
    def components_with_work(self) -> set[str]:
        """The components (and "configuration") that are not done yet."""
        return {w.component for w in self.work}


def _short(key: str) -> str:
    parts = key.split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else key
