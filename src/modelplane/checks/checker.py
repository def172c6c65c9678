"""Checking a target against the requirements of a stack in Provided mode.

The rules are the catalog's and the planner's: this module only gathers the
facts and hands them to ``plan``. Observation costs a bounded number of
requests, whatever the number of CRDs: two for aggregated discovery, then at
most one LIST per kind the checks read (Nodes, ResourceSlices, Deployments,
DaemonSets, ResourceQuotas, DeviceClasses, Prometheuses, the named
ConfigMaps) and one GET per named Service, all issued concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lightkube import AsyncClient

from modelplane.api.models import API_GROUP, API_VERSION, KIND, ServingStack
from modelplane.catalog.components import COMPONENTS, components_of_stack
from modelplane.catalog.types import (
    Component,
    ConfigFileWired,
    CriticalPodsAdmitted,
    GpuNodesLabelled,
    GpuNodesPublishSlices,
    ImageTag,
    NoNodeAdvertises,
    ObjectExists,
    SchedulerName,
    SelectsEverything,
    ServicePort,
    WorkloadArg,
    WorkloadsAvailable,
)
from modelplane.pins import Stack
from modelplane.plan import plan
from modelplane.plan.model import RequirementResult, RequirementStatus, Severity
from modelplane.plan.observed import (
    ClusterFacts,
    Observed,
    ObservedConfigMap,
    ObservedNode,
    ObservedObject,
    ObservedQuota,
    ObservedService,
    ObservedWorkload,
)
from modelplane.target.discovery import ApiStatusError, get_object, list_objects, served_apis
from modelplane.wire import ApiRef

NODES = ApiRef("", "v1", "nodes")
CONFIG_MAPS = ApiRef("", "v1", "configmaps")
SERVICES = ApiRef("", "v1", "services")
RESOURCE_QUOTAS = ApiRef("", "v1", "resourcequotas")
DEPLOYMENTS = ApiRef("apps", "v1", "deployments")
DAEMON_SETS = ApiRef("apps", "v1", "daemonsets")
RESOURCE_SLICES = ApiRef("resource.k8s.io", "v1", "resourceslices")

# Answers that mean "you may not see this" or "there is no such thing": the
# fact becomes unobservable and its checks unknown. Anything else is raised.
_UNOBSERVABLE_STATUS = (403, 404, 405)

T = TypeVar("T")


@dataclass
class _Needs:
    """Which facts the advisory checks of some components read."""

    nodes: bool = False
    slices: bool = False
    quotas: bool = False
    workload_kinds: set[str] = field(default_factory=set)
    config_maps: set[str] = field(default_factory=set)
    services: set[tuple[str, str]] = field(default_factory=set)
    custom: dict[str, tuple[ApiRef, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, components: Iterable[Component]) -> _Needs:
        needs = cls()
        for component in components:
            for a in component.advisories:
                if isinstance(a, WorkloadsAvailable | WorkloadArg | ImageTag | SchedulerName):
                    needs.workload_kinds.update(a.workloads.kinds)
                elif isinstance(a, CriticalPodsAdmitted):
                    needs.workload_kinds.update(a.workloads.kinds)
                    needs.quotas = True
                elif isinstance(a, ConfigFileWired):
                    needs.config_maps.add(a.config_map)
                elif isinstance(a, ServicePort):
                    needs.services.add((a.namespace, a.name))
                elif isinstance(a, SelectsEverything):
                    have = needs.custom.get(a.api.key, (a.api, ()))[1]
                    needs.custom[a.api.key] = (a.api, tuple(dict.fromkeys(have + a.fields)))
                elif isinstance(a, NoNodeAdvertises):
                    needs.nodes = True
                elif isinstance(a, GpuNodesLabelled | GpuNodesPublishSlices):
                    needs.nodes = needs.slices = True
        return needs


def _serves(apis: dict[str, dict[str, list[str]]], api: ApiRef) -> bool:
    return api.version in apis.get(api.group, {}).get(api.resource, [])


def _name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _node(obj: dict[str, Any]) -> ObservedNode:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return ObservedNode(
        name=_name(obj)[1],
        labels=dict((obj.get("metadata") or {}).get("labels") or {}),
        taints=[str(t.get("key")) for t in spec.get("taints") or [] if t.get("key")],
        allocatable={
            str(k): str(v) for k, v in (status.get("allocatable") or {}).items() if "/" in k
        },
    )


def _workload(kind: str, obj: dict[str, Any]) -> ObservedWorkload:
    namespace, name = _name(obj)
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    status = obj.get("status") or {}
    if kind == "Deployment":
        available = any(
            c.get("type") == "Available" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
    else:
        desired = status.get("desiredNumberScheduled")
        available = desired is not None and status.get("numberAvailable", 0) == desired
    return ObservedWorkload(
        kind=kind,
        namespace=namespace,
        name=name,
        images=[str(c["image"]) for c in containers if c.get("image")],
        args=[
            str(a) for c in containers for a in [*(c.get("command") or []), *(c.get("args") or [])]
        ],
        available=available,
    )


def _quota(obj: dict[str, Any]) -> ObservedQuota:
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


def _slices(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for item in items:
        spec = item.get("spec") or {}
        if spec.get("driver") and spec.get("nodeName"):
            out.setdefault(str(spec["driver"]), set()).add(str(spec["nodeName"]))
    return {driver: sorted(nodes) for driver, nodes in out.items()}


async def observe_cluster(
    client: AsyncClient,
    components: Iterable[Component],
    apis: dict[str, dict[str, list[str]]],
) -> ClusterFacts:
    """The facts the advisory checks of ``components`` read, one request per kind."""
    needs = _Needs.of(components)
    unobservable: dict[str, str] = {}

    async def fact(what: str, read: Callable[[], Awaitable[T]]) -> T | None:
        try:
            return await read()
        except ApiStatusError as err:
            if err.status not in _UNOBSERVABLE_STATUS:
                raise
            unobservable[what] = f"{err.status} {err.reason}"
            return None

    def listing(api: ApiRef, **kw: str) -> Callable[[], Awaitable[list[dict[str, Any]]]]:
        return lambda: list_objects(client, api, **kw)

    async def none() -> None:
        return None

    async def services() -> list[dict[str, Any]]:
        found = await asyncio.gather(
            *(get_object(client, SERVICES, n, namespace=ns) for ns, n in sorted(needs.services))
        )
        return [s for s in found if s is not None]

    async def config_maps() -> list[dict[str, Any]]:
        found = await asyncio.gather(
            *(
                list_objects(client, CONFIG_MAPS, fields=f"metadata.name={name}")
                for name in sorted(needs.config_maps)
            )
        )
        return [cm for batch in found for cm in batch]

    slices_served = _serves(apis, RESOURCE_SLICES)
    if needs.slices and not slices_served:
        unobservable["resourceslices"] = (
            f"{RESOURCE_SLICES.group_version} resourceslices is not served (DRA is GA from "
            "Kubernetes 1.34)"
        )
    custom_served = {k: v for k, v in needs.custom.items() if _serves(apis, v[0])}
    for key, (api, _) in needs.custom.items():
        if key not in custom_served:
            unobservable[key] = f"{api.resource}.{api.group} is not served"

    (
        nodes,
        slices,
        deployments,
        daemon_sets,
        quotas,
        cms,
        svcs,
        *custom_lists,
    ) = await asyncio.gather(
        fact("nodes", listing(NODES)) if needs.nodes else none(),
        fact("resourceslices", listing(RESOURCE_SLICES))
        if needs.slices and slices_served
        else none(),
        fact("workloads", listing(DEPLOYMENTS)) if "Deployment" in needs.workload_kinds else none(),
        fact("workloads", listing(DAEMON_SETS)) if "DaemonSet" in needs.workload_kinds else none(),
        fact("resourcequotas", listing(RESOURCE_QUOTAS)) if needs.quotas else none(),
        fact("configmaps", config_maps) if needs.config_maps else none(),
        fact("services", services) if needs.services else none(),
        *(fact(key, listing(api)) for key, (api, _) in custom_served.items()),
    )

    workloads: list[ObservedWorkload] | None = None
    if "workloads" not in unobservable and needs.workload_kinds:
        workloads = [_workload("Deployment", d) for d in deployments or []]
        workloads += [_workload("DaemonSet", d) for d in daemon_sets or []]
    custom: dict[str, list[ObservedObject]] = {}
    for (key, (_, fields)), items in zip(custom_served.items(), custom_lists, strict=True):
        if items is None:
            continue
        custom[key] = [
            ObservedObject(
                namespace=_name(o)[0],
                name=_name(o)[1],
                spec={f: (o.get("spec") or {})[f] for f in fields if f in (o.get("spec") or {})},
            )
            for o in items
        ]
    return ClusterFacts(
        nodes=[_node(n) for n in nodes] if nodes is not None else None,
        resource_slices=_slices(slices) if slices is not None else None,
        workloads=workloads,
        config_maps=[
            ObservedConfigMap(
                namespace=_name(c)[0],
                name=_name(c)[1],
                data={str(k): str(v) for k, v in (c.get("data") or {}).items()},
            )
            for c in cms
        ]
        if cms is not None
        else None,
        services=[
            ObservedService(
                namespace=_name(s)[0],
                name=_name(s)[1],
                ports=[int(p["port"]) for p in (s.get("spec") or {}).get("ports") or []],
            )
            for s in svcs
        ]
        if svcs is not None
        else None,
        quotas=[_quota(q) for q in quotas] if quotas is not None else None,
        custom=custom,
        unobservable=unobservable,
    )


async def observe_required_objects(
    client: AsyncClient,
    components: Iterable[Component],
    apis: dict[str, dict[str, list[str]]],
) -> dict[str, list[str]]:
    """Names of the objects ``ObjectExists`` requirements ask about: one LIST per kind."""
    wanted = {
        r.api.key: r.api
        for c in components
        for r in c.requirements
        if isinstance(r, ObjectExists) and _serves(apis, r.api)
    }
    lists = await asyncio.gather(*(list_objects(client, api) for api in wanted.values()))
    return {
        key: sorted(_name(o)[1] for o in items) for key, items in zip(wanted, lists, strict=True)
    }


async def observe_for_check(client: AsyncClient, stack: Stack) -> Observed:
    """What the checks of ``stack`` read from the target, in a bounded number of requests."""
    components = components_of_stack(stack)
    apis = await served_apis(client)
    objects, cluster = await asyncio.gather(
        observe_required_objects(client, components, apis),
        observe_cluster(client, components, apis),
    )
    return Observed(apis=apis, objects=objects, cluster=cluster)


def provided_stack(stack: Stack) -> ServingStack:
    """A ServingStack of ``stack`` in Provided mode, as ``modelplane check`` pretends one."""
    return ServingStack.model_validate(
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": "check", "namespace": "default"},
            "spec": {
                "stack": str(stack),
                "components": "Provided",
                "secrets": [{"type": "Kubeconfig", "name": "target", "key": "kubeconfig"}],
            },
        }
    )


def check_results(stack: Stack, observed: Observed) -> list[RequirementResult]:
    """The plan's requirement results for the substrate, grouped by component."""
    results = plan(provided_stack(stack), observed).requirements
    order = {c.name: i for i, c in enumerate(COMPONENTS)}
    return sorted(results, key=lambda r: order[r.component])


async def run_checks(client: AsyncClient, stack: Stack) -> list[RequirementResult]:
    return check_results(stack, await observe_for_check(client, stack))


@dataclass(frozen=True)
class Summary:
    met: int
    unmet: int
    warning: int
    unknown: int

    @property
    def requirements_met(self) -> bool:
        return self.unmet == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "met": self.met,
            "unmet": self.unmet,
            "warning": self.warning,
            "unknown": self.unknown,
            "requirementsMet": self.requirements_met,
        }


def summarize(results: list[RequirementResult]) -> Summary:
    def count(status: RequirementStatus) -> int:
        return sum(1 for r in results if r.status is status)

    # Only required results can be unmet; advisory ones are warnings at worst.
    return Summary(
        met=count(RequirementStatus.MET),
        unmet=sum(
            1
            for r in results
            if r.severity is Severity.REQUIRED and r.status is not RequirementStatus.MET
        ),
        warning=count(RequirementStatus.WARNING),
        unknown=count(RequirementStatus.UNKNOWN),
    )
