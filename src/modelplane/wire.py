"""The product's conventions on the wire, written once.

How objects on a target are marked as ours (label, digest annotation, field
manager), how a resource and an object are keyed, and whether discovery says
a resource is served. A leaf: the catalog, the plan, target access and the
operator all import it, and it imports none of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "modelplane"
# The digest of the source an object was applied from: equal digests are a
# no-op, whatever the live object looks like.
DIGEST_ANNOTATION = "modelplane.ai/digest"
# Helm stores --labels on its release Secrets; the digest there says whether
# chart, version and values changed since the last install or upgrade.
RELEASE_DIGEST_LABEL = "modelplane.ai/digest"
# The one server-side apply field manager the product writes with.
FIELD_MANAGER = "modelplane"


@dataclass(frozen=True, order=True)
class ApiRef:
    """One resource of one API group-version, as discovery lists it."""

    group: str
    version: str
    resource: str

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def served_in(self, apis: Mapping[str, Mapping[str, Sequence[str]]]) -> bool:
        """Whether discovery's ``group -> plural -> versions`` serves this version."""
        return self.version in apis.get(self.group, {}).get(self.resource, [])

    @property
    def key(self) -> str:
        """``group/version/resource``: how facts about a resource are keyed."""
        return f"{self.group}/{self.version}/{self.resource}"

    def __str__(self) -> str:
        return (
            f"{self.resource}.{self.group}/{self.version}"
            if self.group
            else (f"{self.resource}/{self.version}")
        )


def object_key(body: dict[str, Any]) -> str:
    """``apiVersion/kind/namespace/name`` (no namespace segment when cluster-scoped)."""
    meta = body["metadata"]
    namespace = meta.get("namespace", "")
    return f"{body['apiVersion']}/{body['kind']}/{namespace}/{meta['name']}".replace("//", "/")


def digest(data: Any) -> str:
    """A short, stable digest of JSON-able data."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def stamp(body: dict[str, Any], source_digest: str | None = None) -> dict[str, Any]:
    """The object as applied: labelled as ours and carrying its source's digest.

    Without ``source_digest`` the object is its own source and the digest is
    of the labelled object. Status and creationTimestamp are dropped: they are
    not ours to set, and keeping them would make every apply a change.
    """
    meta = {k: v for k, v in body["metadata"].items() if k != "creationTimestamp"}
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY}
    stamped = {**{k: v for k, v in body.items() if k != "status"}, "metadata": meta}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        DIGEST_ANNOTATION: source_digest or digest(stamped),
    }
    return stamped


def for_go(data: Any) -> str:
    """``data`` as text helm and client-go read back exactly: JSON.

    They read YAML as sigs.k8s.io/yaml does (go-yaml v2, YAML 1.1 rules),
    where a plain ``y`` or ``off`` is a bool and ``1e3`` or ``0o17`` a
    number; PyYAML's dumper writes those strings unquoted, so a value, a
    password or a kubeconfig field would reach helm changed. JSON is YAML
    whose every string is quoted.
    """
    return json.dumps(data, ensure_ascii=False)
