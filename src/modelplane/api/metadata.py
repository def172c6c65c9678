"""A ServingStack's metadata, as the API server validates it for a custom resource.

apimachinery's ValidateObjectMetaAccessor (pkg/api/validation/objectmeta.go,
v0.34), which the apiextensions server runs on every custom resource with
NameIsDNSSubdomain for its name: labels by ValidateLabels (a key is a
qualified name, a value IsValidLabelValue), annotation keys by
IsQualifiedName of the key lowercased, and the annotations' keys and values
at most TotalAnnotationSizeLimitB (256 KiB) in all; finalizers qualified
names, not both orphan and foregroundDeletion. IsQualifiedName
(pkg/util/validation/validation.go): an optional DNS-1123 subdomain prefix
(at most 253) and '/', then a name of at most 63 matching
[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from modelplane.api.base import ApiModel
from modelplane.api.grammar import DNS_SUBDOMAIN, DnsLabel, DnsSubdomain
from modelplane.untrusted import printable

_QUALIFIED_NAME = re.compile("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_FIELD_LIMIT = 80  # of a key shown in a message


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name (a label key), or None if it is one."""
    parts = value.split("/")
    if len(parts) > 2:
        return "has more than one '/'"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "has an empty prefix before '/'"
        if len(prefix) > 253 or not DNS_SUBDOMAIN.matches(prefix):
            return "has a prefix that is not a lowercase DNS-1123 subdomain of at most 253"
    name = parts[-1]
    if not name:
        return "has an empty name"
    if len(name) > 63:
        return "has a name longer than 63 characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "has a name that is not letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit"
        )
    return None


def _shown(key: str) -> str:
    return repr(printable(key, _FIELD_LIMIT))


# The rest of ObjectMeta (metav1, v1.34), mostly set by the API server, with
# the JSON type each decodes from: kept as extras (``model_extra``, where
# readers of the uid look), any other field refused as the API server's
# strict field validation does.
_META_EXTRAS: dict[str, type] = {
    "generateName": str,
    "uid": str,
    "resourceVersion": str,
    "creationTimestamp": str,
    "deletionTimestamp": str,
    "deletionGracePeriodSeconds": int,
    "selfLink": str,
    "ownerReferences": list,
    "managedFields": list,
}


# metav1.OwnerReference's fields and their JSON types, and the one kind
# that may own nothing (BannedOwners, objectmeta.go: core v1 Event).
_OWNER_FIELDS: dict[str, type] = {
    "apiVersion": str,
    "kind": str,
    "name": str,
    "uid": str,
    "controller": bool,
    "blockOwnerDeletion": bool,
}
_BANNED_OWNERS = frozenset({("", "v1", "Event")})


def owner_references_problem(references: list[Any]) -> str | None:
    """Why the API server refuses ``ownerReferences``, or None if it takes them.

    ValidateOwnerReferences (objectmeta.go): a version, a kind, a name and
    a uid in each, no banned owner, and at most one controller; the strict
    decoder refuses any other field, and a value of another JSON type.
    """
    controller = None
    for index, reference in enumerate(references):
        where = f"ownerReferences[{index}]"
        if not isinstance(reference, dict):
            return f"{where} must be an object"
        for key, value in reference.items():
            expected = _OWNER_FIELDS.get(key)
            if expected is None:
                return f"{where}: unknown field {_shown(key)}"
            if value is not None and not isinstance(value, expected):
                return f"{where}.{key} must be a {'boolean' if expected is bool else 'string'}"
        # schema.FromAPIVersionAndKind: "group/version", or "version" alone.
        parts = str(reference.get("apiVersion") or "").split("/")
        group, version = ("", parts[0]) if len(parts) == 1 else (parts[0], parts[1])
        if len(parts) > 2:
            group, version = "", ""
        kind = str(reference.get("kind") or "")
        required = (
            ("apiVersion", "version", version),
            ("kind", "kind", kind),
            ("name", "name", reference.get("name")),
            ("uid", "uid", reference.get("uid")),
        )
        for key, said, value in required:
            if not value:
                return f"{where}.{key}: {said} must not be empty"
        if (group, version, kind) in _BANNED_OWNERS:
            return f"{where}: a {kind} of {version} is disallowed from being an owner"
        if reference.get("controller") is True:
            this = f"{printable(kind, _FIELD_LIMIT)}/{printable(reference['name'], _FIELD_LIMIT)}"
            if controller is not None:
                return (
                    f"only one reference can have controller set to true: found it in "
                    f"{controller} and {this}"
                )
            controller = this
    return None


class ObjectMeta(ApiModel):
    """A ServingStack's metadata: what a manifest may hold, and what the hub adds."""

    model_config = ConfigDict(extra="allow")

    # render works on one named object, so a name is required even where
    # the API server would make one from generateName.
    name: DnsSubdomain = Field(min_length=1, max_length=253)
    namespace: DnsLabel = Field(default="default", min_length=1, max_length=63)
    labels: dict[str, StrictStr] = Field(default_factory=dict)
    annotations: dict[str, StrictStr] = Field(default_factory=dict)
    finalizers: list[StrictStr] = Field(default_factory=list)
    generation: StrictInt | None = None

    @model_validator(mode="after")
    def _known_fields_only(self) -> ObjectMeta:
        for key, value in (self.model_extra or {}).items():
            expected = _META_EXTRAS.get(key)
            if expected is None:
                raise ValueError(f"unknown field {_shown(key)}")
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"{key} must be a {expected.__name__}")
        problem = owner_references_problem((self.model_extra or {}).get("ownerReferences") or [])
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            problem = qualified_name_problem(key)
            if problem:
                raise ValueError(f"label key {_shown(key)} {problem}")
            if len(value) > 63 or (value and not _QUALIFIED_NAME.fullmatch(value)):
                raise ValueError(
                    f"label {_shown(key)}: the value must be empty or at most 63 letters, "
                    "digits, '-', '_' and '.', starting and ending with a letter or digit"
                )
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str]) -> dict[str, str]:
        for key in annotations:
            problem = qualified_name_problem(key.lower())
            if problem:
                raise ValueError(f"annotation key {_shown(key)} {problem}")
        # Go's len(): bytes of UTF-8.
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > TOTAL_ANNOTATION_SIZE_LIMIT:
            raise ValueError(
                f"annotations are {size} bytes in all, over the API server's limit of "
                f"{TOTAL_ANNOTATION_SIZE_LIMIT} (256 KiB)"
            )
        return annotations

    @field_validator("finalizers")
    @classmethod
    def _finalizers(cls, finalizers: list[str]) -> list[str]:
        for finalizer in finalizers:
            problem = qualified_name_problem(finalizer)
            if problem:
                raise ValueError(f"finalizer {_shown(finalizer)} {problem}")
        if "orphan" in finalizers and "foregroundDeletion" in finalizers:
            raise ValueError("finalizers orphan and foregroundDeletion cannot both be set")
        return finalizers
