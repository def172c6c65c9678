"""Reading what a release's install or upgrade would clash with, before it writes anything.

The rules are ``plan.conflicts``'; this reads what they judge, as bounded
as every other read of a target: the metadata alone of each object the
release renders (one GET by name each, a few at once, at most
``plan.conflicts.MAX_OBJECTS`` of them), its chart's CRDs (the chart CRD
step's own read), and for a component that must be alone on a cluster the
Deployments or DaemonSets (one LIST each, within the kind's budget) and,
for the DRA driver, the Nodes. ``modelplane diff`` and the operator call
it alike; the operator holds the component back on any conflict that the
spec does not adopt (``ConflictsFound``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import AsyncClient

from modelplane.actions.chart_crds import applies_chart_crds, read_chart_crd_state
from modelplane.actions.helm import Helm
from modelplane.catalog.facts import DAEMON_SETS, DEPLOYMENTS, NODES
from modelplane.faults import ErrorKind, KnownError
from modelplane.kube.client import (
    METADATA_OBJECT,
    ApiStatusError,
    collection_path,
    get_json,
    list_objects,
)
from modelplane.kube.resources import KindNotServed, plural_of
from modelplane.plan.conflicts import (
    DRA_DRIVER,
    SINGLETONS,
    Conflict,
    LiveWorkload,
    ObjectRef,
    Ours,
    Release,
    advertising,
    crd_conflicts,
    device_plugin_nodes,
    gateway_class,
    live_workload,
    messages,
    planned_refs,
    second_instances,
    taken,
)
from modelplane.plan.manifest import MANIFEST_LIMITS
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.untrusted import load_yaml_all
from modelplane.vocabulary import EventReason
from modelplane.wire import ApiRef

# GETs of one release's objects at once: a release renders a few hundred.
GETS_AT_ONCE = 8
_WORKLOAD_APIS = {"Deployment": DEPLOYMENTS, "DaemonSet": DAEMON_SETS}


class ConflictsFound(KnownError):
    """A release (or objects) not written: the target holds what it would clash with.

    Refused, as a chart CRD upgrade is: retrying changes nothing until a
    person removes the clash, or adopts what the spec may take over.
    """

    kind = ErrorKind.INVALID

    def __init__(self, what: str, conflicts: Sequence[Conflict]) -> None:
        """``what``: what was held back, for a person ("release mp-cert-manager")."""
        super().__init__(
            f"held back before any write, {what} would clash with what "
            f"the cluster runs: {messages(conflicts)}"
        )
        self.conflicts = tuple(conflicts)

    def condition_reason(self) -> str | None:
        return EventReason.CONFLICTS_FOUND


def _api(ref: ObjectRef, plural: str) -> ApiRef:
    group, _, version = ref.api_version.rpartition("/")
    return ApiRef(group, version, plural)


async def object_metadata(client: AsyncClient, ref: ObjectRef) -> dict[str, Any] | None:
    """The metadata of the live object ``ref`` names, or None when there is none."""
    try:
        plural = await plural_of(client, ref.api_version, ref.kind)
    except KindNotServed:
        return None  # nothing of a kind the target does not serve exists
    path = f"{collection_path(_api(ref, plural), ref.namespace or None)}/{ref.name}"
    try:
        answer = await get_json(client, path, accept=METADATA_OBJECT)
    except ApiStatusError as err:
        if err.status == 404:
            return None
        raise
    return metadata_of(answer, ref)


def metadata_of(answer: Any, ref: ObjectRef) -> dict[str, Any] | None:
    """The metadata of ``answer`` when it is the object ``ref`` names; None when it is not.

    A real API server answers a GET by name with that object. An answer of
    another name, or with no metadata (a list, an HTML page parsed as
    something), is a target's odd answer, and shows no such object: it holds
    nothing back, and what is written next meets the target as it is.
    """
    meta = answer.get("metadata") if isinstance(answer, dict) else None
    if not isinstance(meta, dict) or meta.get("name") != ref.name:
        return None
    return meta


async def live_metadata(
    client: AsyncClient, refs: Sequence[ObjectRef]
) -> dict[ObjectRef, dict[str, Any]]:
    """The metadata of each of ``refs`` that exists, a few GETs at once."""
    limit = asyncio.Semaphore(GETS_AT_ONCE)

    async def one(ref: ObjectRef) -> dict[str, Any] | None:
        async with limit:
            return await object_metadata(client, ref)

    found = await asyncio.gather(*(one(r) for r in refs))
    return {r: meta for r, meta in zip(refs, found, strict=True) if meta is not None}


async def live_workloads(client: AsyncClient, kinds: frozenset[str]) -> list[LiveWorkload]:
    """Every workload of ``kinds`` on the cluster, reduced; each LIST within its kind's budget."""
    out: list[LiveWorkload] = []
    for kind in sorted(kinds):
        items = await list_objects(client, _WORKLOAD_APIS[kind])
        out += [live_workload(kind, i) for i in items]
    return out


async def gpu_advertising_nodes(client: AsyncClient) -> list[str]:
    """The nodes whose allocatable advertises a device plugin's GPUs."""
    items = await list_objects(client, NODES)
    return advertising(
        {
            str((i.get("metadata") or {}).get("name") or ""): (i.get("status") or {}).get(
                "allocatable"
            )
            or {}
            for i in items
        }
    )


async def singleton_conflicts(
    client: AsyncClient, component: str, ours: Ours, planned: Sequence[ObjectRef] = ()
) -> list[Conflict]:
    """Another instance of what ``component`` must be alone on a cluster as.

    ``planned``: the objects its release renders, which are no second instance.
    """
    rules = SINGLETONS.get(component, ())
    kinds = frozenset(k for r in rules for k in r.kinds)
    out = (
        second_instances(component, await live_workloads(client, kinds), ours, planned)
        if kinds
        else []
    )
    if component == DRA_DRIVER:
        out += device_plugin_nodes(component, await gpu_advertising_nodes(client))
    return out


def release_ref(release: PlannedRelease) -> Release:
    return Release(release.component, release.name, release.namespace)


async def rendered_refs(release: PlannedRelease, rendered: str) -> list[ObjectRef]:
    """The objects ``rendered`` (``helm template``'s output) would write."""
    # Up to MiBs of YAML: parsed off the event loop.
    docs = await asyncio.to_thread(lambda: list(load_yaml_all(rendered, MANIFEST_LIMITS)))
    return planned_refs(docs, release.namespace)


async def scan_release(
    helm: Helm,
    client: AsyncClient,
    release: PlannedRelease,
    kubeconfig: str,
    ours: Ours,
    *,
    rendered: str | None = None,
    crds: tuple[Sequence[Mapping[str, Any]], Mapping[str, Mapping[str, Any]]] | None = None,
) -> list[Conflict]:
    """Everything ``release``'s install or upgrade would clash with on the target.

    ``rendered`` and ``crds`` (its chart's crds/ and their live copies), when
    the caller has them already (``modelplane diff``), are not read again.
    """
    if rendered is None:
        rendered = await helm.template(
            release, kubeconfig, is_upgrade=release.action is ReleaseAction.UPGRADE
        )
    refs = await rendered_refs(release, rendered)
    out = taken(release_ref(release), refs, await live_metadata(client, refs), ours)
    if crds is None and applies_chart_crds(release):
        reads = await read_chart_crd_state(helm, client, release, kubeconfig)
        crds = (reads.desired, reads.live)
    if crds is not None:
        out += crd_conflicts(release_ref(release), crds[0], crds[1])
    return out + await singleton_conflicts(client, release.component, ours, refs)


async def gateway_class_conflicts(
    client: AsyncClient, component: str, bodies: Sequence[Mapping[str, Any]]
) -> list[Conflict]:
    """The GatewayClasses of ``bodies`` the cluster holds with another controller."""
    out: list[Conflict] = []
    for body in bodies:
        if body.get("kind") != "GatewayClass":
            continue
        name = str(body["metadata"]["name"])
        controller = str((body.get("spec") or {}).get("controllerName") or "")
        ref = ObjectRef(str(body["apiVersion"]), "GatewayClass", "", name)
        try:
            plural = await plural_of(client, ref.api_version, ref.kind)
        except KindNotServed:
            continue
        try:
            live = await get_json(client, f"{collection_path(_api(ref, plural))}/{name}")
        except ApiStatusError as err:
            if err.status == 404:
                continue
            raise
        out += gateway_class(component, name, controller, live if isinstance(live, dict) else {})
    return out
