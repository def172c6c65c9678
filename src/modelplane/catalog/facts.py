"""The facts about a target cluster the advisory checks read, and the LIST behind each.

A fact kind is data: the one LIST that reads it (``Listing``) and how the
listed objects reduce to the little the checks need. It does no I/O:
``modelplane.observe.facts`` issues the LISTs, at most one per distinct
listing, all at once. The reduced facts are pydantic models because they
cross a boundary: ``modelplane render --observed FILE`` reads them from a
file, and tests write them by hand.

They live in the catalog, not in the plan, because the catalog's advisories
are written in them (see ``catalog.advisories``) and the catalog sits below
the plan; ``plan.observed`` re-exports them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from modelplane.catalog.placement import (
    BLOCKING_EFFECTS,
    MAX_TAINTS,
    NodeSelection,
    ObservedToleration,
    Placement,
    node_selection,
    tolerations,
)
from modelplane.wire import ApiRef

NODES = ApiRef("", "v1", "nodes")
CONFIG_MAPS = ApiRef("", "v1", "configmaps")
SERVICES = ApiRef("", "v1", "services")
RESOURCE_QUOTAS = ApiRef("", "v1", "resourcequotas")
DEPLOYMENTS = ApiRef("apps", "v1", "deployments")
DAEMON_SETS = ApiRef("apps", "v1", "daemonsets")
RESOURCE_SLICES = ApiRef("resource.k8s.io", "v1", "resourceslices")

Item = dict[str, Any]  # one listed object, as the API server sent it


# ---- the facts -----------------------------------------------------------------------


class ObservedTaint(BaseModel):
    """A taint that keeps pods off a node (NoSchedule or NoExecute)."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str = ""
    effect: str = ""

    @property
    def shown(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


class ObservedWorkload(BaseModel):
    """A Deployment or DaemonSet, reduced to what the advisory checks read."""

    model_config = ConfigDict(frozen=True)

    kind: str  # Deployment or DaemonSet
    namespace: str
    name: str
    images: list[str] = Field(default_factory=list)
    # command and args of every container, in order
    args: list[str] = Field(default_factory=list)
    available: bool = False
    # A DaemonSet's nodes it should run on, and those where it is available;
    # None for a Deployment, or a DaemonSet whose status does not say.
    scheduled: int | None = None
    available_on: int | None = None
    # A DaemonSet's pod template's tolerations and node selection: which
    # nodes it can run on (catalog.placement).
    tolerations: list[ObservedToleration] = Field(default_factory=list)
    selection: NodeSelection = Field(default_factory=NodeSelection)

    @property
    def placement(self) -> Placement:
        return Placement(selection=self.selection, tolerations=self.tolerations)


class ObservedNode(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[str] = Field(default_factory=list)  # keys
    # Cordoned (spec.unschedulable), and the taints that keep pods off it:
    # a GPU there is not available to new pods (plan.capacity).
    unschedulable: bool = False
    blocking_taints: list[ObservedTaint] = Field(default_factory=list)
    # extended resources only (names with a "/"), e.g. nvidia.com/gpu
    allocatable: dict[str, str] = Field(default_factory=dict)


class ObservedService(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    ports: list[int] = Field(default_factory=list)


class ObservedConfigMap(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    data: dict[str, str] = Field(default_factory=dict)


class ObservedQuota(BaseModel):
    """A ResourceQuota, reduced to the PriorityClasses its scope selector admits."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    priority_classes: list[str] = Field(default_factory=list)


class ObservedObject(BaseModel):
    """A custom object: its name and its spec."""

    model_config = ConfigDict(frozen=True)

    namespace: str = ""
    name: str
    spec: dict[str, Any] = Field(default_factory=dict)


class ClusterFacts(BaseModel):
    """What the advisory checks read. ``None`` means not observed (see ``unobservable``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[ObservedNode] | None = None
    # DRA driver name -> nodes that have a ResourceSlice of it
    resource_slices: dict[str, list[str]] | None = None
    workloads: list[ObservedWorkload] | None = None
    config_maps: list[ObservedConfigMap] | None = None
    services: list[ObservedService] | None = None
    quotas: list[ObservedQuota] | None = None
    # "group/version/resource" -> objects; absent when the kind is not served
    custom: dict[str, list[ObservedObject]] = Field(default_factory=dict)
    # fact ("nodes", "workloads", ...) -> why it could not be observed
    unobservable: dict[str, str] = Field(default_factory=dict)


# ---- the fact kinds ------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """One LIST request: a resource, in one namespace or all, optionally one name."""

    api: ApiRef
    namespace: str | None = None  # None: every namespace (or a cluster-scoped resource)
    name: str | None = None  # only objects of this name (a field selector)

    @property
    def field_selector(self) -> str | None:
        return f"metadata.name={self.name}" if self.name else None


# What one fact kind contributes to ClusterFacts: some of its fields.
Fragment = dict[str, Any]


class Fact(ABC):
    """One kind of fact: the listing that reads it and how its objects reduce.

    Kinds are frozen dataclasses, so two advisories that need the same fact
    ask for an equal one and it is read once.
    """

    @property
    @abstractmethod
    def what(self) -> str:
        """Its key in ``ClusterFacts.unobservable``; every kind with one key fails together."""

    @property
    @abstractmethod
    def listing(self) -> Listing: ...

    @abstractmethod
    def reduce(self, items: list[Item]) -> Fragment:
        """The ClusterFacts fields the listed objects give, even when there are none."""

    def not_served(self) -> str:
        """Why the fact cannot be observed when discovery does not list its resource."""
        return f"{self.listing.api} is not served"

    def within(self, namespace: str) -> Fact:
        """The fact as read in ``namespace`` only; a cluster-wide fact is itself."""
        return self


def _name(obj: Item) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass(frozen=True)
class Nodes(Fact):
    @property
    def what(self) -> str:
        return "nodes"

    @property
    def listing(self) -> Listing:
        return Listing(NODES)

    def reduce(self, items: list[Item]) -> Fragment:
        return {"nodes": [_node(i) for i in items]}


def _node(obj: Item) -> ObservedNode:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return ObservedNode(
        name=_name(obj)[1],
        labels=dict((obj.get("metadata") or {}).get("labels") or {}),
        taints=[str(t.get("key")) for t in spec.get("taints") or [] if t.get("key")],
        allocatable={
            str(k): str(v) for k, v in (status.get("allocatable") or {}).items() if "/" in k
        },
        unschedulable=spec.get("unschedulable") is True,
        blocking_taints=blocking_taints(spec.get("taints")),
    )


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def blocking_taints(taints: object) -> list[ObservedTaint]:
    """A Node's ``spec.taints`` that keep pods off it, as far as they are well formed."""
    found = taints if isinstance(taints, list) else []
    return [
        ObservedTaint(
            key=_text(t.get("key"), 317),
            value=_text(t.get("value"), 63),
            effect=str(t.get("effect")),
        )
        for t in found[:MAX_TAINTS]
        if isinstance(t, dict) and t.get("effect") in BLOCKING_EFFECTS and _text(t.get("key"), 317)
    ]


@dataclass(frozen=True)
class ResourceSlices(Fact):
    @property
    def what(self) -> str:
        return "resourceslices"

    @property
    def listing(self) -> Listing:
        return Listing(RESOURCE_SLICES)

    def not_served(self) -> str:
        return f"{super().not_served()} (DRA is GA from Kubernetes 1.34)"

    def reduce(self, items: list[Item]) -> Fragment:
        out: dict[str, set[str]] = {}
        for item in items:
            spec = item.get("spec") or {}
            if spec.get("driver") and spec.get("nodeName"):
                out.setdefault(str(spec["driver"]), set()).add(str(spec["nodeName"]))
        return {"resource_slices": {driver: sorted(nodes) for driver, nodes in out.items()}}


_WORKLOAD_APIS = {"Deployment": DEPLOYMENTS, "DaemonSet": DAEMON_SETS}


@dataclass(frozen=True)
class WorkloadsOfKind(Fact):
    """Every workload of one kind (Deployment or DaemonSet), in one namespace.

    ``namespace`` is the component's (``within``): None, every namespace,
    is only the kind as an advisory names it, before it is read.
    """

    kind: str
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _WORKLOAD_APIS:
            raise ValueError(f"workload kind {self.kind!r} is not one of {sorted(_WORKLOAD_APIS)}")

    @property
    def what(self) -> str:
        # One key for both kinds: a check that finds no DaemonSet because
        # DaemonSets could not be listed must say so, not "none found".
        return "workloads"

    @property
    def listing(self) -> Listing:
        return Listing(_WORKLOAD_APIS[self.kind], namespace=self.namespace)

    def within(self, namespace: str) -> Fact:
        return replace(self, namespace=namespace)

    def reduce(self, items: list[Item]) -> Fragment:
        return {"workloads": [_workload(self.kind, i) for i in items]}


def _workload(kind: str, obj: Item) -> ObservedWorkload:
    namespace, name = _name(obj)
    daemon = kind == "DaemonSet"
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    status = obj.get("status") or {}
    scheduled: int | None = None
    available_on: int | None = None
    if kind == "Deployment":
        available = any(
            c.get("type") == "Available" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
    else:
        desired = status.get("desiredNumberScheduled")
        available = desired is not None and status.get("numberAvailable", 0) == desired
        if isinstance(desired, int) and not isinstance(desired, bool):
            scheduled = desired
            number = status.get("numberAvailable", 0)
            available_on = number if isinstance(number, int) and not isinstance(number, bool) else 0
    return ObservedWorkload(
        kind=kind,
        namespace=namespace,
        name=name,
        images=[str(c["image"]) for c in containers if c.get("image")],
        args=[
            str(a) for c in containers for a in [*(c.get("command") or []), *(c.get("args") or [])]
        ],
        available=available,
        scheduled=scheduled,
        available_on=available_on,
        tolerations=tolerations(pod) if daemon else [],
        selection=node_selection(pod) if daemon else NodeSelection(),
    )


@dataclass(frozen=True)
class Quotas(Fact):
    """Every ResourceQuota: GKE's restricting one is in kube-system, not the driver's namespace.

    Writing one takes more than a tenant's rights, and a quota is only ever
    matched against the namespace of a workload the advisory found.
    """

    @property
    def what(self) -> str:
        return "resourcequotas"

    @property
    def listing(self) -> Listing:
        return Listing(RESOURCE_QUOTAS)

    def reduce(self, items: list[Item]) -> Fragment:
        return {"quotas": [_quota(i) for i in items]}


def _quota(obj: Item) -> ObservedQuota:
    namespace, name = _name(obj)
    classes: list[str] = []
    selector = (obj.get("spec") or {}).get("scopeSelector") or {}
    for expr in selector.get("matchExpressions") or []:
        if expr.get("scopeName") != "PriorityClass":
            continue
        if expr.get("operator") == "In":
            classes += [str(v) for v in expr.get("values") or []]
        elif expr.get("operator") == "Exists":
            classes.append("*")
    return ObservedQuota(namespace=namespace, name=name, priority_classes=classes)


@dataclass(frozen=True)
class ConfigMapsNamed(Fact):
    """The ConfigMaps of one name, in the component's namespace (``within``)."""

    name: str
    namespace: str | None = None

    @property
    def what(self) -> str:
        return "configmaps"

    @property
    def listing(self) -> Listing:
        return Listing(CONFIG_MAPS, namespace=self.namespace, name=self.name)

    def within(self, namespace: str) -> Fact:
        return replace(self, namespace=namespace)

    def reduce(self, items: list[Item]) -> Fragment:
        return {
            "config_maps": [
                ObservedConfigMap(
                    namespace=_name(c)[0],
                    name=_name(c)[1],
                    data={str(k): str(v) for k, v in (c.get("data") or {}).items()},
                )
                for c in items
            ]
        }


@dataclass(frozen=True)
class ServiceAt(Fact):
    """One Service at a fixed address."""

    namespace: str
    name: str

    @property
    def what(self) -> str:
        return "services"

    @property
    def listing(self) -> Listing:
        # A LIST narrowed to the name costs what a GET does, and answers an
        # empty list rather than 404 when it does not exist.
        return Listing(SERVICES, namespace=self.namespace, name=self.name)

    def reduce(self, items: list[Item]) -> Fragment:
        return {
            "services": [
                ObservedService(
                    namespace=_name(s)[0],
                    name=_name(s)[1],
                    ports=[int(p["port"]) for p in (s.get("spec") or {}).get("ports") or []],
                )
                for s in items
            ]
        }


@dataclass(frozen=True)
class CustomObjects(Fact):
    """Every object of a custom resource, with its spec.

    The whole spec is kept, so that every check of one kind asks for an
    equal fact and the kind is listed once.
    """

    api: ApiRef
    # A namespaced kind is read in the component's namespace (``within``);
    # a cluster-scoped one has none.
    namespaced: bool = False
    namespace: str | None = None

    @property
    def what(self) -> str:
        return self.api.key

    @property
    def listing(self) -> Listing:
        return Listing(self.api, namespace=self.namespace)

    def within(self, namespace: str) -> Fact:
        return replace(self, namespace=namespace) if self.namespaced else self

    def reduce(self, items: list[Item]) -> Fragment:
        return {
            "custom": {
                self.api.key: [
                    ObservedObject(
                        namespace=_name(o)[0], name=_name(o)[1], spec=dict(o.get("spec") or {})
                    )
                    for o in items
                ]
            }
        }


def assemble(read: list[tuple[Fact, list[Item]]], unobservable: dict[str, str]) -> ClusterFacts:
    """ClusterFacts from what each fact's listing returned.

    A key that could not be observed stays None even if another listing of
    the same key worked: half of the workloads would read as "none found".
    """
    fields: Fragment = {}
    for fact, items in read:
        if fact.what in unobservable:
            continue
        for field, value in fact.reduce(items).items():
            fields[field] = _merge(fields.get(field), value)
    return ClusterFacts(**fields, unobservable=unobservable)


def _merge(have: Any, more: Any) -> Any:
    if have is None:
        return more
    if isinstance(have, dict):
        return {**have, **more}
    return [*have, *more]
