"""The workloads each Managed release runs: from its stored manifest to what the plan judges.

Which objects a release installed is read from the one revision
``observe.state`` already took for it (``observe.releases``), decoded once
per revision and kept; its Deployments, DaemonSets, StatefulSets and Jobs
are then read by name (``ReleaseWatch``: a LIST, or a watch, with a field
selector) with their pods (the workload's own ``matchLabels``), and the
Nodes when one of them is a DaemonSet. Everything read is the target's, and
hostile: bounded in number here, and reduced to what the rules read by
``plan.workloads``' ``from_object``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelplane.catalog.components import COMPONENTS
from modelplane.observe.release_others import OtherEntry, other_entries
from modelplane.observe.releases import ReleaseReadError, deployed_release, release_secret
from modelplane.observe.state import Listed, ReleaseWatch
from modelplane.plan.drift import fields_of
from modelplane.plan.manifest import MANIFEST_LIMITS, ManifestWorkload, manifest_workloads
from modelplane.plan.observed import ObservedRelease
from modelplane.plan.release_health import (
    NodeFacts,
    RefusedRevision,
    ReleaseWorkload,
    Taint,
    UnjudgedRelease,
    outside_namespace,
)
from modelplane.plan.selector import is_label_key, is_label_value
from modelplane.plan.workloads import GROUPS, Kind, PodSignal, WorkloadKey, WorkloadStatus
from modelplane.untrusted import UntrustedInputError, as_dict, load_yaml_all, printable
from modelplane.wire import FIELD_MANAGER, ApiRef

log = logging.getLogger("modelplane.operator")

# Helm 3 writes a release's objects with Update operations under the name of
# its binary ("helm"; pkg/kube/client.go, getManagedFieldsManager); the
# operator restores one with a patch (Update) under its own manager
# (``actions.restore``), and did with server-side apply (Apply) before.
HELM_MANAGER = "helm"
RELEASE_OWNERS = {
    HELM_MANAGER: frozenset({"Update", "Apply"}),
    FIELD_MANAGER: frozenset({"Update", "Apply"}),
}
# A stack's releases run a few dozen workloads; past this many the rest are
# not followed (a manifest that lists thousands is not one the catalog ships).
MAX_WORKLOADS = 64
# Pods read per workload (a few replicas, or one per node of a DaemonSet).
MAX_PODS = 256
MAX_NODES = 5000
MAX_LABELS = 64
# Why a stored manifest was refused, in a component's message (4096 in all).
MAX_REFUSED = 512
_API: Mapping[Kind, ApiRef] = {
    kind: ApiRef(GROUPS[kind], "v1", resource)
    for kind, resource in (
        (Kind.DEPLOYMENT, "deployments"),
        (Kind.DAEMON_SET, "daemonsets"),
        (Kind.STATEFUL_SET, "statefulsets"),
        (Kind.JOB, "jobs"),
    )
}
_COMPONENT_OF = {c.release_name: c.name for c in COMPONENTS if c.chart is not None}


@dataclass(frozen=True)
class ManifestEntry:
    workload: ManifestWorkload
    body: dict[str, Any]
    watch: ReleaseWatch
    autoscaled: bool = False


@dataclass(frozen=True)
class ReleaseManifest:
    component: str
    release: str
    entries: tuple[ManifestEntry, ...]
    unreadable: str = ""  # why the stored manifest was refused (then no entries)
    # Its other followed objects (observe.release_others).
    others: tuple[OtherEntry, ...] = ()
    # Set when the revision reaches outside its namespace: ``entries`` is
    # then empty, and nothing of it is read or restored.
    refused: RefusedRevision | None = None


def pod_selector(body: Mapping[str, Any]) -> str | None:
    """The workload's ``matchLabels`` as a label selector; None when it has none usable."""
    spec = body.get("spec")
    selector = spec.get("selector") if isinstance(spec, Mapping) else None
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    if not isinstance(labels, Mapping) or not labels or len(labels) > MAX_LABELS:
        return None
    parts = []
    for key, value in sorted(labels.items()):
        # A key or value the API server would not allow could not select a
        # pod, and is not put in a selector.
        if not (
            isinstance(key, str)
            and isinstance(value, str)
            and is_label_key(key)
            and is_label_value(value)
        ):
            return None
        parts.append(f"{key}={value}")
    return ",".join(parts)


def manifest_entries(manifest: str, namespace: str) -> tuple[ManifestEntry, ...]:
    """The workloads of one stored manifest, with their bodies; ``UntrustedInputError`` if bad.

    A workload a HorizontalPodAutoscaler of the same manifest scales is
    marked: its replicas are the autoscaler's, not the manifest's.
    """
    wanted = {w.key: w for w in manifest_workloads(manifest, namespace)}
    objects: list[dict[str, Any]] = []
    for doc in load_yaml_all(manifest, MANIFEST_LIMITS):
        if not isinstance(doc, dict):
            continue
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
        objects += [o for o in (items if isinstance(items, list) else []) if isinstance(o, dict)]
    scaled = {_scale_target(o, namespace) for o in objects} - {None}
    out: list[ManifestEntry] = []
    for obj in objects:
        meta = as_dict(obj.get("metadata"))
        try:
            kind = Kind(str(obj.get("kind")))
        except ValueError:
            continue
        if str(obj.get("apiVersion", "")).rpartition("/")[0] != GROUPS[kind]:
            continue  # another group's kind of that name: not a workload
        key = WorkloadKey(
            kind=kind, namespace=str(meta.get("namespace") or namespace), name=str(meta.get("name"))
        )
        found = wanted.pop(key, None)
        if found is None:
            continue
        body = {**obj, "metadata": {**meta, "namespace": key.namespace}}
        watch = ReleaseWatch(_API[kind], key.namespace, key.name, pod_selector(body))
        out.append(ManifestEntry(found, body, watch, autoscaled=key in scaled))
    return tuple(out)


def _scale_target(obj: dict[str, Any], namespace: str) -> WorkloadKey | None:
    """The workload a HorizontalPodAutoscaler scales (in its own namespace), or None."""
    if obj.get("kind") != "HorizontalPodAutoscaler":
        return None
    meta, spec = as_dict(obj.get("metadata")), as_dict(obj.get("spec"))
    target = as_dict(spec.get("scaleTargetRef"))
    try:
        kind = Kind(str(target.get("kind")))
    except ValueError:
        return None
    name = target.get("name")
    if not isinstance(name, str):
        return None
    return WorkloadKey(kind=kind, namespace=str(meta.get("namespace") or namespace), name=name)


class ReleaseManifests:
    """Each release's workloads from its stored revision, decoded once per revision."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int, str], ReleaseManifest | None] = {}

    def read(
        self, listed: Listed, releases: Mapping[str, ObservedRelease]
    ) -> list[ReleaseManifest]:
        kept: dict[tuple[str, int, str], ReleaseManifest | None] = {}
        out: list[ReleaseManifest] = []
        for name, release in sorted(releases.items()):
            component = _COMPONENT_OF.get(name)
            secret = release_secret(listed, release) if component is not None else None
            if component is None or secret is None:
                continue
            version = str((secret.get("metadata") or {}).get("resourceVersion") or "")
            key = (name, release.revision, version)
            found = self._kept[key] if key in self._kept else _decode(component, secret, release)
            kept[key] = found
            if found is not None:
                out.append(found)
        self._kept = kept
        return out


def _decode(
    component: str, secret: dict[str, Any], release: ObservedRelease
) -> ReleaseManifest | None:
    try:
        deployed = deployed_release(secret, release)
        entries = manifest_entries(deployed.manifest, release.namespace)
    except (ReleaseReadError, UntrustedInputError) as err:
        # Its workloads are not judged: logged once per revision, and said
        # in the component's status for as long as the revision stands.
        log.warning("release %s revision %d: %s", release.name, release.revision, err)
        why = printable(
            f"release {release.name} revision {release.revision}: its stored manifest is "
            f"refused, so its workloads are not judged: {err}",
            MAX_REFUSED,
        )
        return ReleaseManifest(component, release.name, (), unreadable=why)
    # Checked before anything of it is followed: a body outside the
    # release's namespace would be watched, then applied there by a restore.
    outside = outside_namespace([e.workload.key for e in entries], release.namespace)
    if outside:
        refused = RefusedRevision(
            component=component,
            release=release.name,
            revision=release.revision,
            namespace=release.namespace,
            outside=outside,
        )
        log.warning("%s", refused.message)
        return ReleaseManifest(component, release.name, (), refused=refused)
    # Parsed a second time, under the same limits: kept apart from the
    # workloads', whose bodies and rules differ.
    others = other_entries(deployed.manifest, release.namespace)
    return ReleaseManifest(component, release.name, entries[:MAX_WORKLOADS], others=others)


def unjudged_releases(manifests: list[ReleaseManifest]) -> list[UnjudgedRelease]:
    """The releases whose stored manifest was refused, and why."""
    return [
        UnjudgedRelease(component=m.component, release=m.release, message=m.unreadable)
        for m in manifests
        if m.unreadable
    ]


def refused_revisions(manifests: list[ReleaseManifest]) -> list[RefusedRevision]:
    return [m.refused for m in manifests if m.refused is not None]


def watches_for(manifests: list[ReleaseManifest]) -> tuple[ReleaseWatch, ...]:
    found = {e.watch for m in manifests for e in m.entries}
    return tuple(sorted(found, key=lambda w: (w.api.key, w.namespace, w.name)))[:MAX_WORKLOADS]


def other_objects(manifests: list[ReleaseManifest]) -> list[tuple[str, str, OtherEntry]]:
    """(component, release, entry) of every followed object of the manifests."""
    return [(m.component, m.release, e) for m in manifests for e in m.others]


def release_workloads(manifests: list[ReleaseManifest], listed: Listed) -> list[ReleaseWorkload]:
    """What the target holds of each manifest workload.

    One not read yet (no LIST or watch of it so far) is left out, never taken as missing.
    """
    out: list[ReleaseWorkload] = []
    for m in manifests:
        for e in m.entries:
            objects = listed.release_objects.get(e.watch)
            if objects is None:
                continue
            live = next(
                (o for o in objects if as_dict(o.get("metadata")).get("name") == e.watch.name),
                None,
            )
            status, owned, version = None, None, ""
            if live is not None:
                version = str(as_dict(live.get("metadata")).get("resourceVersion", ""))[:64]
                # List items carry no apiVersion or kind of their own.
                typed = {**live, "apiVersion": e.body["apiVersion"], "kind": e.body["kind"]}
                status = WorkloadStatus.from_object(typed)
                owned = fields_of(as_dict(live.get("metadata")), RELEASE_OWNERS)
            pods = [
                PodSignal.from_object(p) for p in listed.release_pods.get(e.watch, [])[:MAX_PODS]
            ]
            out.append(
                ReleaseWorkload(
                    component=m.component,
                    release=m.release,
                    manifest=e.workload,
                    desired=e.body,
                    live=status,
                    pods=[p for p in pods if p is not None],
                    owned=owned,
                    autoscaled=e.autoscaled,
                    version=version,
                )
            )
    return out


def node_facts(nodes: list[dict[str, Any]] | None) -> list[NodeFacts] | None:
    if nodes is None:
        return None
    out = []
    for node in nodes[:MAX_NODES]:
        meta, spec = as_dict(node.get("metadata")), as_dict(node.get("spec"))
        labels = as_dict(meta.get("labels"))
        found = spec.get("taints")
        taints = found if isinstance(found, list) else []
        out.append(
            NodeFacts(
                name=printable(str(meta.get("name", "")), 253),
                labels={
                    k: v
                    for k, v in list(labels.items())[: MAX_LABELS * 4]
                    if isinstance(k, str) and isinstance(v, str)
                },
                taints=[
                    Taint(
                        key=str(t.get("key", ""))[:317],
                        value=str(t.get("value", ""))[:63],
                        effect=str(t.get("effect", ""))[:32],
                    )
                    for t in taints[:64]
                    if isinstance(t, dict)
                ],
            )
        )
    return out
