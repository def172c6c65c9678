"""The hub's CustomResourceDefinition, generated from the pydantic models.

The schema is never written by hand: pydantic's JSON schema is turned into a
structural OpenAPI v3 schema (references inlined, optional fields as plain
properties, nested objects defaulted to ``{}`` so the API server applies their
field defaults), and the cross-field rules become CEL with the same messages
the models raise.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from modelplane.api import status_limits
from modelplane.api.grammar import PRIVATE_KEY_MARK
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAME
from modelplane.api.spec import (
    CLIENT_CA_NAMES_RULE,
    IDENTITY_RULE,
    KUBECONFIG_RULE,
    LISTENER_NAMES_RULE,
    LISTENER_PORTS_RULE,
    NAMESPACE_RULE,
    ServingStackSpec,
    private_key_message,
)
from modelplane.api.status import ServingStackStatus

Schema = dict[str, Any]

_DROP = {"title", "discriminator"}


def _inline(schema: Schema, defs: dict[str, Schema]) -> Schema:
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].split("/")[-1]])
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**target, **rest}, defs)
    if "anyOf" in schema:
        # Optional[X] is X that may be left out; null is never sent.
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express union in a structural schema: {schema}")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        if schema.get("default") is not None:
            rest["default"] = schema["default"]
        return _inline({**options[0], **rest}, defs)
    out: Schema = {}
    for key, value in schema.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _inline(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = _inline(value, defs)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.pop("additionalProperties", None)
    return out


def _default_nested_objects(schema: Schema, model: type[BaseModel]) -> None:
    """Give object fields whose every sub-field has a default a default of {}."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            prop = schema["properties"][alias]
            _default_nested_objects(prop, annotation)
            if field.default_factory is not None and all(
                not f.is_required() for f in annotation.model_fields.values()
            ):
                prop["default"] = {}


def schema_of(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _inline(raw, raw.get("$defs", {}))
    _default_nested_objects(schema, model)
    return schema


def _unique_names(field: str, message: str) -> dict[str, str]:
    # Rules on an optional list run only when the list is there.
    return {
        "rule": f"!has(self.{field}) || "
        f"self.{field}.all(x, self.{field}.exists_one(y, y.name == x.name))",
        "message": message,
        "fieldPath": f".{field}",
    }


def spec_schema() -> Schema:
    schema = schema_of(ServingStackSpec)
    schema["x-kubernetes-validations"] = [
        {
            "rule": "self.secrets.filter(s, s.type == 'Kubeconfig').size() == 1",
            "message": KUBECONFIG_RULE,
            "fieldPath": ".secrets",
        },
        {
            "rule": "self.secrets.filter(s, s.type != 'Kubeconfig').size() <= 1",
            "message": IDENTITY_RULE,
            "fieldPath": ".secrets",
        },
    ]
    secret_item = schema["properties"]["secrets"]["items"]
    # "namespace" is a CEL keyword, hence the escaped name.
    secret_item["x-kubernetes-validations"] = [
        {
            "rule": "self.type != 'Kubeconfig' || !has(self.__namespace__)",
            "message": NAMESPACE_RULE,
        }
    ]
    gateway = schema["properties"]["gateway"]
    gateway["x-kubernetes-validations"] = [
        _unique_names("listeners", LISTENER_NAMES_RULE),
        {
            "rule": "!has(self.listeners) || "
            "self.listeners.all(x, self.listeners.exists_one(y, y.port == x.port))",
            "message": LISTENER_PORTS_RULE,
            "fieldPath": ".listeners",
        },
        _unique_names("clientCAs", CLIENT_CA_NAMES_RULE),
    ]
    # The certificate's pattern refuses a key already; this rule says so,
    # naming the entry as the models do (messageExpression, GA in 1.29).
    mark = PRIVATE_KEY_MARK
    head, tail = private_key_message("\0").split("\0")
    gateway["properties"]["clientCAs"]["items"]["x-kubernetes-validations"] = [
        {
            "rule": f"!self.certificate.contains('{mark}')",
            "messageExpression": f"'{head}' + self.name + '{tail}'",
            "fieldPath": ".certificate",
        }
    ]
    return schema


def status_schema() -> Schema:
    """The status schema, every string and list bounded by ``api.status_limits``."""
    schema = schema_of(ServingStackStatus)
    _bound(schema, "")
    return schema


def _bound(node: Schema, path: str) -> None:
    """Put the table's limit on every string and list under ``node`` (at ``path``)."""
    kind = node.get("type")
    if kind == "string":
        node["maxLength"] = status_limits.string_limit(path)
        node.update(status_limits.CONSTRAINTS.get(path, {}))
    elif kind == "array":
        node["maxItems"] = status_limits.list_limit(path)
        _bound(node["items"], f"{path}[]")
    for name, prop in node.get("properties", {}).items():
        _bound(prop, f"{path}.{name}" if path else name)


def servingstack_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of ServingStack for the hub."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": [SHORT_NAME],
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Stack", "type": "string", "jsonPath": ".spec.stack"},
                        {"name": "Components", "type": "string", "jsonPath": ".spec.components"},
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        # Which stacks are behind their desired versions, and
                        # where each stands in the rollout (plan.rollout).
                        {
                            "name": "Up-To-Date",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="UpToDate")].status',
                        },
                        {
                            "name": "Rollout",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="UpToDate")].reason',
                        },
                        # The GPUs the target publishes: a fleet's capacity in
                        # `kubectl get ss -A`; empty until the target was read.
                        {"name": "GPUs", "type": "integer", "jsonPath": ".status.target.gpus"},
                        {
                            "name": "Address",
                            "type": "string",
                            "jsonPath": ".status.gateway.address",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "description": "A ServingStack installs or verifies the serving "
                            "substrate of one target cluster.",
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
