"""What the watches keep of the product's own objects: what a plan reads of them.

A stack's target holds the product's own objects (its Namespace, Gateway,
GatewayClass, EnvoyProxy, ...), watched by the product's label and kept
by every target's watches. Kept whole, each carries its spec, which the
plan never reads from the copy (it compares what it applies by the digest
annotation and by what the operator's field manager owns), and the
managedFields of every controller that writes its status. ``to_observed``
reads of them: their name, namespace and labels, the digest annotation,
the operator's own managedFields entries (``plan.drift``), a Gateway's
addresses and a Gateway's or Bundle's conditions; ``observe.writes`` the
resourceVersion. That is what is kept. Every target of a stack at the
same versions is applied the same objects: the parts that do not change
from target to target are kept once for all of them (``kube.interned``).
"""

from __future__ import annotations

from typing import Any

from modelplane.kube.interned import interned
from modelplane.untrusted import as_dict, pick
from modelplane.wire import DIGEST_ANNOTATION, FIELD_MANAGER

# Of a managedFields entry, what ``plan.drift.owned_fields`` reads: not its
# time, which differs from target to target.
_ENTRY = ("manager", "operation", "subresource", "fieldsType", "fieldsV1")


def own_outline(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of one of the product's own objects."""
    meta, status = as_dict(obj.get("metadata")), as_dict(obj.get("status"))
    metadata = pick(meta, ("name", "namespace", "resourceVersion"))
    if isinstance(meta.get("labels"), dict):
        metadata["labels"] = interned(meta["labels"])
    annotations = as_dict(meta.get("annotations"))
    if DIGEST_ANNOTATION in annotations:
        metadata["annotations"] = interned({DIGEST_ANNOTATION: annotations[DIGEST_ANNOTATION]})
    entries = meta.get("managedFields")
    if isinstance(entries, list):
        metadata["managedFields"] = [
            interned(pick(e, _ENTRY))
            for e in entries
            if isinstance(e, dict) and e.get("manager") == FIELD_MANAGER
        ]
    outline: dict[str, Any] = {"metadata": metadata}
    kept = pick(status, ("addresses", "conditions"))
    if kept:
        outline["status"] = kept
    return outline
