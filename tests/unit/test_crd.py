"""``modelplane crds``: a valid, structural CRD carrying every limit, enum, default and rule."""

from __future__ import annotations

from typing import Any

import yaml
from typer.testing import CliRunner

from modelplane.api.spec import (
    ADOPTABLE,
    CLIENT_CA_NAMES_RULE,
    IDENTITY_RULE,
    KUBECONFIG_RULE,
    LISTENER_NAMES_RULE,
    LISTENER_PORTS_RULE,
    NAMESPACE_RULE,
    private_key_message,
)
from modelplane.cli.main import app

from .test_models import DEFAULTS, ENUMS, INT_LIMITS, STRING_LIMITS


def _crd() -> dict[str, Any]:
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert len(docs) == 1
    crd: dict[str, Any] = docs[0]
    return crd


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec: dict[str, Any] = schema["properties"]["spec"]
    return spec


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["items"] if part.isdigit() else schema["properties"][part]
    return schema


def test_identity_of_the_crd() -> None:
    crd = _crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "servingstacks.infrastructure.modelplane.ai"
    spec = crd["spec"]
    assert spec["group"] == "infrastructure.modelplane.ai"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "ServingStack"
    assert spec["names"]["plural"] == "servingstacks"
    assert spec["names"]["shortNames"] == ["ss"]
    [version] = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"] is True and version["storage"] is True
    assert version["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = _crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    by_name = {c["name"]: c for c in columns}
    assert [c["name"] for c in columns] == [
        "Stack",
        "Components",
        "Ready",
        "Up-To-Date",
        "Rollout",
        "GPUs",
        "Address",
        "Age",
    ]
    # Which stacks are behind their desired versions, and where each stands.
    up_to_date = '.status.conditions[?(@.type=="UpToDate")]'
    assert by_name["Up-To-Date"]["jsonPath"] == f"{up_to_date}.status"
    assert by_name["Rollout"]["jsonPath"] == f"{up_to_date}.reason"
    # An integer read from status.target: no value (not 0) until the target was read.
    assert by_name["GPUs"] == {"name": "GPUs", "type": "integer", "jsonPath": ".status.target.gpus"}
    assert by_name["Stack"]["jsonPath"] == ".spec.stack"
    assert by_name["Components"]["jsonPath"] == ".spec.components"
    assert by_name["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert by_name["Address"]["jsonPath"] == ".status.gateway.address"
    assert by_name["Age"] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for name, child in node.get("properties", {}).items():
            out += _walk(child, f"{path}.{name}")
        if "items" in node:
            out += _walk(node["items"], f"{path}[]")
    return out


def test_schema_is_structural() -> None:
    root = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        assert "type" in node, f"{path} has no type"
        for banned in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const"):
            assert banned not in node, f"{path} carries {banned}"
        if node["type"] == "object" and "properties" in node:
            assert "additionalProperties" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        for name in node.get("required", []):
            assert name in node["properties"], f"{path} requires unknown {name}"
    assert root["properties"]["status"]["type"] == "object"


def test_schema_carries_every_limit() -> None:
    spec = _spec_schema()
    for path, low, high in STRING_LIMITS:
        node = _node(spec, path)
        assert node["type"] == "string", path
        assert node["maxLength"] == high, path
        assert node.get("minLength", 0) == low, path
    for path, low, high in INT_LIMITS:
        node = _node(spec, path)
        assert (node["type"], node["minimum"], node["maximum"]) == ("integer", low, high)
    assert (_node(spec, "secrets")["minItems"], _node(spec, "secrets")["maxItems"]) == (1, 8)
    assert _node(spec, "gateway.listeners")["maxItems"] == 8
    assert _node(spec, "gateway.clientCAs")["maxItems"] == 32
    # Each adoptable component at most once: the API server refuses a repeat.
    adopt = _node(spec, "adopt")
    assert (adopt["maxItems"], adopt["x-kubernetes-list-type"]) == (len(ADOPTABLE), "set")
    status = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert _node(status, "gateway.address")["maxLength"] == 256
    assert _node(status, "gateway.caCertificate")["maxLength"] == 16384


def test_schema_carries_every_enum() -> None:
    spec = _spec_schema()
    for path, allowed in ENUMS:
        assert set(_node(spec, path)["enum"]) == allowed, path


def test_schema_carries_every_default() -> None:
    spec = _spec_schema()
    for path, value in DEFAULTS.items():
        assert _node(spec, path)["default"] == value, path
    # Nested objects default to {} so the API server fills their fields in.
    for path in ("versions", "standard", "dynamo", "gateway"):
        assert _node(spec, path)["default"] == {}, path


def test_required_fields() -> None:
    spec = _spec_schema()
    assert spec["required"] == ["secrets"]
    assert set(_node(spec, "secrets.0")["required"]) == {"type", "name", "key"}
    assert set(_node(spec, "gateway.listeners.0")["required"]) == {"name", "port", "protocol"}
    assert set(_node(spec, "gateway.clientCAs.0")["required"]) == {"name", "certificate"}


def _rules(node: dict[str, Any]) -> dict[str, str]:
    return {r["message"]: r["rule"] for r in node.get("x-kubernetes-validations", [])}


def test_cel_rules_say_what_the_models_say() -> None:
    spec = _spec_schema()
    top = _rules(spec)
    assert top[KUBECONFIG_RULE] == "self.secrets.filter(s, s.type == 'Kubeconfig').size() == 1"
    assert top[IDENTITY_RULE] == "self.secrets.filter(s, s.type != 'Kubeconfig').size() <= 1"
    secret = _rules(_node(spec, "secrets.0"))
    # "namespace" is a CEL reserved word: the CRD must escape it.
    assert secret[NAMESPACE_RULE] == "self.type != 'Kubeconfig' || !has(self.__namespace__)"
    gateway = _rules(_node(spec, "gateway"))
    for field, message in (
        ("listeners", LISTENER_NAMES_RULE),
        ("clientCAs", CLIENT_CA_NAMES_RULE),
    ):
        rule = gateway[message]
        # Optional lists: the rule must not fail when the list is absent.
        assert rule.startswith(f"!has(self.{field}) || ")
        assert f"self.{field}.exists_one(y, y.name == x.name)" in rule
    fields = {
        r["message"]: r.get("fieldPath") for r in _node(spec, "gateway")["x-kubernetes-validations"]
    }
    assert fields == {
        LISTENER_NAMES_RULE: ".listeners",
        LISTENER_PORTS_RULE: ".listeners",
        CLIENT_CA_NAMES_RULE: ".clientCAs",
    }
    assert gateway[LISTENER_PORTS_RULE] == (
        "!has(self.listeners) || "
        "self.listeners.all(x, self.listeners.exists_one(y, y.port == x.port))"
    )
    # The key rule builds the models' message around the entry's name.
    (key_rule,) = _node(spec, "gateway.clientCAs.0")["x-kubernetes-validations"]
    assert key_rule["rule"] == "!self.certificate.contains('PRIVATE KEY')"
    assert key_rule["messageExpression"] == ("'" + private_key_message("' + self.name + '") + "'")
