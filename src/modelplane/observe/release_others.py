"""A release's objects other than its workloads: from its stored manifest to what drift judges.

The workloads (``observe.release_objects``) are read whole, for their
health. Every other object of the kinds below that the manifest installs
is followed by its metadata alone: one LIST, or one watch, per kind and
namespace (``observe.state.ReleaseCollection``), in the release's own
namespace or cluster-wide for a cluster-scoped kind, and picked out by
name here. That is enough for drift: a deleted object is absent, and a hand
edit moves a field's ownership away from Helm and the operator in
``metadata.managedFields`` (``plan.drift``).

Which objects are followed, and why these: the ones whose loss stops a
component (its Services, the ConfigMaps its pods mount, its ServiceAccounts
and RBAC, its webhook configurations, the DRA DeviceClass) and the few other
core kinds the catalog's charts install. Not followed: a namespaced object
outside the release's namespace (cert-manager's leader-election Role in
kube-system): a revision is anyone's who may write a Secret in that
namespace, and following it there would have the operator write into a
namespace the release does not own; CRDs (checked by digest, and by the
chart CRD step); custom resources; Namespaces; Jobs (never applied again).

Secrets are followed by presence only: a chart may create one empty that a
controller fills (a webhook's certificate), so one that exists is never
edited back, and one that is gone is created again from the manifest's
body, which the controller then fills again. Their data is never read.

A stored revision is anyone's who may write a Secret in the release's
namespace, and a restore applies it with the operator's own credentials;
so what may be put back is decided by ``plan.restorable.held_back``: a
grant only as a chart's own RBAC makes one, a webhook only calling the
release's namespace, a cluster-scoped object only while the live one is
Helm's for that release. Any other is reported, never restored, whatever
``--release-drift`` says.

Everything read is the target's, and hostile: at most ``MAX_OBJECTS`` per
release, names as the API server allows them, and the metadata-only
collections within ``kube.budget``'s budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelplane.observe.state import RELEASE_NAMESPACES, Listed, ReleaseCollection
from modelplane.plan.drift import fields_of
from modelplane.plan.manifest import MANIFEST_LIMITS
from modelplane.plan.release_health import ReleaseObject
from modelplane.plan.restorable import ROLES, held_back
from modelplane.plan.workloads import GROUPS, Kind
from modelplane.untrusted import as_dict, load_yaml_all
from modelplane.wire import ApiRef

# A stack's releases install a few hundred objects in all (RBAC mostly);
# past this many in one release the rest are not followed.
MAX_OBJECTS = 256
# A Kubernetes object name (a DNS subdomain, or a path segment for RBAC).
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.:]{0,251}[A-Za-z0-9])?")


@dataclass(frozen=True)
class Followed:
    api: ApiRef
    namespaced: bool


_CORE = ""
_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"
# (apiVersion, kind) -> how it is served. The versions the catalog's charts
# write; an object of another version of the kind is not followed.
FOLLOWED: Mapping[tuple[str, str], Followed] = {
    ("v1", "Service"): Followed(ApiRef(_CORE, "v1", "services"), True),
    ("v1", "ConfigMap"): Followed(ApiRef(_CORE, "v1", "configmaps"), True),
    ("v1", "Secret"): Followed(ApiRef(_CORE, "v1", "secrets"), True),
    ("v1", "ServiceAccount"): Followed(ApiRef(_CORE, "v1", "serviceaccounts"), True),
    (f"{_RBAC}/v1", "Role"): Followed(ApiRef(_RBAC, "v1", "roles"), True),
    (f"{_RBAC}/v1", "RoleBinding"): Followed(ApiRef(_RBAC, "v1", "rolebindings"), True),
    (f"{_RBAC}/v1", "ClusterRole"): Followed(ApiRef(_RBAC, "v1", "clusterroles"), False),
    (f"{_RBAC}/v1", "ClusterRoleBinding"): Followed(
        ApiRef(_RBAC, "v1", "clusterrolebindings"), False
    ),
    (f"{_ADMISSION}/v1", "ValidatingWebhookConfiguration"): Followed(
        ApiRef(_ADMISSION, "v1", "validatingwebhookconfigurations"), False
    ),
    (f"{_ADMISSION}/v1", "MutatingWebhookConfiguration"): Followed(
        ApiRef(_ADMISSION, "v1", "mutatingwebhookconfigurations"), False
    ),
    ("resource.k8s.io/v1", "DeviceClass"): Followed(
        ApiRef("resource.k8s.io", "v1", "deviceclasses"), False
    ),
    ("scheduling.k8s.io/v1", "PriorityClass"): Followed(
        ApiRef("scheduling.k8s.io", "v1", "priorityclasses"), False
    ),
    ("policy/v1", "PodDisruptionBudget"): Followed(
        ApiRef("policy", "v1", "poddisruptionbudgets"), True
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): Followed(
        ApiRef("networking.k8s.io", "v1", "networkpolicies"), True
    ),
}


@dataclass(frozen=True)
class OtherEntry:
    """One followed object of a release's stored manifest, its namespace filled in."""

    kind: str
    namespace: str  # "" when cluster-scoped
    name: str
    body: dict[str, Any]
    api: ApiRef

    @property
    def shown(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"

    @property
    def collection_key(self) -> tuple[ApiRef, str | None]:
        return (self.api, self.namespace or None)


def other_entries(manifest: str, namespace: str) -> tuple[OtherEntry, ...]:
    """The followed objects of one stored manifest (see the module's docstring).

    ``UntrustedInputError`` if the manifest is refused; the caller decoded
    it once already for its workloads, under the same limits.
    """
    out: dict[tuple[str, str, str], OtherEntry] = {}
    for doc in load_yaml_all(manifest, MANIFEST_LIMITS):
        if not isinstance(doc, dict):
            continue
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
        for obj in items if isinstance(items, list) else []:
            entry = _entry(obj, namespace) if isinstance(obj, dict) else None
            if entry is not None and len(out) < MAX_OBJECTS:
                out.setdefault((entry.kind, entry.namespace, entry.name), entry)
    return tuple(out.values())


def _entry(obj: dict[str, Any], namespace: str) -> OtherEntry | None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    followed = FOLLOWED.get((api_version, kind))
    if followed is None or _is_workload(api_version, kind):
        return None
    meta = as_dict(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name):
        return None
    where = ""
    if followed.namespaced:
        where = str(meta.get("namespace") or namespace)
        if where != namespace:
            return None  # outside the release's namespace: not followed (see above)
    body = {**obj, "metadata": {**meta, "namespace": where} if where else _cluster_meta(meta)}
    return OtherEntry(kind=kind, namespace=where, name=name, body=body, api=followed.api)


def _cluster_meta(meta: dict[str, Any]) -> dict[str, Any]:
    # A namespace on a cluster-scoped object is ignored by the API server,
    # and refused by server-side apply: dropped from what a restore applies.
    return {k: v for k, v in meta.items() if k != "namespace"}


def _is_workload(api_version: str, kind: str) -> bool:
    try:
        found = Kind(kind)
    except ValueError:
        return False
    return api_version.rpartition("/")[0] == GROUPS[found]


def collections_for(entries: list[tuple[str, str, OtherEntry]]) -> tuple[ReleaseCollection, ...]:
    """One collection per kind and namespace the entries are in, with the names followed."""
    names: dict[tuple[ApiRef, str | None], set[str]] = {}
    for _, _, e in entries:
        names.setdefault(e.collection_key, set()).add(e.name)
    return tuple(
        ReleaseCollection(api, namespace, frozenset(found))
        for (api, namespace), found in sorted(
            names.items(), key=lambda kv: (kv[0][0].key, kv[0][1] or "")
        )
    )


# Helm 3 writes a release's objects under "helm" (Update), the operator's
# restores under its own manager (Apply): see observe.release_objects.
def release_others(
    entries: list[tuple[str, str, OtherEntry]],
    listed: Listed,
    owners: dict[str, frozenset[str]],
) -> list[ReleaseObject]:
    """What the target holds of each followed object: (component, release, entry) in.

    An object whose collection was not read (a first reconcile's, one the
    target refused) is left out, never taken as deleted.
    """
    by_collection: dict[tuple[ApiRef, str | None], dict[str, dict[str, Any]]] = {}
    for c, items in listed.release_collections.items():
        by_name = by_collection.setdefault((c.api, c.namespace), {})
        for item in items:
            meta = as_dict(item.get("metadata"))
            if isinstance(meta.get("name"), str):
                by_name[meta["name"]] = meta
    roles: dict[str, set[tuple[str, str]]] = {}
    for _, release, e in entries:
        defined = roles.setdefault(release, set())
        if e.kind in ROLES:
            defined.add((e.kind, e.name))
    out: list[ReleaseObject] = []
    for component, release, e in entries:
        found = by_collection.get(e.collection_key)
        if found is None:
            continue
        namespace = RELEASE_NAMESPACES.get(release, "")
        live = found.get(e.name)
        out.append(
            ReleaseObject(
                component=component,
                release=release,
                shown=e.shown,
                desired=e.body,
                present=live is not None,
                owned=fields_of(live, owners) if live is not None else None,
                version=str(live.get("resourceVersion", ""))[:64] if live is not None else "",
                data_owned_elsewhere=e.kind == "Secret",
                held=held_back(
                    e.kind,
                    e.body,
                    defined=roles[release],
                    release=release,
                    namespace=namespace,
                    cluster_scoped=not e.namespace,
                    live_annotations=as_dict(live.get("annotations")) if live is not None else None,
                ),
            )
        )
    return out
