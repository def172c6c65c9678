"""Drift: the fields of an applied object that the operator no longer owns.

The operator writes every object with server-side apply under one field
manager (``modelplane.wire.FIELD_MANAGER``), so the API server records, in
``metadata.managedFields``, exactly which fields that manager owns. A hand
edit (``kubectl edit``, ``patch``, ``replace``: Update operations under
another manager) that changes one of those fields moves its ownership to the
editor, and one that deletes it removes it from every manager's set (see
https://kubernetes.io/docs/reference/using-api/server-side-apply/, "Field
management" and "Conflicts"). So "the fields the desired body sets that our
manager does not own" is exactly what a hand edit changed, and exactly what
a forced re-apply takes back.

Comparing owned field *sets* rather than live *values* is deliberate: values
come back defaulted (a listener's ``allowedRoutes``, a port's ``protocol``)
and normalised (quantities), so a value comparison needs a rule per field to
stay quiet on a no-op resync; ownership records neither, and a field another
manager merely added (a listener of its own) is not ours to take away.

``fieldsV1`` (same page, "Field management"): ``f:<name>`` is a field of a
struct or map, ``k:<json>`` an item of a list keyed by the JSON's fields
(``x-kubernetes-list-type: map``), ``v:<json>`` an item of a set, ``.`` the
node itself; a node that is ``{}`` is owned as a whole (a leaf, or an atomic
list or map).
"""

from __future__ import annotations

import json
from typing import Any

from modelplane.untrusted import Limits, UntrustedInputError, check_depth, load_json

# Identity, not content: fieldsV1 never lists them.
_IDENTITY = {"apiVersion", "kind"}
_METADATA_IDENTITY = {"name", "namespace"}
# managedFields are the target's text. A list key names an item by a few
# short fields (a name, a port and protocol, a mount path): small and flat.
_KEY_LIMITS = Limits(max_bytes=16 * 1024, max_depth=4)
# The nesting of fieldsV1 follows the object's own, which stays far below.
MAX_FIELDS_DEPTH = 64


def owned_fields(
    metadata: dict[str, Any], manager: str, operations: frozenset[str] = frozenset({"Apply"})
) -> dict[str, Any] | None:
    """``manager``'s applied fields (fieldsV1) on a live object; ``{}`` if it owns none.

    Only its entries of ``operations`` (Apply) count, on the main resource: a status written
    under the same name is not configuration. None when an entry is nested
    deeper than ``MAX_FIELDS_DEPTH``: what the manager owns is then not
    observed, and the digest alone decides (see ``Observed.owned``).
    """
    owned: dict[str, Any] = {}
    entries = metadata.get("managedFields")
    # The target's text: anything but a list of objects holds no entry.
    for entry in entries if isinstance(entries, list) else []:
        if (
            isinstance(entry, dict)
            and entry.get("manager") == manager
            and entry.get("operation") in operations
            and not entry.get("subresource")
            and entry.get("fieldsType", "FieldsV1") == "FieldsV1"
        ):
            fields = entry.get("fieldsV1") or {}
            if not isinstance(fields, dict):
                return None
            try:
                # Bounded here, so the union and the walks below recurse
                # at most this deep.
                check_depth(fields, MAX_FIELDS_DEPTH)
            except UntrustedInputError:
                return None
            owned = _union(owned, fields)
    return owned


def fields_of(metadata: dict[str, Any], owners: dict[str, frozenset[str]]) -> dict[str, Any] | None:
    """The union of what each manager owns by the given operations (see ``owned_fields``).

    A release's objects are Helm's (Update operations: Helm 3 patches) until
    the operator restores one (Apply); either way they are the release's.
    """
    out: dict[str, Any] = {}
    for manager, operations in sorted(owners.items()):
        owned = owned_fields(metadata, manager, operations)
        if owned is None:
            return None
        out = _union(out, owned)
    return out


def drifted_fields(desired: dict[str, Any], owned: dict[str, Any]) -> list[str]:
    """The paths of the fields ``desired`` sets that ``owned`` (fieldsV1) lacks.

    Paths read ``spec.listeners[name=http].port``; an empty list means the
    live object still carries everything the operator applied.
    """
    out: list[str] = []
    for name, value in desired.items():
        if name in _IDENTITY or value is None:
            continue
        if name == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _METADATA_IDENTITY}
            if not value:
                continue
        _walk(value, owned.get(f"f:{name}"), name, out)
    return out


def _walk(desired: Any, owned: Any, path: str, out: list[str]) -> None:
    if owned is None:
        out += _missing(desired, path)
        return
    if not owned or not isinstance(owned, dict):
        return  # owned as a whole: nothing below it is anyone else's
    if isinstance(desired, dict):
        for name, value in desired.items():
            if value is not None:
                _walk(value, owned.get(f"f:{name}"), f"{path}.{name}", out)
    elif isinstance(desired, list):
        for item in desired:
            key, node = _item(item, owned)
            _walk(item, node, f"{path}[{key}]", out)
    # A scalar whose node exists is owned.


def _missing(desired: Any, path: str) -> list[str]:
    """How a field lost as a whole is named: by the fields it holds, down to list items.

    ``spec.provider.kubernetes`` is shown as
    ``spec.provider.kubernetes.envoyService.externalTrafficPolicy``, a lost
    list of named items as one path per item.
    """
    if isinstance(desired, dict) and desired:
        out: list[str] = []
        for name, value in desired.items():
            if value is not None:
                out += _missing(value, f"{path}.{name}")
        return out
    if (
        isinstance(desired, list)
        and desired
        and all(isinstance(i, dict) and "name" in i for i in desired)
    ):
        return [f"{path}[name={i['name']}]" for i in desired]
    return [path]


def _item(item: Any, owned: dict[str, Any]) -> tuple[str, Any]:
    """How a list item is named in a path, and its node in ``owned`` (None if absent)."""
    keyed = [(k, fields) for k in owned if isinstance(fields := _key_fields(k), dict)]
    if isinstance(item, dict) and keyed:
        names = sorted({name for _, fields in keyed for name in fields})
        for node_key, fields in keyed:
            # A key field missing from the desired item was defaulted by the
            # server (a port's protocol): it cannot tell two of ours apart.
            shared = [n for n in fields if n in item]
            if shared and all(item[n] == fields[n] for n in shared):
                return _shown_key(fields, item), owned[node_key]
        return _shown_key({n: item[n] for n in names if n in item}, item), None
    if isinstance(item, dict):
        # No keyed item of ours is left to learn the key from.
        return _shown_key({k: v for k, v in item.items() if k == "name"}, item), None
    value = f"v:{json.dumps(item, separators=(',', ':'))}"
    return json.dumps(item), owned.get(value)


def _key_fields(node_key: str) -> Any:
    """The fields of a ``k:{...}`` node key; None for any other node (or a garbled one)."""
    if not node_key.startswith("k:"):
        return None
    try:
        return load_json(node_key[2:], _KEY_LIMITS)
    except UntrustedInputError:
        return None


def _shown_key(fields: dict[str, Any], item: dict[str, Any]) -> str:
    shown = {k: item.get(k, v) for k, v in fields.items()}
    return ",".join(f"{k}={v}" for k, v in sorted(shown.items())) or "?"


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = _union(out[key], value) if key in out else value
    return out
