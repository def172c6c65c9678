"""The ServingStack API models: every limit, enum, default and cross-field rule."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.models import ServingStack
from modelplane.api.spec import (
    ADOPT_RULE,
    ADOPTABLE,
    CLIENT_CA_NAMES_RULE,
    IDENTITY_RULE,
    KUBECONFIG_RULE,
    LISTENER_NAMES_RULE,
    NAMESPACE_RULE,
    ServingStackSpec,
    pins_model,
)
from modelplane.api.status import GatewayStatus
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.types import Component
from modelplane.pins import ComponentsMode, Stack

from .conftest import CA_PEM, full_spec, manifest

# (wire path, lowest allowed length/value or None, highest allowed length/value)
# for every string, integer and list field of the spec, from the CRD reference.
STRING_LIMITS: list[tuple[str, int, int]] = [
    ("secrets.0.name", 1, 253),
    ("secrets.0.key", 1, 253),
    ("secrets.1.namespace", 1, 63),
    ("gateway.className", 1, 63),
    ("gateway.hostname", 1, 253),
    ("gateway.listeners.0.name", 1, 63),
    ("gateway.clientCAs.0.name", 1, 253),
    ("gateway.clientCAs.0.certificate", 1, 16384),
    ("nvidiaDriverRoot", 1, 512),
    ("claimWaitTimeout", 2, 19),
    # Every version pin, from the catalog that makes the fields.
    *((c.version_field, 1, 32) for c in COMPONENTS if c.version_field),
]
INT_LIMITS: list[tuple[str, int, int]] = [("gateway.listeners.0.port", 1, 65535)]
ENUMS: list[tuple[str, set[str]]] = [
    ("stack", {"Standard", "Dynamo"}),
    ("components", {"Managed", "Provided"}),
    ("gateway.listeners.0.protocol", {"HTTP", "TCP"}),
    # The components installed as a Helm release, from the catalog.
    ("adopt.0", {c.name for c in COMPONENTS if c.chart is not None}),
    (
        "secrets.1.type",
        {
            "Kubeconfig",
            "GoogleApplicationCredentials",
            "AWSWebIdentityCredentials",
            "NebiusServiceAccountCredentials",
        },
    ),
]

# The defaults the spec states, from the reference. The version pins' defaults
# are each component's VERSION (a changed pin shows in the golden files, the
# chart's CRD and docs/catalog.md's table, all regenerated and reviewed).
DEFAULTS: dict[str, Any] = {
    "stack": "Standard",
    "components": "Managed",
    "nvidiaDriverRoot": "/",
    "claimWaitTimeout": "10m",
    "gateway.className": "envoy",
    **{c.version_field: c.version for c in COMPONENTS if c.version_field},
}


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return out


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if part.isdigit() else data[part]
    return data


def _errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        ServingStackSpec.model_validate(spec)
    except ValidationError as err:
        return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
    return []


def test_full_spec_is_valid() -> None:
    assert _errors(full_spec()) == []


def _filler(path: str, size: int) -> str | None:
    """A string of ``size`` characters that only its length can make invalid.

    None when the field's grammar has no valid value that short.
    """
    if path == "nvidiaDriverRoot":
        return ("/" + "a" * size)[:size]
    if path == "claimWaitTimeout":
        # The shortest and the longest duration; past the longest, length alone refuses.
        return {2: "0s", 19: "9999h99999m9999999s"}.get(size, "1" * size)
    if path.startswith(("versions.", "standard.", "dynamo.")) and path != "dynamo.modelExpress":
        # SemVer, padded with a build identifier; no version is shorter than 1.0.0.
        return ("1.0.0+" + "a" * size)[:size] if size >= 6 else "1.0.0" if size == 5 else None
    if path == "gateway.clientCAs.0.certificate":
        # A real certificate, padded with the whitespace PEM may end with.
        return CA_PEM + " " * (size - len(CA_PEM)) if size >= len(CA_PEM) else None
    if path == "gateway.hostname":
        # DNS labels are at most 63 characters; a name does not end in ".".
        text = (("a" * 62 + ".") * 5)[:size]
        return text[:-1] + "a" if text.endswith(".") else text
    return "a" * size


@pytest.mark.parametrize(("path", "low", "high"), STRING_LIMITS)
def test_string_length_limits(path: str, low: int, high: int) -> None:
    assert _errors(_set(full_spec(), path, _filler(path, high))) == []
    errors = _errors(_set(full_spec(), path, _filler(path, high + 1)))
    assert [loc for loc, _ in errors] == [path]
    assert f"at most {high} character" in errors[0][1]
    shortest = _filler(path, low)
    if shortest is not None:
        assert _errors(_set(full_spec(), path, shortest)) == []
    errors = _errors(_set(full_spec(), path, ""))
    assert [loc for loc, _ in errors] == [path]
    assert f"at least {low} character" in errors[0][1]


@pytest.mark.parametrize(("path", "low", "high"), INT_LIMITS)
def test_integer_limits(path: str, low: int, high: int) -> None:
    for ok in (low, high):
        assert _errors(_set(full_spec(), path, ok)) == []
    for bad in (low - 1, high + 1):
        assert [loc for loc, _ in _errors(_set(full_spec(), path, bad))] == [path]


def _listener(i: int) -> dict[str, Any]:
    return {"name": f"l{i}", "port": 1000 + i, "protocol": "TCP"}


def _ca(i: int) -> dict[str, Any]:
    return {"name": f"gw{i}", "certificate": CA_PEM}


def _adopted(i: int) -> str:
    return ADOPTABLE[i % len(ADOPTABLE)]


@pytest.mark.parametrize(
    ("path", "item", "low", "high"),
    [
        ("gateway.listeners", _listener, 0, 8),
        ("gateway.clientCAs", _ca, 0, 32),
        # Each adoptable component once: no longer list is valid.
        ("adopt", _adopted, 0, len(ADOPTABLE)),
    ],
)
def test_item_limits(path: str, item: Any, low: int, high: int) -> None:
    assert _errors(_set(full_spec(), path, [item(i) for i in range(low)])) == []
    assert _errors(_set(full_spec(), path, [item(i) for i in range(high)])) == []
    errors = _errors(_set(full_spec(), path, [item(i) for i in range(high + 1)]))
    assert [loc for loc, _ in errors] == [path]
    assert f"at most {high} items" in errors[0][1]


def test_secrets_item_limits() -> None:
    errors = _errors(_set(full_spec(), "secrets", []))
    assert [loc for loc, _ in errors] == ["secrets"]
    assert "at least 1 item" in errors[0][1]
    kubeconfig = {"type": "Kubeconfig", "name": "kc", "key": "k"}
    errors = _errors(_set(full_spec(), "secrets", [kubeconfig] * 9))
    assert [loc for loc, _ in errors] == ["secrets"]
    assert "at most 8 items" in errors[0][1]


@pytest.mark.parametrize(("path", "allowed"), ENUMS)
def test_enums(path: str, allowed: set[str]) -> None:
    for value in allowed:
        spec = _set(full_spec(), path, value)
        if path == "secrets.1.type" and value == "Kubeconfig":
            continue  # a second Kubeconfig breaks another rule, tested below
        assert _errors(spec) == [], value
    errors = _errors(_set(full_spec(), path, "Bogus"))
    assert [loc for loc, _ in errors] == [path]
    for value in allowed:
        assert value in errors[0][1]


def test_required_fields() -> None:
    assert [loc for loc, _ in _errors({})] == ["secrets"]
    for path in ("name", "key", "type"):
        secret = {"type": "Kubeconfig", "name": "kc", "key": "k"}
        del secret[path]
        assert [loc for loc, _ in _errors({"secrets": [secret]})] == [f"secrets.0.{path}"]
    for field in ("name", "port", "protocol"):
        listener = {"name": "a", "port": 1, "protocol": "HTTP"}
        del listener[field]
        spec = _set(full_spec(), "gateway.listeners", [listener])
        assert [loc for loc, _ in _errors(spec)] == [f"gateway.listeners.0.{field}"]
    for field in ("name", "certificate"):
        ca = {"name": "a", "certificate": CA_PEM}
        del ca[field]
        spec = _set(full_spec(), "gateway.clientCAs", [ca])
        assert [loc for loc, _ in _errors(spec)] == [f"gateway.clientCAs.0.{field}"]


def test_unknown_fields_are_refused() -> None:
    assert [loc for loc, _ in _errors(_set(full_spec(), "color", "blue"))] == ["color"]
    errors = _errors(_set(full_spec(), "gateway.listeners.0.tls", {}))
    assert [loc for loc, _ in errors] == ["gateway.listeners.0.tls"]
    with pytest.raises(ValidationError) as err:
        ServingStack.model_validate({**manifest(), "extra": 1})
    assert [e["loc"] for e in err.value.errors()] == [("extra",)]


@pytest.mark.parametrize(("path", "expected"), sorted(DEFAULTS.items()))
def test_defaults(path: str, expected: Any) -> None:
    spec = ServingStackSpec.model_validate(manifest()["spec"])
    assert _get(spec.model_dump(mode="json", by_alias=True), path) == expected


def test_defaults_leave_optional_fields_empty() -> None:
    spec = ServingStackSpec.model_validate(manifest()["spec"])
    assert spec.stack is Stack.STANDARD
    assert spec.components is ComponentsMode.MANAGED
    assert spec.gateway.hostname is None
    assert spec.gateway.listeners == []
    assert spec.gateway.client_cas == []
    assert spec.kubeconfig_secret.name == "west-kubeconfig"
    assert spec.cloud_identity is None
    assert spec.adopt == []


def test_status_limits() -> None:
    GatewayStatus.model_validate({"address": "a" * 256, "caCertificate": "c" * 16384})
    for field, size in (("address", 257), ("caCertificate", 16385)):
        with pytest.raises(ValidationError) as err:
            GatewayStatus.model_validate({field: "a" * size})
        assert err.value.errors()[0]["loc"] == (field,)


def test_manifest_type_is_checked() -> None:
    with pytest.raises(ValidationError, match="apiVersion must be"):
        ServingStack.model_validate({**manifest(), "apiVersion": "v1"})
    with pytest.raises(ValidationError, match="kind must be ServingStack"):
        ServingStack.model_validate({**manifest(), "kind": "Gateway"})


# --- cross-field rules -----------------------------------------------------------

KC = {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}
GCP = {"type": "GoogleApplicationCredentials", "name": "sa", "key": "key.json"}
AWS = {"type": "AWSWebIdentityCredentials", "name": "aws", "key": "token"}


@pytest.mark.parametrize(
    ("secrets", "path", "message"),
    [
        ([GCP], "secrets", KUBECONFIG_RULE),
        ([KC, KC], "secrets", KUBECONFIG_RULE),
        ([KC, GCP, AWS], "secrets", IDENTITY_RULE),
        ([{**KC, "namespace": "other"}], "secrets.0", NAMESPACE_RULE),
        ([GCP, {**KC, "namespace": "other"}], "secrets.1", NAMESPACE_RULE),
    ],
)
def test_secret_rules(secrets: list[dict[str, Any]], path: str, message: str) -> None:
    errors = _errors({"secrets": secrets})
    assert (path, f"Value error, {message}") in errors


@pytest.mark.parametrize(
    "secrets",
    [
        [KC],
        [KC, GCP],
        [GCP, KC],
        [KC, {**GCP, "namespace": "crossplane-system"}],
        [KC, {**AWS, "namespace": "x"}],
    ],
)
def test_secret_rules_accept(secrets: list[dict[str, Any]]) -> None:
    assert _errors({"secrets": secrets}) == []


def test_cloud_identity_is_the_non_kubeconfig_entry() -> None:
    spec = ServingStackSpec.model_validate({"secrets": [GCP, KC]})
    assert spec.kubeconfig_secret.name == "kc"
    assert spec.cloud_identity is not None and spec.cloud_identity.name == "sa"


def test_listener_names_unique() -> None:
    listeners = [
        {"name": "web", "port": 80, "protocol": "HTTP"},
        {"name": "web", "port": 8080, "protocol": "HTTP"},
    ]
    errors = _errors({"secrets": [KC], "gateway": {"listeners": listeners}})
    assert errors == [("gateway.listeners", f"Value error, {LISTENER_NAMES_RULE}")]
    listeners[1]["name"] = "web2"
    assert _errors({"secrets": [KC], "gateway": {"listeners": listeners}}) == []


def test_client_ca_names_unique() -> None:
    cas = [{"name": "fleet", "certificate": CA_PEM}, {"name": "fleet", "certificate": CA_PEM}]
    errors = _errors({"secrets": [KC], "gateway": {"clientCAs": cas}})
    assert errors == [("gateway.clientCAs", f"Value error, {CLIENT_CA_NAMES_RULE}")]
    cas[1]["name"] = "fleet2"
    assert _errors({"secrets": [KC], "gateway": {"clientCAs": cas}}) == []


def test_adopt_names_each_component_once() -> None:
    errors = _errors({"secrets": [KC], "adopt": ["cert-manager", "cert-manager"]})
    assert errors == [("adopt", f"Value error, {ADOPT_RULE}")]
    assert _errors({"secrets": [KC], "adopt": ["cert-manager", "trust-manager"]}) == []


def test_only_a_helm_release_can_be_adopted() -> None:
    # Objects and manifests of the product are applied, never adopted.
    assert "dra-driver-critical-pods-quota" not in ADOPTABLE and "gaie-crds" not in ADOPTABLE
    (error,) = _errors({"secrets": [KC], "adopt": ["gaie-crds"]})
    assert error[0] == "adopt.0"


def test_rule_messages_are_sentences_a_person_reads() -> None:
    for message in (
        KUBECONFIG_RULE,
        NAMESPACE_RULE,
        IDENTITY_RULE,
        LISTENER_NAMES_RULE,
        CLIENT_CA_NAMES_RULE,
        ADOPT_RULE,
    ):
        assert re.fullmatch(r"[a-z][a-zA-Z ,()]+", message), message


# --- the version pins, made from the catalog ---------------------------------------


def _pinned(name: str, field: str, **extra: Any) -> Component:
    record: dict[str, Any] = {
        "summary": "",
        "namespace": "x",
        "version": "1.0.0",
        "stacks": frozenset(Stack),
        "order": 0,
        "version_field": field,
        "version_description": f"{name} chart version.",
    }
    return Component(name=name, **{**record, **extra})


def test_a_pin_group_has_one_field_per_record_in_wire_name_order() -> None:
    model = pins_model(
        "versions", [_pinned("zeta", "versions.zeta"), _pinned("alpha", "versions.alphaBeta")]
    )
    assert [f.alias for f in model.model_fields.values()] == ["alphaBeta", "zeta"]
    assert model.model_validate({}).alpha_beta == "1.0.0"
    assert model.model_fields["zeta"].description == "zeta chart version."
    image = pins_model(
        "versions", [_pinned("img", "versions.img", version="0.1", version_format="image")]
    )
    with pytest.raises(ValidationError, match="must be an image tag"):
        image.model_validate({"img": "a/b"})


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (_pinned("a", "elsewhere.a"), "is not under one of spec.versions"),
        (_pinned("a", "versions.a", stacks=frozenset({Stack.DYNAMO})), "but spec.versions pins"),
        (_pinned("a", "versions.a_b"), "needs a camelCase name"),
        (_pinned("a", "versions.a", version_description=""), "and a version_description"),
    ],
)
def test_a_record_the_pin_models_cannot_hold_is_refused(record: Component, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        pins_model("versions", [record])


def test_two_records_with_one_version_field_are_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("another component has versions.a")):
        pins_model("versions", [_pinned("a", "versions.a"), _pinned("b", "versions.a")])
