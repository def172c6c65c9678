"""What the CRD watch keeps of each of a target's CRDs, and the plurals it learns from them.

A real CRD is mostly its schema; the copy keeps what the served-API check,
the plurals and the product's digest read (``crd_outline``), once for
every target that has the same CRD (``kube.interned``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from modelplane.kube.discovery import PLURALS
from modelplane.kube.interned import interned
from modelplane.untrusted import as_dict, pick
from modelplane.wire import DIGEST_ANNOTATION


def crd_plurals(crds: Iterable[dict[str, Any]]) -> PLURALS:
    """(apiVersion, kind) -> plural of every version the Established CRDs serve."""
    plurals: PLURALS = {}
    for crd in crds:
        spec, status = crd.get("spec") or {}, crd.get("status") or {}
        if not established(status):
            continue
        names = spec.get("names") or {}
        kind, plural = names.get("kind"), names.get("plural")
        if not (kind and plural):
            continue
        for version in spec.get("versions") or []:
            if version.get("served") and version.get("name"):
                plurals[(f"{spec.get('group', '')}/{version['name']}", str(kind))] = str(plural)
    return plurals


def crd_outline(crd: dict[str, Any]) -> dict[str, Any]:
    """What the cache reads of a CRD: its identity, labels, digest, names, versions, conditions.

    Every CRD of the target is watched, and a real one is mostly its
    schema (Envoy Gateway's EnvoyProxy CRD alone is 1.3 MB of YAML); kept
    whole, a fleet's copies of them would be most of the operator's memory.
    What ``crd_plurals``, the served-API check and ``to_observed`` (the
    product's digest) read is kept, as the target wrote it.
    """
    meta, spec, status = (
        as_dict(crd.get("metadata")),
        as_dict(crd.get("spec")),
        as_dict(crd.get("status")),
    )
    # Its name, labels and digest, and its spec and status as outlined,
    # are those of every target of a stack at the same versions: the
    # outline is kept once for all of them (``kube.interned``). The
    # resourceVersion, the target's own, is not kept: a write is known to
    # be in the copy by the copy's (``WatchCache._holds``).
    metadata = pick(meta, ("name",))
    if isinstance(metadata.get("name"), str):
        metadata["name"] = sys.intern(metadata["name"])
    if isinstance(meta.get("labels"), dict):
        metadata["labels"] = interned(meta["labels"])
    annotations = as_dict(meta.get("annotations"))
    if DIGEST_ANNOTATION in annotations:
        metadata["annotations"] = interned({DIGEST_ANNOTATION: annotations[DIGEST_ANNOTATION]})
    outline_spec = pick(spec, ("group", "names", "scope"))
    versions = spec.get("versions")
    if isinstance(versions, list):
        outline_spec["versions"] = [
            pick(v, ("name", "served", "storage")) for v in versions if isinstance(v, dict)
        ]
    conditions = status.get("conditions")
    outline_status = (
        {"conditions": [pick(c, ("type", "status")) for c in conditions if isinstance(c, dict)]}
        if isinstance(conditions, list)
        else {}
    )
    return interned(
        {
            "metadata": interned(metadata),
            "spec": interned(outline_spec),
            "status": interned(outline_status),
        }
    )


def established(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
