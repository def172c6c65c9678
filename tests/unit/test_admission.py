"""What admission refuses and warns of, as ``render`` and the operator read a spec.

Each table row is also a document of the corpus test in
tests/integration/test_admission_parity.py, where the hub's API server gives
its own verdict on it; here the models' verdict, its field and its words.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.models import ServingStack
from modelplane.api.spec import LISTENER_PORTS_RULE, ServingStackSpec, client_ca_warnings
from modelplane.catalog.configuration import CLIENT_CAS_CONFIGMAP
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.operator.plan_warnings import PlanWarnings
from modelplane.plan import Plan, plan
from modelplane.plan.model import ObjectAction

from .conftest import manifest

CAS = Path(__file__).resolve().parents[1] / "fixtures" / "client-cas"
FLEET_A = (CAS / "fleet-a.pem").read_text()
FLEET_B = (CAS / "fleet-b.pem").read_text()
LEAF = (CAS / "leaf.pem").read_text()
EXPIRED = (CAS / "expired.pem").read_text()
KEY = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVdOsQ498mvpJpt//\n"
    "-----END PRIVATE KEY-----\n"
)
# PEM in shape, not a certificate inside.
NOT_DER = "-----BEGIN CERTIFICATE-----\nMIIBfleet\n-----END CERTIFICATE-----\n"


def _errors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        ServingStack.model_validate(doc)
    except ValidationError as err:
        return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in err.errors()]
    return []


def _ca_doc(*certificates: str) -> dict[str, Any]:
    cas = [{"name": f"fleet-{i}", "certificate": c} for i, c in enumerate(certificates)]
    return manifest(gateway={"hostname": "west.example.com", "clientCAs": cas})


# --- clientCAs ---------------------------------------------------------------------------

# (id, certificates, index of the refused entry or None, words of the refusal)
CLIENT_CA_CASES: list[tuple[str, list[str], int | None, str]] = [
    ("one-ca", [FLEET_A], None, ""),
    ("two-cas", [FLEET_A, FLEET_B], None, ""),
    ("bundle-in-one-entry", [FLEET_A + FLEET_B], None, ""),
    ("crlf", [FLEET_A.replace("\n", "\r\n")], None, ""),
    ("no-final-newline", [FLEET_A.rstrip("\n")], None, ""),
    ("leaf-is-a-warning", [LEAF], None, ""),
    ("expired-is-a-warning", [EXPIRED], None, ""),
    ("private-key", [KEY], 0, "fleet-0 holds a PRIVATE KEY block"),
    ("cert-then-key", [FLEET_A, FLEET_B + KEY], 1, "fleet-1 holds a PRIVATE KEY block"),
    ("rsa-key", [KEY.replace("PRIVATE", "RSA PRIVATE")], 0, "PRIVATE KEY"),
    ("not-pem", [FLEET_A, "hello"], 1, "fleet-1"),
    ("text-before-block", ["subject=CN=x\n" + FLEET_A], 0, "fleet-0"),
    ("public-key-block", [FLEET_A.replace("CERTIFICATE", "PUBLIC KEY")], 0, "fleet-0"),
    ("not-der", [NOT_DER], 0, "fleet-0: block 1 is not an X.509 certificate"),
    ("second-block-not-der", [FLEET_A + NOT_DER], 0, "block 2 is not an X.509"),
    ("space-in-base64", [FLEET_A.replace("\n", " \n", 2)], 0, "fleet-0"),
]


@pytest.mark.parametrize(
    ("certificates", "refused", "words"),
    [c[1:] for c in CLIENT_CA_CASES],
    ids=[c[0] for c in CLIENT_CA_CASES],
)
def test_client_cas_admit_only_certificates(
    certificates: list[str], refused: int | None, words: str
) -> None:
    errors = _errors(_ca_doc(*certificates))
    if refused is None:
        assert errors == []
        return
    assert [loc for loc, _ in errors] == [f"spec.gateway.clientCAs.{refused}.certificate"]
    assert words in errors[0][1]
    # A refusal never quotes the certificate (it may be a key).
    assert "MIG" not in errors[0][1]


def test_a_ca_that_is_not_a_ca_or_has_expired_is_a_warning_naming_the_entry() -> None:
    stack = ServingStack.model_validate(_ca_doc(FLEET_A, LEAF, EXPIRED))
    warnings = client_ca_warnings(stack.spec)
    assert len(warnings) == 2
    leaf, expired = warnings
    assert "fleet-1" in leaf and "not a CA" in leaf
    assert "fleet-2" in expired and "expired" in expired
    # render shows them, and they block nothing: the CA ConfigMap is applied.
    p = plan(stack)
    assert leaf in p.notes and expired in p.notes
    applied = [o for o in p.objects if CLIENT_CAS_CONFIGMAP in o.key and "ConfigMap" in o.key]
    assert [o.action for o in applied] == [ObjectAction.APPLY]


def test_a_good_ca_gives_no_warning() -> None:
    stack = ServingStack.model_validate(_ca_doc(FLEET_A, FLEET_B))
    assert client_ca_warnings(stack.spec) == []


# --- metadata ----------------------------------------------------------------------------

LONG_NAME = "a" * 63
PREFIX_254 = ("a" * 63 + ".") * 3 + "b" * 62
# (id, metadata fields over name+namespace, the field a refusal names or None)
OWNER = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "uid": "u1"}


def _without(fields: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k != key}


METADATA_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("namespace-null", {"namespace": None}, None),
    ("labels-ok", {"labels": {"app": "x", "example.com/a": "", "a.b_c-D": "A.b_c-1"}}, None),
    ("label-key-63", {"labels": {LONG_NAME: "x"}}, None),
    ("label-value-63", {"labels": {"a": LONG_NAME}}, None),
    ("label-prefix-253", {"labels": {PREFIX_254[1:] + "/x": "y"}}, None),
    # IsDNS1123Subdomain bounds the whole, not each label.
    ("label-prefix-label-64", {"labels": {"a" * 64 + ".com/x": "y"}}, None),
    ("labels-null", {"labels": None}, None),
    ("annotations-ok", {"annotations": {"Example.COM/Key": "any\nthing", "a": ""}}, None),
    ("annotations-256k", {"annotations": {"a": "x" * (262144 - 1)}}, None),
    ("finalizers-ok", {"finalizers": ["example.com/cleanup", "kubernetes"]}, None),
    ("created-null", {"creationTimestamp": None}, None),
    ("labels-list", {"labels": ["a"]}, "metadata.labels"),
    ("labels-string", {"labels": "a=b"}, "metadata.labels"),
    ("label-value-int", {"labels": {"a": 1}}, "metadata.labels.a"),
    ("label-value-bool", {"labels": {"a": True}}, "metadata.labels.a"),
    ("label-value-map", {"labels": {"a": {"b": "c"}}}, "metadata.labels.a"),
    ("label-key-two-slashes", {"labels": {"a/b/c": "x"}}, "metadata.labels"),
    ("label-key-dash", {"labels": {"-a": "x"}}, "metadata.labels"),
    ("label-key-64", {"labels": {LONG_NAME + "a": "x"}}, "metadata.labels"),
    ("label-key-empty", {"labels": {"": "x"}}, "metadata.labels"),
    ("label-key-empty-prefix", {"labels": {"/a": "x"}}, "metadata.labels"),
    ("label-key-empty-name", {"labels": {"example.com/": "x"}}, "metadata.labels"),
    ("label-prefix-upper", {"labels": {"Example.com/a": "x"}}, "metadata.labels"),
    ("label-prefix-254", {"labels": {PREFIX_254 + "/x": "y"}}, "metadata.labels"),
    ("label-value-64", {"labels": {"a": LONG_NAME + "a"}}, "metadata.labels"),
    ("label-value-space", {"labels": {"a": "b c"}}, "metadata.labels"),
    ("label-value-dash", {"labels": {"a": "b-"}}, "metadata.labels"),
    ("label-value-esc", {"labels": {"a": "\x1b[31m"}}, "metadata.labels"),
    ("annotation-key-space", {"annotations": {"a b": "x"}}, "metadata.annotations"),
    ("annotation-key-64", {"annotations": {LONG_NAME + "a": "x"}}, "metadata.annotations"),
    ("annotation-value-int", {"annotations": {"a": 1}}, "metadata.annotations.a"),
    ("annotations-over-256k", {"annotations": {"a": "x" * 262144}}, "metadata.annotations"),
    ("annotations-10m", {"annotations": {"a": "x" * 10_000_000}}, "metadata.annotations"),
    ("finalizer-space", {"finalizers": ["a b"]}, "metadata.finalizers"),
    ("finalizer-int", {"finalizers": [1]}, "metadata.finalizers.0"),
    ("orphan-foreground", {"finalizers": ["orphan", "foregroundDeletion"]}, "metadata.finalizers"),
    ("finalizers-string", {"finalizers": "a"}, "metadata.finalizers"),
    # Refused on the object's metadata as a whole; the message names the field.
    ("unknown-field", {"owner": "me"}, "metadata"),
    ("snake-case-field", {"creation_timestamp": "x"}, "metadata"),
    ("uid-int", {"uid": 5}, "metadata"),
    ("hub-fields", {"uid": "u", "resourceVersion": "1", "managedFields": [{}]}, None),
    # ownerReferences, as ValidateOwnerReferences and the strict decoder read them.
    ("owner-ok", {"ownerReferences": [OWNER | {"controller": True}]}, None),
    ("owner-core", {"ownerReferences": [OWNER | {"apiVersion": "v1"}]}, None),
    ("owner-nulls", {"ownerReferences": [OWNER | {"blockOwnerDeletion": None}]}, None),
    ("owner-garbage", {"ownerReferences": [{"foo": 1}]}, "metadata"),
    ("owner-unknown-field", {"ownerReferences": [OWNER | {"foo": 1}]}, "metadata"),
    ("owner-scalar", {"ownerReferences": ["me"]}, "metadata"),
    ("owner-no-uid", {"ownerReferences": [_without(OWNER, "uid")]}, "metadata"),
    ("owner-no-name", {"ownerReferences": [OWNER | {"name": ""}]}, "metadata"),
    ("owner-no-kind", {"ownerReferences": [_without(OWNER, "kind")]}, "metadata"),
    ("owner-no-version", {"ownerReferences": [OWNER | {"apiVersion": "apps/"}]}, "metadata"),
    ("owner-bad-version", {"ownerReferences": [OWNER | {"apiVersion": "a/b/c"}]}, "metadata"),
    ("owner-name-number", {"ownerReferences": [OWNER | {"name": 1}]}, "metadata"),
    ("owner-controller-text", {"ownerReferences": [OWNER | {"controller": "yes"}]}, "metadata"),
    (
        "owner-event",
        {"ownerReferences": [OWNER | {"apiVersion": "v1", "kind": "Event"}]},
        "metadata",
    ),
    (
        "owner-two-controllers",
        {
            "ownerReferences": [
                OWNER | {"controller": True},
                OWNER | {"name": "b", "uid": "u2", "controller": True},
            ]
        },
        "metadata",
    ),
    ("namespace-64", {"namespace": LONG_NAME + "a"}, "metadata.namespace"),
    ("namespace-dot", {"namespace": "a.b"}, "metadata.namespace"),
]


@pytest.mark.parametrize(
    ("fields", "field"), [c[1:] for c in METADATA_CASES], ids=[c[0] for c in METADATA_CASES]
)
def test_metadata_is_validated_as_the_api_server_does(
    fields: dict[str, Any], field: str | None
) -> None:
    doc = manifest()
    doc["metadata"].update(copy.deepcopy(fields))
    errors = _errors(doc)
    if field is None:
        assert errors == []
    else:
        assert errors and all(loc == field for loc, _ in errors), errors
        # Nothing the file wrote reaches the message whole.
        assert all(len(msg) < 1000 and "\x1b" not in msg for _, msg in errors)


def test_a_label_refusal_names_the_key() -> None:
    doc = manifest()
    doc["metadata"]["labels"] = {"ok": "x", "Bad.example/a": "y"}
    ((_, msg),) = _errors(doc)
    assert "'Bad.example/a'" in msg


# --- listeners and values that can never work ---------------------------------------------


def _spec_errors(**fields: Any) -> list[tuple[str, str]]:
    return _errors(manifest(**fields))


# (listeners as (port, protocol), accepted)
LISTENER_CASES: list[tuple[list[tuple[int, str]], bool]] = [
    ([(80, "HTTP"), (8080, "HTTP")], True),
    ([(80, "HTTP"), (8443, "TCP")], True),
    ([(80, "HTTP"), (80, "HTTP")], False),
    ([(9000, "TCP"), (9000, "TCP")], False),
    ([(80, "HTTP"), (80, "TCP")], False),
    ([(1, "TCP"), (2, "TCP"), (1, "HTTP")], False),
]


@pytest.mark.parametrize(("listeners", "ok"), LISTENER_CASES)
def test_two_listeners_on_one_port_are_refused(listeners: list[tuple[int, str]], ok: bool) -> None:
    given = [{"name": f"l{i}", "port": p, "protocol": t} for i, (p, t) in enumerate(listeners)]
    errors = _spec_errors(gateway={"listeners": given})
    if ok:
        assert errors == []
    else:
        assert errors == [("spec.gateway.listeners", f"Value error, {LISTENER_PORTS_RULE}")]


# (wire path under spec, value, accepted)
VALUE_CASES: list[tuple[str, str, bool]] = [
    ("secrets.0.key", ".", False),
    ("secrets.0.key", "..", False),
    ("secrets.0.key", "..a", False),
    ("secrets.0.key", ".a", True),
    ("secrets.0.key", "a..", True),
    ("secrets.0.key", "a" * 253, True),
    ("secrets.0.key", "a" * 254, False),
    ("secrets.1.namespace", "a" * 63, True),
    ("secrets.1.namespace", "a" * 64, False),
    ("versions.certManager", "9999999999999999999.0.0", True),
    ("versions.certManager", "18446744073709551616.0.0", False),
    ("versions.certManager", "1.99999999999999999999.0", False),
    ("versions.certManager", "v1.0.99999999999999999999", False),
    ("dynamo.modelExpress", "0.5.0", True),
    ("dynamo.modelExpress", "v0.5.0", False),
    ("dynamo.modelExpress", "v", True),
    ("dynamo.modelExpress", "version-1", True),
]


@pytest.mark.parametrize(("path", "value", "ok"), VALUE_CASES)
def test_values_that_can_never_work_are_refused(path: str, value: str, ok: bool) -> None:
    spec: dict[str, Any] = {
        "secrets": [
            {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"},
            {"type": "GoogleApplicationCredentials", "name": "sa", "key": "k", "namespace": "ns"},
        ]
    }
    node: Any = spec
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    try:
        ServingStackSpec.model_validate(spec)
    except ValidationError as err:
        assert not ok, err
        assert [".".join(str(p) for p in e["loc"]) for e in err.errors()] == [path]
        if path == "dynamo.modelExpress":
            assert "0.5.0, not v0.5.0" in str(err)
        return
    assert ok


# --- documents ---------------------------------------------------------------------------

VALID = """\
apiVersion: infrastructure.modelplane.ai/v1alpha1
kind: ServingStack
metadata:
  name: west
  namespace: null
spec:
  secrets:
  - {type: Kubeconfig, name: kc, key: kubeconfig}
"""


@pytest.mark.parametrize(
    "text",
    [VALID, VALID + "---\n", "---\n" + VALID, VALID + "---\n---\n", "# c\n---\n" + VALID + "...\n"],
    ids=["plain", "trailing-separator", "leading-separator", "two-empty", "comment-and-end"],
)
def test_documents_kubectl_takes_are_taken(tmp_path: Path, text: str) -> None:
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    stack = parse(ServingStack, load_yaml(path), str(path))
    assert stack.metadata.namespace == "default"


def _alias_bomb() -> str:
    # Seven levels of ten aliases each: a few hundred bytes, over 2 million nodes.
    lines = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("b: [" + ", ".join(["*a5"] * 10) + "]")
    return "\n".join(lines) + "\n"


ALIAS_BOMB = _alias_bomb()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (VALID + "---\n" + VALID, "one ServingStack document"),
        (VALID + "# a bell \x07 in a comment\n", "character #x0007"),
        ("# \x1b[2J\n" + VALID, "character #x001b"),
        ("a: " + "[" * 5000 + "]" * 5000, "nested deeper than"),
        (ALIAS_BOMB, "aliases"),
    ],
    ids=["two-documents", "bell-in-comment", "escape-in-comment", "deep", "alias-bomb"],
)
def test_unreadable_documents_are_a_clear_error(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        parse(ServingStack, load_yaml(path), str(path))
    assert str(path) in str(err.value) and words in str(err.value)
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)


@pytest.mark.parametrize("field", ["apiVersion", "kind"])
def test_a_huge_api_version_or_kind_is_not_echoed(field: str) -> None:
    doc = manifest()
    doc[field] = "\x1b[31m" + "x" * 200_000
    with pytest.raises(InputError) as err:
        parse(ServingStack, doc, "stack.yaml")
    assert len(str(err.value)) < 500
    assert "\x1b" not in str(err.value)


def test_the_operator_says_a_client_ca_warning_once_per_change() -> None:
    events: list[tuple[str, str, str]] = []
    warnings = PlanWarnings()

    def report(p: Plan) -> None:
        warnings.report(p, lambda *event: events.append(event))

    leaf = plan(ServingStack.model_validate(_ca_doc(FLEET_A, LEAF)))
    for _ in range(3):  # three resyncs
        report(leaf)
    assert [(t, r) for t, r, _ in events] == [("Warning", "ClientCAWarning")]
    assert "fleet-1" in events[0][2] and "not a CA" in events[0][2]
    report(plan(ServingStack.model_validate(_ca_doc(FLEET_A))))
    report(leaf)  # back: said again
    assert len(events) == 2
