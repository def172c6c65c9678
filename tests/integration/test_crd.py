"""The generated ServingStack CRD against a real kube-apiserver.

The pydantic models are the single source of the API; these tests check that
the API server, given the CRD generated from them, agrees with them: it
installs, accepts what the models accept and fills in the same defaults, and
refuses what the models refuse, naming the same field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from pydantic import ValidationError
from tests.integration.hubs import client_for, drop_empty_lists
from tests.testenv import TestEnv

from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAME
from modelplane.api.spec import (
    CLIENT_CA_NAMES_RULE,
    IDENTITY_RULE,
    KUBECONFIG_RULE,
    LISTENER_NAMES_RULE,
    NAMESPACE_RULE,
    ServingStackSpec,
)
from modelplane.api.status import ServingStackStatus
from modelplane.catalog.components import BY_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "servingstack.yaml"
NAMESPACE = "crd-tests"
FIELD_MANAGER = "modelplane-crd-tests"
CRD_NAME = f"{PLURAL}.{API_GROUP}"
SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
SS_STATUS = SS.Status
COLLECTION = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NAMESPACE}/{PLURAL}"

# A self-signed CA certificate's worth of PEM; the CRD checks only its length.
# A real CA certificate: the models parse every clientCAs entry.
PEM = (Path(__file__).parents[1] / "fixtures" / "client-cas" / "fleet-a.pem").read_text()


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(hub: Client, hub_env: TestEnv) -> Client:
    """A client of the hub (the generated CRD served, see conftest) and the test namespace."""
    client = client_for(hub_env, FIELD_MANAGER)
    client.apply(Namespace.from_dict({"metadata": {"name": NAMESPACE}}))
    return client


def _body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _create(client: Client, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    created = client.create(SS.from_dict(_body(name, spec)))
    return created.to_dict()  # type: ignore[no-any-return]


# --------------------------------------------------------------------------
# The CRD itself
# --------------------------------------------------------------------------


def test_crd_installs_and_is_established(hub: Client) -> None:
    crd = hub.get(CustomResourceDefinition, CRD_NAME)
    assert crd.status is not None
    conditions = {c.type: c.status for c in crd.status.conditions or []}
    assert conditions.get("Established") == "True", conditions
    assert conditions.get("NamesAccepted") == "True", conditions
    # A structural schema: no NonStructuralSchema condition.
    assert "NonStructuralSchema" not in conditions, conditions
    accepted = crd.status.acceptedNames
    assert accepted is not None
    assert accepted.kind == KIND
    assert accepted.shortNames == [SHORT_NAME]


def test_stored_crd_has_printer_columns(hub: Client) -> None:
    crd = hub.get(CustomResourceDefinition, CRD_NAME)
    (version,) = crd.spec.versions
    assert version.name == API_VERSION
    assert version.subresources is not None and version.subresources.status is not None
    columns = {c.name: (c.type, c.jsonPath) for c in version.additionalPrinterColumns or []}
    assert columns == {
        "Stack": ("string", ".spec.stack"),
        "Components": ("string", ".spec.components"),
        "Ready": ("string", '.status.conditions[?(@.type=="Ready")].status'),
        # Which stacks are behind, and where each stands in the rollout.
        "Up-To-Date": ("string", '.status.conditions[?(@.type=="UpToDate")].status'),
        "Rollout": ("string", '.status.conditions[?(@.type=="UpToDate")].reason'),
        # The fleet's capacity in `kubectl get ss -A`: the devices status.target counts.
        "GPUs": ("integer", ".status.target.gpus"),
        "Address": ("string", ".status.gateway.address"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


def test_table_output_shows_printer_columns(hub: Client, hub_env: TestEnv) -> None:
    """What ``kubectl get ss`` asks for: the server-side Table of the columns."""
    _create(hub, "table-view", {"secrets": [_kubeconfig()]})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    with hub_env.http_client() as http:
        resp = http.get(f"{COLLECTION}/table-view", headers={"Accept": accept})
    assert resp.status_code == 200, resp.text
    table = resp.json()
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == [
        "Name", "Stack", "Components", "Ready", "Up-To-Date", "Rollout", "GPUs", "Address", "Age",
    ]  # fmt: skip
    (row,) = table["rows"]
    # Nothing observed yet: no Ready, no rollout, and no GPU count (not 0).
    assert row["cells"][:8] == ["table-view", "Standard", "Managed", None, None, None, None, None]


# --------------------------------------------------------------------------
# Valid objects and defaults
# --------------------------------------------------------------------------


def _kubeconfig(**extra: Any) -> dict[str, Any]:
    return {"type": "Kubeconfig", "name": "target-kubeconfig", "key": "kubeconfig", **extra}


def _example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]
    return spec


def _full_spec() -> dict[str, Any]:
    return {
        "secrets": [
            _kubeconfig(),
            {
                "type": "GoogleApplicationCredentials",
                "name": "gcp-identity",
                "key": "credentials.json",
                "namespace": "identities",
            },
        ],
        "stack": "Dynamo",
        "components": "Provided",
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "versions": {"certManager": "v1.19.0"},
        "dynamo": {"grove": "v0.1.0-alpha.13"},
        "gateway": {
            "className": "custom-envoy",
            "hostname": "east.example.com",
            "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP"},
                {"name": "grpc", "port": 8443, "protocol": "TCP"},
            ],
            "clientCAs": [
                {"name": "fleet-a", "certificate": PEM},
                {"name": "fleet-b", "certificate": PEM},
            ],
        },
    }


def _model_view(spec: dict[str, Any]) -> dict[str, Any]:
    dumped = ServingStackSpec.model_validate(spec).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    return drop_empty_lists(dumped)  # type: ignore[no-any-return]


# Every scalar the models default, by its path in the spec.
DEFAULTED_SCALARS: tuple[tuple[str, ...], ...] = (
    ("stack",),
    ("components",),
    ("nvidiaDriverRoot",),
    ("claimWaitTimeout",),
    ("versions", "certManager"),
    ("versions", "envoyGateway"),
    ("versions", "nodeFeatureDiscovery"),
    ("versions", "nvidiaDraDriver"),
    ("versions", "prometheus"),
    ("versions", "trustManager"),
    ("standard", "leaderWorkerSet"),
    ("dynamo", "grove"),
    ("dynamo", "kaiScheduler"),
    ("dynamo", "modelExpress"),
    ("gateway", "className"),
)


def _at(node: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        assert isinstance(node, dict) and key in node, f"spec.{'.'.join(path)} missing"
        node = node[key]
    return node


def test_defaulted_scalars_cover_the_model() -> None:
    """The list above is every scalar default the models have (none is forgotten)."""
    dumped = ServingStackSpec.model_validate({"secrets": [_kubeconfig()]}).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    scalars: set[tuple[str, ...]] = set()

    def walk(node: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, (*prefix, key))
            elif not isinstance(value, list):
                scalars.add((*prefix, key))

    walk(dumped, ())
    assert scalars == set(DEFAULTED_SCALARS)
    assert _at(dumped, ("versions", "certManager")) == BY_NAME["cert-manager"].version


@pytest.mark.parametrize(
    ("name", "spec_of"),
    [("example", _example_spec), ("full", _full_spec)],
    ids=["examples-servingstack-yaml", "dynamo-full"],
)
def test_valid_stack_is_accepted_with_model_defaults(
    hub: Client, name: str, spec_of: Callable[[], dict[str, Any]]
) -> None:
    spec = spec_of()
    created = _create(hub, f"valid-{name}", copy.deepcopy(spec))
    expected = _model_view(spec)
    served = created["spec"]

    for path in DEFAULTED_SCALARS:
        assert _at(served, path) == _at(expected, path), f"spec.{'.'.join(path)}"
    # Field by field, so a difference names its field.
    assert sorted(served) == sorted(expected)
    for key in expected:
        assert served[key] == expected[key], f"spec.{key}"
    assert served == expected

    # What the server stored reads back the same and is valid for the models too.
    stored = hub.get(SS, f"valid-{name}", namespace=NAMESPACE).to_dict()
    assert stored["spec"] == served
    assert _model_view(stored["spec"]) == served


def test_a_stack_whose_pins_are_removed_takes_the_crds_defaults(hub: Client) -> None:
    """docs/upgrading.md's way to a new release's pins: the server defaults them again."""
    old = "v1.19.0"
    created = _create(
        hub, "older-pins", {"secrets": [_kubeconfig()], "versions": {"certManager": old}}
    )
    assert created["spec"]["versions"]["certManager"] == old
    patched = hub.patch(
        SS,
        "older-pins",
        [{"op": "remove", "path": "/spec/versions"}],
        namespace=NAMESPACE,
        patch_type=PatchType.JSON,
    ).to_dict()
    assert patched["spec"]["versions"]["certManager"] == BY_NAME["cert-manager"].version
    stored = hub.get(SS, "older-pins", namespace=NAMESPACE).to_dict()
    assert stored["spec"]["versions"] == _at(_model_view(stored["spec"]), ("versions",))


def test_example_manifest_is_accepted_as_written(hub: Client) -> None:
    """The example file itself (in its own namespace) applies server-side."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    namespace = manifest["metadata"]["namespace"]
    hub.apply(Namespace.from_dict({"metadata": {"name": namespace}}))
    applied = hub.apply(SS.from_dict(manifest), force=True).to_dict()
    assert applied["spec"] == _model_view(manifest["spec"])


# --------------------------------------------------------------------------
# Invalid objects: the API server and the models both refuse them
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Invalid:
    id: str
    spec: dict[str, Any]
    path: str  # the offending field, as the API server names it
    message: str | None = None  # a rule's message both must give
    # An unknown field: refused only with fieldValidation=Strict, and then as a
    # decoding error (400 BadRequest), not a validation error (422).
    strict: bool = False


def _base(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"secrets": [_kubeconfig()]}
    spec.update(overrides)
    return spec


def _listeners(*names: str, port: Any = 80, protocol: str = "HTTP") -> dict[str, Any]:
    return {"listeners": [{"name": n, "port": port, "protocol": protocol} for n in names]}


def _cas(*names: str, certificate: str = PEM) -> dict[str, Any]:
    return {"clientCAs": [{"name": n, "certificate": certificate} for n in names]}


_IDENTITY = {"type": "AWSWebIdentityCredentials", "name": "aws", "key": "token"}

INVALID: list[Invalid] = [
    Invalid("pin-33-chars", _base(versions={"certManager": "v" * 33}), "spec.versions.certManager"),
    Invalid("pin-empty", _base(standard={"leaderWorkerSet": ""}), "spec.standard.leaderWorkerSet"),
    Invalid("pin-empty-dynamo", _base(dynamo={"grove": ""}), "spec.dynamo.grove"),
    Invalid("stack-enum", _base(stack="Kserve"), "spec.stack"),
    Invalid("components-enum", _base(components="Partial"), "spec.components"),
    Invalid(
        "listener-protocol",
        _base(gateway=_listeners("udp", protocol="UDP")),
        "spec.gateway.listeners[0].protocol",
    ),
    Invalid(
        "nine-listeners",
        _base(gateway=_listeners(*(f"l{i}" for i in range(9)))),
        "spec.gateway.listeners",
    ),
    Invalid("secrets-empty", {"secrets": []}, "spec.secrets"),
    Invalid("secrets-missing", {"stack": "Standard"}, "spec.secrets"),
    Invalid(
        "two-kubeconfigs",
        {"secrets": [_kubeconfig(), _kubeconfig(name="other")]},
        "spec.secrets",
        KUBECONFIG_RULE,
    ),
    Invalid("no-kubeconfig", {"secrets": [_IDENTITY]}, "spec.secrets", KUBECONFIG_RULE),
    Invalid(
        "kubeconfig-namespace",
        {"secrets": [_kubeconfig(namespace="elsewhere")]},
        "spec.secrets[0]",
        NAMESPACE_RULE,
    ),
    Invalid(
        "two-identities",
        {
            "secrets": [
                _kubeconfig(),
                _IDENTITY,
                {"type": "NebiusServiceAccountCredentials", "name": "nb", "key": "sa"},
            ]
        },
        "spec.secrets",
        IDENTITY_RULE,
    ),
    Invalid("secret-type-enum", {"secrets": [_kubeconfig(type="Token")]}, "spec.secrets[0].type"),
    Invalid("port-0", _base(gateway=_listeners("l", port=0)), "spec.gateway.listeners[0].port"),
    Invalid(
        "port-65536", _base(gateway=_listeners("l", port=65536)), "spec.gateway.listeners[0].port"
    ),
    Invalid(
        "duplicate-listener-names",
        _base(gateway=_listeners("http", "http")),
        "spec.gateway.listeners",
        LISTENER_NAMES_RULE,
    ),
    Invalid(
        "duplicate-client-ca-names",
        _base(gateway=_cas("fleet", "fleet")),
        "spec.gateway.clientCAs",
        CLIENT_CA_NAMES_RULE,
    ),
    Invalid(
        "33-client-cas",
        _base(gateway=_cas(*(f"fleet-{i}" for i in range(33)))),
        "spec.gateway.clientCAs",
    ),
    Invalid(
        "client-ca-16385-chars",
        _base(gateway=_cas("fleet", certificate="A" * 16385)),
        "spec.gateway.clientCAs[0].certificate",
    ),
    Invalid(
        "client-ca-empty",
        _base(gateway=_cas("fleet", certificate="")),
        "spec.gateway.clientCAs[0].certificate",
    ),
    Invalid("driver-root-513-chars", _base(nvidiaDriverRoot="/" * 513), "spec.nvidiaDriverRoot"),
    Invalid("class-name-empty", _base(gateway={"className": ""}), "spec.gateway.className"),
    Invalid("unknown-field", _base(replicas=3), "spec.replicas", strict=True),
    Invalid(
        "unknown-nested-field",
        _base(gateway={"tls": {"mode": "Terminate"}}),
        "spec.gateway.tls",
        strict=True,
    ),
]


def _pydantic_path(loc: tuple[int | str, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _object_name(case: Invalid) -> str:
    return "invalid-" + re.sub(r"[^a-z0-9-]", "-", case.id.lower())


def _refusal_via_strict_request(env: TestEnv, body: dict[str, Any]) -> tuple[int, str, list[str]]:
    """POST with ``fieldValidation=Strict``, which lightkube's create does not expose."""
    with env.http_client() as http:
        resp = http.post(COLLECTION, params={"fieldValidation": "Strict"}, json=body)
    status = resp.json()
    causes = [c.get("field", "") for c in (status.get("details") or {}).get("causes") or []]
    return resp.status_code, str(status.get("message", "")), causes


def _refusal_via_lightkube(client: Client, body: dict[str, Any]) -> tuple[int, str, list[str]]:
    with pytest.raises(ApiError) as caught:
        client.create(SS.from_dict(body))
    status = caught.value.status
    causes = [c.field or "" for c in (status.details.causes if status.details else None) or []]
    return int(status.code or 0), str(status.message), causes


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_stack_is_refused_by_server_and_models(
    hub: Client, hub_env: TestEnv, case: Invalid
) -> None:
    # The models refuse it, naming the field.
    with pytest.raises(ValidationError) as refused:
        ServingStackSpec.model_validate(copy.deepcopy(case.spec))
    model_paths = [_pydantic_path(tuple(e["loc"])) for e in refused.value.errors()]
    assert case.path in model_paths, refused.value
    if case.message is not None:
        assert case.message in str(refused.value)

    # So does the API server.
    body = _body(_object_name(case), copy.deepcopy(case.spec))
    if case.strict:
        code, message, causes = _refusal_via_strict_request(hub_env, body)
    else:
        code, message, causes = _refusal_via_lightkube(hub, body)
    assert case.path in message, message
    if case.strict:
        # Strict decoding refuses before validation: 400 BadRequest, no causes.
        assert code == 400, message
        assert f'unknown field "{case.path}"' in message, message
    else:
        assert code == 422, message
        assert any(case.path in cause for cause in causes), (causes, message)
    if case.message is not None:
        assert case.message in message, message

    # Nothing was stored.
    with pytest.raises(ApiError) as missing:
        hub.get(SS, _object_name(case), namespace=NAMESPACE)
    assert missing.value.status.code == 404


def test_unknown_field_is_pruned_with_a_warning_without_strict(
    hub: Client, hub_env: TestEnv
) -> None:
    """Without Strict the server prunes an unknown field and warns, rather than refusing."""
    with hub_env.http_client() as http:
        resp = http.post(COLLECTION, json=_body("pruned-unknown", _base(replicas=3)))
    assert resp.status_code == 201, resp.text
    assert 'unknown field \\"spec.replicas\\"' in resp.headers.get("warning", "")
    assert "replicas" not in resp.json()["spec"]


# --------------------------------------------------------------------------
# The status subresource
# --------------------------------------------------------------------------


def test_status_subresource(hub: Client) -> None:
    name = "status-subresource"
    created = _create(hub, name, _full_spec())
    spec, generation = created["spec"], created["metadata"]["generation"]

    status = {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Installed",
                "message": "every component is ready",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ],
        "components": [
            {"name": "cert-manager", "mode": "Managed", "version": "v1.20.2", "state": "Ready"}
        ],
        "gateway": {"address": "203.0.113.7", "caCertificate": PEM},
    }
    # A spec change sent to /status is ignored; the status is written.
    patched = hub.patch(
        SS_STATUS,
        name,
        {"spec": {"stack": "Standard"}, "status": status},
        namespace=NAMESPACE,
        patch_type=PatchType.MERGE,
    ).to_dict()
    # The server fills in the status defaults the models have: a component
    # sent without a message comes back with the models' default one.
    expected_status = drop_empty_lists(
        ServingStackStatus.model_validate(status).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
    )
    assert "message" not in status["components"][0]
    assert patched["status"]["components"][0]["message"] == ""
    assert patched["spec"] == spec
    assert patched["status"] == expected_status
    assert patched["metadata"]["generation"] == generation

    stored = hub.get(SS, name, namespace=NAMESPACE).to_dict()
    assert stored["spec"] == spec
    assert stored["status"] == expected_status
    assert stored["metadata"]["generation"] == generation

    # And a status sent to the main resource is ignored.
    hub.patch(
        SS,
        name,
        {"status": {"observedGeneration": 99}},
        namespace=NAMESPACE,
        patch_type=PatchType.MERGE,
    )
    assert hub.get(SS, name, namespace=NAMESPACE).to_dict()["status"] == expected_status


def test_status_is_validated(hub: Client) -> None:
    name = "status-validated"
    _create(hub, name, _base())
    with pytest.raises(ApiError) as caught:
        hub.patch(
            SS_STATUS,
            name,
            {"status": {"gateway": {"address": "a" * 257}}},
            namespace=NAMESPACE,
            patch_type=PatchType.MERGE,
        )
    assert caught.value.status.code == 422
    assert "status.gateway.address" in str(caught.value.status.message)


# --------------------------------------------------------------------------
# Types: the model refuses what the server refuses, with no lax coercion
# --------------------------------------------------------------------------

LAX_MODEL_INPUTS = [
    pytest.param(_base(gateway=_listeners("l", port="80")), id="port-as-string"),
    pytest.param(_base(gateway=_listeners("l", port=True)), id="port-as-bool"),
]


@pytest.mark.parametrize("spec", LAX_MODEL_INPUTS)
def test_models_refuse_what_the_server_refuses_by_type(
    hub: Client, hub_env: TestEnv, spec: dict[str, Any]
) -> None:
    with hub_env.http_client() as http:
        resp = http.post(COLLECTION, json=_body("lax-type", spec))
    assert resp.status_code == 422, resp.text
    assert "spec.gateway.listeners[0].port" in resp.json()["message"]
    with pytest.raises(ValidationError) as refused:
        ServingStackSpec.model_validate(spec)
    paths = [_pydantic_path(tuple(e["loc"])) for e in refused.value.errors()]
    assert paths == ["spec.gateway.listeners[0].port"], refused.value
