"""What a release runs: the workloads in the manifest Helm stored for it.

The manifest is text a target holds, so it is read within ``untrusted``'s
bounds, and a workload's name and namespace must be ones an API server
would accept before they go near a status or a lookup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from modelplane.plan.frozen import Frozen
from modelplane.plan.workloads import Kind, WorkloadKey, as_count, as_map, workload_kind
from modelplane.untrusted import Limits, UntrustedInputError, load_yaml_all

# The bounds on a release's stored manifest, everywhere it is read. Helm
# keeps a release in one Secret of at most 1 MiB, its JSON gzipped and
# base64'd: a manifest it could store is at most about 8 MiB at the ratios
# of real charts' renders (7.5 to 11 times). A chart's CRDs may be templates,
# so in its manifest: ai-gateway-crds-helm v1.1.0 renders 1.8 MB of them,
# cert-manager v1.20.2 1.0 MB, against the 1 MiB of ``untrusted.DEFAULT``
# that refused the first. Nested as deeply as any CRD's schema.
MANIFEST_LIMITS = Limits(max_bytes=16 * 1024 * 1024, max_depth=256, max_nodes=2_000_000)


class ManifestWorkload(Frozen):
    key: WorkloadKey
    # spec.replicas as the release's manifest gives it; None when unset
    # (the chart leaves it to an autoscaler, or the kind has none).
    replicas: int | None = None


# RFC 1123: a namespace is a label, a workload's name a subdomain.
# Matched whole (``fullmatch``: ``$`` would let a trailing newline through).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def manifest_workloads(
    manifest: str | bytes, namespace: str, limits: Limits = MANIFEST_LIMITS
) -> list[ManifestWorkload]:
    """The workloads a release's stored manifest installs, in manifest order.

    ``manifest`` is the text Helm keeps in the release (multi-document YAML);
    ``namespace`` the release's, which an object without one lands in. Helm
    keeps hooks out of that text (``releaseutil.SortManifests`` splits them
    into the release's ``hooks`` before the manifest is joined, in
    pkg/action/action.go ``renderResources``), so no hook annotation is read
    here: whatever is in the manifest Helm applied as a resource of the
    release, even if a post-renderer annotated it as a hook. A ``List``
    document's items count, as Helm's builder flattens them.

    Raises ``UntrustedInputError`` for text over the bounds, not YAML, or a
    workload whose name or namespace no API server would accept, naming the
    document.
    """
    out: list[ManifestWorkload] = []
    seen: set[WorkloadKey] = set()
    for number, doc in enumerate(load_yaml_all(manifest, limits), start=1):
        item = as_map(doc)
        kind = item.get("kind")
        items = (
            _map_items(item.get("items"))
            if isinstance(kind, str) and kind.endswith("List")
            else [item]
        )
        for obj in items:
            found = _manifest_workload(obj, namespace, number)
            if found is not None and found.key not in seen:
                seen.add(found.key)
                out.append(found)
    return out


def _map_items(value: object) -> list[Mapping[str, Any]]:
    return [i for i in value if isinstance(i, Mapping)] if isinstance(value, list) else []


def _manifest_workload(
    obj: Mapping[str, Any], namespace: str, number: int
) -> ManifestWorkload | None:
    kind = workload_kind(obj)
    if kind is None:
        return None
    meta = as_map(obj.get("metadata"))
    name = meta.get("name")
    where = meta.get("namespace") or namespace
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise UntrustedInputError(f"document {number}: {kind} has no valid metadata.name")
    if not isinstance(where, str) or not _LABEL.fullmatch(where):
        raise UntrustedInputError(f"document {number}: {kind} {name} has no valid namespace")
    replicas = (
        as_count(as_map(obj.get("spec")).get("replicas"))
        if kind in (Kind.DEPLOYMENT, Kind.STATEFUL_SET)
        else None
    )
    return ManifestWorkload(
        key=WorkloadKey(kind=kind, namespace=where, name=name), replicas=replicas
    )
