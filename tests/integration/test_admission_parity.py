"""``render`` and the hub's API server give every document the same verdict.

A corpus of ServingStacks (valid ones, each rule's violations, snake_case
field names, hostile strings in every field that has a grammar, values of the
wrong type, nulls) goes through the models exactly as ``modelplane render``
reads a file, and through a server-side dry run of a create against a real
kube-apiserver carrying the CRD ``modelplane crds`` prints, with
``fieldValidation=Strict`` as kubectl sends it. Each verdict must agree; a
refusal names the same field on both sides; an acceptance stores the spec the
models would (defaults included).

Where the server cannot judge (what is inside a PEM block), the table says
what it gives and the models' verdict is the table's: those cases are
counted apart. The server's verdicts are taken in one batch, a few
connections at a time, before the comparisons.

At the end, an operator-level check: a fetched manifest set that holds more
than the catalog expects fails its component without a byte of it applied.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from tests.integration.hubs import drop_empty_lists
from tests.serving import serve_directory
from tests.testenv import TestEnv
from tests.unit.test_admission import (
    CLIENT_CA_CASES,
    LISTENER_CASES,
    METADATA_CASES,
    VALUE_CASES,
)
from tests.unit.test_hostile_input import GRAMMARS, HOSTILE_STRINGS, RENAMED
from typer.testing import CliRunner

from modelplane.actions.helm import Helm
from modelplane.api.crd import servingstack_crd
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL, ServingStack
from modelplane.api.spec import (
    CLIENT_CA_NAMES_RULE,
    IDENTITY_RULE,
    KUBECONFIG_RULE,
    LISTENER_NAMES_RULE,
    LISTENER_PORTS_RULE,
    NAMESPACE_RULE,
    private_key_message,
)
from modelplane.catalog.components import BY_NAME
from modelplane.cli.inputs import InputError, parse
from modelplane.cli.main import app
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.status import desired_status

MODELEXPRESS = BY_NAME["modelexpress-crds"]

NAMESPACE = "admission-parity"
CRD_NAME = f"{PLURAL}.{API_GROUP}"
COLLECTION = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NAMESPACE}/{PLURAL}"
# A real CA certificate: the models parse every clientCAs entry.
PEM = (Path(__file__).parents[1] / "fixtures" / "client-cas" / "fleet-a.pem").read_text()


# --- the corpus ---------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    id: str
    body: dict[str, Any]
    # The field a refusal must name, in the models' dotted form; None when
    # the document is valid, or when the refusal is of the whole object.
    field: str | None = None
    message: str | None = None  # a rule's message both sides must give
    # What the server gives where it cannot judge as the models do (what is
    # inside a PEM block): its verdict, from the table.
    server_accepts: bool | None = None
    # A text the server's refusal holds, where it names no field (413).
    server_says: str | None = None


def _spec(**fields: Any) -> dict[str, Any]:
    return {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}], **fields}


def _full() -> dict[str, Any]:
    return {
        "secrets": [
            {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"},
            {"type": "GoogleApplicationCredentials", "name": "sa", "key": "k", "namespace": "ids"},
        ],
        "stack": "Dynamo",
        "components": "Provided",
        "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
        "versions": {"certManager": "v1.19.0", "prometheus": "84.5.0"},
        "standard": {"leaderWorkerSet": "v0.8.0"},
        "dynamo": {"grove": "v0.1.0-alpha.13", "kaiScheduler": "v0.16.8", "modelExpress": "0.5.0"},
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


def _body(spec: Any, **top: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": "parity", "namespace": NAMESPACE},
        "spec": spec,
    }
    body.update(top)
    return body


def _set(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    node: Any = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _listeners(*names: str, port: Any = 80) -> dict[str, Any]:
    return {"listeners": [{"name": n, "port": port, "protocol": "HTTP"} for n in names]}


def _cas(*names: str) -> dict[str, Any]:
    return {"clientCAs": [{"name": n, "certificate": PEM} for n in names]}


KC = {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}
GCP = {"type": "GoogleApplicationCredentials", "name": "sa", "key": "k"}
AWS = {"type": "AWSWebIdentityCredentials", "name": "aws", "key": "t"}

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "servingstack.yaml"


def _corpus() -> list[Doc]:
    docs = [
        Doc("minimal", _body(_spec())),
        Doc("full", _body(_full())),
        Doc("example", _body(yaml.safe_load(EXAMPLE.read_text())["spec"])),
        Doc("dynamo-defaults", _body(_spec(stack="Dynamo"))),
        Doc("gke-root", _body(_spec(nvidiaDriverRoot="/home/kubernetes/bin/nvidia"))),
        # Each rule's violations.
        Doc("no-kubeconfig", _body({"secrets": [GCP]}), "spec.secrets", KUBECONFIG_RULE),
        Doc("two-kubeconfigs", _body({"secrets": [KC, KC]}), "spec.secrets", KUBECONFIG_RULE),
        Doc("two-identities", _body({"secrets": [KC, GCP, AWS]}), "spec.secrets", IDENTITY_RULE),
        Doc(
            "kubeconfig-namespace",
            _body({"secrets": [{**KC, "namespace": "x"}]}),
            "spec.secrets.0",
            NAMESPACE_RULE,
        ),
        Doc(
            "listener-names-twice",
            _body(_spec(gateway=_listeners("web", "web"))),
            "spec.gateway.listeners",
            LISTENER_NAMES_RULE,
        ),
        Doc(
            "client-ca-names-twice",
            _body(_spec(gateway=_cas("fleet", "fleet"))),
            "spec.gateway.clientCAs",
            CLIENT_CA_NAMES_RULE,
        ),
        Doc("secrets-empty", _body({"secrets": []}), "spec.secrets"),
        Doc("secrets-missing", _body({"stack": "Standard"}), "spec.secrets"),
        Doc("nine-secrets", _body({"secrets": [KC] + [GCP] * 8}), "spec.secrets"),
        Doc(
            "nine-listeners",
            _body(_spec(gateway=_listeners(*"abcdefghi"))),
            "spec.gateway.listeners",
        ),
        Doc(
            "33-client-cas",
            _body(_spec(gateway=_cas(*(f"f{i}" for i in range(33))))),
            "spec.gateway.clientCAs",
        ),
        Doc("stack-enum", _body(_spec(stack="Kserve")), "spec.stack"),
        Doc("components-enum", _body(_spec(components="Partial")), "spec.components"),
        Doc("secret-type", _body({"secrets": [{**KC, "type": "Token"}]}), "spec.secrets.0.type"),
        Doc(
            "port-0", _body(_spec(gateway=_listeners("l", port=0))), "spec.gateway.listeners.0.port"
        ),
        Doc(
            "port-65536",
            _body(_spec(gateway=_listeners("l", port=65536))),
            "spec.gateway.listeners.0.port",
        ),
        Doc(
            "pin-33",
            _body(_spec(versions={"certManager": "1.0.0+" + "a" * 27})),
            "spec.versions.certManager",
        ),
        Doc(
            "certificate-16385",
            _body(_spec(gateway={"clientCAs": [{"name": "f", "certificate": "A" * 16385}]})),
            "spec.gateway.clientCAs.0.certificate",
        ),
        Doc(
            "hostname-254",
            _body(_spec(gateway={"hostname": ("a" * 62 + ".") * 4 + "ab"})),
            "spec.gateway.hostname",
        ),
        Doc("root-513", _body(_spec(nvidiaDriverRoot="/" + "a" * 512)), "spec.nvidiaDriverRoot"),
        # Types the API server refuses and a lax model would coerce.
        Doc(
            "port-string",
            _body(_spec(gateway=_listeners("l", port="80"))),
            "spec.gateway.listeners.0.port",
        ),
        Doc(
            "port-bool",
            _body(_spec(gateway=_listeners("l", port=True))),
            "spec.gateway.listeners.0.port",
        ),
        Doc(
            "port-fraction",
            _body(_spec(gateway=_listeners("l", port=80.5))),
            "spec.gateway.listeners.0.port",
        ),
        Doc("pin-number", _body(_spec(versions={"certManager": 1.5})), "spec.versions.certManager"),
        Doc("hostname-list", _body(_spec(gateway={"hostname": ["a"]})), "spec.gateway.hostname"),
        Doc("gateway-string", _body(_spec(gateway="envoy")), "spec.gateway"),
        Doc("spec-list", _body([]), "spec"),
        Doc("no-spec", {k: v for k, v in _body(_spec()).items() if k != "spec"}, "spec"),
        # kubectl sends "port: 80.0" as 80 (sigs.k8s.io/yaml turns YAML into
        # JSON with Go's encoder, which writes float64 80 as 80), and render
        # takes it as 80. Only a client writing the JSON 80.0 itself meets the
        # CEL port rule's "expected int, got float64": recorded, not hidden.
        Doc(
            "port-integral-float",
            _body(_set(_full(), "gateway.listeners.0.port", 80.0)),
            server_accepts=False,
        ),
        Doc(
            "port-huge",
            _body(_set(_full(), "gateway.listeners.0.port", 10**30)),
            "spec.gateway.listeners.0.port",
        ),
        # A null is an absent field to the API server (it prunes it before
        # defaulting), so a default fills it; where the field is required,
        # both refuse.
        *(
            Doc(f"null-{path}", _body(_set(_full(), path, None)))
            for path in (
                "gateway.hostname",
                "gateway.className",
                "gateway.listeners",
                "gateway.clientCAs",
                "gateway",
                "versions",
                "versions.certManager",
                "dynamo.modelExpress",
                "nvidiaDriverRoot",
                "stack",
                "secrets.1.namespace",
            )
        ),
        Doc("null-secrets", _body({"secrets": None}), "spec.secrets"),
        Doc(
            "null-secret-name", _body(_set(_spec(), "secrets.0.name", None)), "spec.secrets.0.name"
        ),
        Doc(
            "null-listener", _body(_spec(gateway={"listeners": [None]})), "spec.gateway.listeners.0"
        ),
        Doc("null-spec", _body(None), "spec"),
        # Unknown fields, with kubectl's Strict field validation.
        Doc("unknown-field", _body(_spec(replicas=3)), "spec.replicas"),
        Doc("unknown-nested", _body(_spec(gateway={"tls": {}})), "spec.gateway.tls"),
        Doc("unknown-top-level", _body(_spec(), extra=1), "extra"),
        # Object names the API server checks for every custom resource.
        Doc(
            "metadata-name-upper",
            {**_body(_spec()), "metadata": {"name": "West", "namespace": NAMESPACE}},
            "metadata.name",
        ),
        Doc(
            "metadata-name-underscore",
            {**_body(_spec()), "metadata": {"name": "a.b_c", "namespace": NAMESPACE}},
            "metadata.name",
        ),
        Doc(
            "metadata-name-253",
            {**_body(_spec()), "metadata": {"name": "a" * 253, "namespace": NAMESPACE}},
        ),
    ]
    # Python field names, which only the wire names stand for.
    for parent, name in RENAMED:
        value = {"nvidia_driver_root": "/x", "class_name": "eg", "client_cas": []}.get(
            name, "1.0.0"
        )
        spec = _set(_spec(), f"{parent}.{name}".lstrip("."), value)
        docs.append(Doc(f"snake-{name}", _body(spec), f"spec.{parent}.{name}".replace("..", ".")))
    # Every grammar, its valid values and its hostile ones.
    base = _full()
    for path, good, bad in GRAMMARS:
        for i, value in enumerate(good):
            docs.append(Doc(f"{path}-ok-{i}", _body(_set(base, path, value))))
        for i, value in enumerate(bad):
            docs.append(Doc(f"{path}-bad-{i}", _body(_set(base, path, value)), f"spec.{path}"))
    # Hostile strings in a certificate: only PEM CERTIFICATE blocks pass.
    for i, value in enumerate([*HOSTILE_STRINGS, "é\u2028\0"]):
        docs.append(
            Doc(
                f"certificate-hostile-{i}",
                _body(_set(base, "gateway.clientCAs.0.certificate", value)),
                "spec.gateway.clientCAs.0.certificate",
            )
        )
    docs += _issue17_docs()
    return docs


def _meta(fields: dict[str, Any]) -> dict[str, Any]:
    body = _body(_spec())
    body["metadata"] = {**body["metadata"], **copy.deepcopy(fields)}
    return body


def _issue17_docs() -> list[Doc]:
    """Issue 17's cases and their near misses: clientCAs, listeners, values, metadata."""
    docs: list[Doc] = []
    for name, certificates, refused, _ in CLIENT_CA_CASES:
        cas = [{"name": f"fleet-{i}", "certificate": c} for i, c in enumerate(certificates)]
        body = _body(_spec(gateway={"hostname": "east.example.com", "clientCAs": cas}))
        if refused is None:
            docs.append(Doc(f"ca-{name}", body))
            continue
        entry = cas[refused]
        key = "PRIVATE KEY" in entry["certificate"]
        # The pattern sees the PEM's shape only: a block of base64 that is
        # no certificate passes it, and the models refuse it.
        shape_ok = "PRIVATE KEY" not in entry["certificate"] and bool(
            re.fullmatch(
                r"([ \t\r\n]*-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=]+\r?\n)+"
                r"-----END CERTIFICATE-----)+[ \t\r\n]*",
                entry["certificate"],
            )
        )
        docs.append(
            Doc(
                f"ca-{name}",
                body,
                f"spec.gateway.clientCAs.{refused}.certificate",
                private_key_message(entry["name"]) if key else None,
                server_accepts=True if shape_ok else None,
            )
        )
    for i, (listeners, ok) in enumerate(LISTENER_CASES):
        given = [{"name": f"l{j}", "port": p, "protocol": t} for j, (p, t) in enumerate(listeners)]
        body = _body(_spec(gateway={"listeners": given}))
        if ok:
            docs.append(Doc(f"listeners-{i}", body))
        else:
            docs.append(Doc(f"listeners-{i}", body, "spec.gateway.listeners", LISTENER_PORTS_RULE))
    for i, (path, value, ok) in enumerate(VALUE_CASES):
        body = _body(_set(_full(), path, value))
        docs.append(Doc(f"value-{path}-{i}", body, None if ok else f"spec.{path}"))
    for name, fields, field in METADATA_CASES:
        if "namespace" in fields and fields["namespace"] is not None:
            # A namespace other than the request's is refused before any
            # validation, for a reason of its own; the unit table has these.
            continue
        says = "too large" if name == "annotations-10m" else None
        if name.endswith(("-int", "-bool", "-map", "-list", "-string")):
            # Refused while decoding, naming the Go field: ObjectMeta.labels.
            says = "ObjectMeta." + next(iter(fields))
        if name.startswith("owner-"):
            # Whether refused decoding, strictly or by validation: named so.
            says = "ownerReferences"
        docs.append(Doc(f"metadata-{name}", _meta(fields), field, server_says=says))
    # Hostile strings where metadata takes names: every one is refused.
    for i, value in enumerate(HOSTILE_STRINGS):
        for where, fields in (
            ("labels", {"labels": {value: "x"}}),
            ("labels", {"labels": {"a": value}}),
            ("annotations", {"annotations": {value: "x"}}),
            ("finalizers", {"finalizers": [value]}),
        ):
            docs.append(
                Doc(f"metadata-hostile-{where}-{i}-{len(docs)}", _meta(fields), f"metadata.{where}")
            )
    return docs


CORPUS = _corpus()


# --- the two verdicts -----------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str
    spec: Any = None  # what is stored, when accepted


def models_verdict(body: dict[str, Any]) -> Verdict:
    """What ``modelplane render`` says of the document."""
    try:
        stack = parse(ServingStack, copy.deepcopy(body), "corpus")
    except InputError as err:
        return Verdict(False, str(err))
    dumped = stack.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    return Verdict(True, "", drop_empty_lists(dumped))


def server_verdict(http: httpx2.Client, body: dict[str, Any]) -> Verdict:
    """What the hub's API server says of a create, without storing anything."""
    resp = http.post(COLLECTION, params={"dryRun": "All", "fieldValidation": "Strict"}, json=body)
    if resp.status_code == 201:
        return Verdict(True, "", resp.json()["spec"])
    # 400: refused while decoding (an unknown field); 422: refused by the
    # schema; 413: a body over the API server's 3 MiB.
    assert resp.status_code in (400, 413, 422), resp.text[:2000]
    if resp.status_code == 413:
        return Verdict(False, "request entity too large")
    return Verdict(False, str(resp.json().get("message", "")))


def server_verdicts(env: TestEnv, docs: list[Doc]) -> dict[str, Verdict]:
    """Every document's server verdict: four connections, each a share of the corpus."""

    def share(part: list[Doc]) -> list[tuple[str, Verdict]]:
        with env.http_client(timeout=30) as http:
            return [(d.id, server_verdict(http, d.body)) for d in part]

    parts = [docs[i::4] for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        return {k: v for part in pool.map(share, parts) for k, v in part}


def _server_path(field: str) -> str:
    """spec.gateway.listeners.0.name -> spec.gateway.listeners[0].name"""
    return re.sub(r"\.(\d+)", r"[\1]", field)


@pytest.fixture(scope="module")
def hub_crd(hub: Client, hub_env: TestEnv) -> TestEnv:
    """The hub with the CRD ``modelplane crds`` prints, and the corpus namespace."""
    result = CliRunner().invoke(app, ["crds"])
    assert result.exit_code == 0, result.output
    (crd,) = list(yaml.safe_load_all(result.stdout))
    # conftest's ``hub`` applied servingstack_crd(): the server judges by
    # what the CLI prints only while the two are the same.
    assert crd == servingstack_crd()
    hub.apply(Namespace.from_dict({"metadata": {"name": NAMESPACE}}))
    return hub_env


@pytest.fixture(scope="module")
def verdicts(hub_crd: TestEnv) -> dict[str, Verdict]:
    return server_verdicts(hub_crd, CORPUS)


def test_the_corpus_covers_every_kind_of_input() -> None:
    ids = {d.id for d in CORPUS}
    assert {"minimal", "full", "snake-nvidia_driver_root", "snake-class_name"} <= ids
    assert {"snake-client_cas", "dynamo.modelExpress-bad-0"} <= ids
    assert any(d.message == KUBECONFIG_RULE for d in CORPUS)
    assert sum(d.field is None for d in CORPUS) >= 20
    assert sum(d.field is not None for d in CORPUS) >= 100
    assert len(CORPUS) >= 500
    assert {"ca-private-key", "ca-not-der", "metadata-annotations-over-256k"} <= ids
    assert {"metadata-label-key-64", "metadata-finalizer-space", "listeners-4"} <= ids


def test_the_counts(verdicts: dict[str, Verdict], capsys: pytest.CaptureFixture[str]) -> None:
    judged = [d for d in CORPUS if d.server_accepts is None]
    table = [d for d in CORPUS if d.server_accepts is not None]
    assert all(verdicts[d.id].accepted == d.server_accepts for d in table)
    accepted = sum(verdicts[d.id].accepted for d in judged)
    with capsys.disabled():
        print(
            f"\nadmission corpus: {len(CORPUS)} documents; {len(judged)} judged by the API "
            f"server ({accepted} accepted, {len(judged) - accepted} refused); {len(table)} "
            "with the server's verdict from the table (PEM contents, a JSON float port)"
        )
    assert len(verdicts) == len(CORPUS)


@pytest.mark.parametrize("doc", CORPUS, ids=[d.id for d in CORPUS])
def test_models_and_api_server_agree(verdicts: dict[str, Verdict], doc: Doc) -> None:
    mine = models_verdict(doc.body)
    theirs = verdicts[doc.id]
    if doc.server_accepts is not None:
        # Beyond what the server can judge: each side gives the table's verdict.
        assert theirs.accepted == doc.server_accepts, theirs.message
        assert mine.accepted == (doc.field is None), mine.message
        if doc.field is not None:
            assert f"\n{doc.field}: " in mine.message, mine.message
        return
    assert mine.accepted == theirs.accepted, (
        f"render {'accepts' if mine.accepted else 'refuses'} and the API server "
        f"{'accepts' if theirs.accepted else 'refuses'}:\nrender: {mine.message}\n"
        f"API server: {theirs.message}"
    )
    assert mine.accepted == (doc.field is None), (mine.message, theirs.message)
    if mine.accepted:
        # The same spec, defaults included, field by field.
        for key in mine.spec:
            assert theirs.spec.get(key) == mine.spec[key], f"spec.{key}"
        assert theirs.spec == mine.spec
        return
    assert doc.field is not None
    assert f"\n{doc.field}: " in mine.message, mine.message
    assert (doc.server_says or _server_path(doc.field)) in theirs.message, theirs.message
    if doc.message is not None:
        assert doc.message in mine.message and doc.message in theirs.message


def test_nothing_was_stored(hub_crd: TestEnv) -> None:
    with hub_crd.http_client() as http:
        items = http.get(COLLECTION).json()["items"]
    assert items == []


# --- fetched manifests, through the operator ------------------------------------------


@pytest.fixture
def manifests_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    with serve_directory(root) as url:
        yield url, root


def _modelexpress_crd(name: str, plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": "modelexpress.nvidia.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _reconcile(
    hub_env: TestEnv, target: TestEnv, base_url: str, testbin: dict[str, Path], tmp: Path
) -> tuple[Any, list[tuple[str, str, str]]]:
    namespace = "manifest-vetting"
    hub = Client(KubeConfig.from_dict(hub_env.kubeconfig), field_manager="admission-parity")
    hub.apply(Namespace.from_dict({"metadata": {"name": namespace}}))
    kubeconfig = yaml.safe_dump(target.kubeconfig)
    hub.apply(
        Secret.from_dict(
            {
                "metadata": {"name": "target", "namespace": namespace},
                "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
            }
        ),
        force=True,
    )
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": "vetted", "namespace": namespace, "generation": 1, "uid": "u-vetted"},
        # Provided: no chart is installed, and the ModelExpress CRDs (the
        # product's own configuration) are still fetched and applied.
        "spec": {
            "secrets": [{"type": "Kubeconfig", "name": "target", "key": "kubeconfig"}],
            "stack": "Dynamo",
            "components": "Provided",
        },
    }
    events: list[tuple[str, str, str]] = []

    async def run() -> Any:
        async with AsyncClient(
            KubeConfig.from_dict(hub_env.kubeconfig), field_manager="admission-parity"
        ) as client:
            reconciler = StackReconciler(
                hub=client,
                helm=Helm(binary=str(testbin["helm"]), home=tmp / "helm-home"),
                options=OperatorOptions(
                    manifests_url_for={MODELEXPRESS.name: base_url},
                    target_timeout_seconds=30,
                ),
                emit=lambda *event: events.append(event),
            )
            return await reconciler.reconcile(body)

    return asyncio.run(run()), events


def test_a_manifest_set_with_an_unexpected_object_fails_its_component(
    hub_env: TestEnv,
    target: TestEnv,
    manifests_server: tuple[str, Path],
    testbin: dict[str, Path],
    tmp_path: Path,
) -> None:
    base_url, root = manifests_server
    assert MODELEXPRESS.manifests is not None
    served = root / MODELEXPRESS.manifests.path.format(version=MODELEXPRESS.version)
    served.parent.mkdir(parents=True)
    planted = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "planted", "namespace": "default"},
        "data": {"x": "y"},
    }
    crd = _modelexpress_crd(
        "modelmetadatas.modelexpress.nvidia.com", "modelmetadatas", "ModelMetadata"
    )
    served.write_text(yaml.safe_dump_all([crd, planted]))

    outcome, events = _reconcile(hub_env, target, base_url, testbin, tmp_path)

    failure = outcome.failures.get(MODELEXPRESS.name, "")
    assert "ConfigMap planted" in failure, outcome.failures
    assert ("Warning", "ActionFailed") in {(t, r) for t, r, _ in events}
    assert any("ConfigMap planted" in message for _, _, message in events)
    status = desired_status(outcome, 1)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ActionFailed")
    assert "ConfigMap planted" in ready["message"]
    component = next(c for c in status["components"] if c["name"] == MODELEXPRESS.name)
    assert component["state"] == "Failed"

    # Not one object of the set reached the target.
    # ``target`` is this test's own: the reconcile applies configuration objects to it.
    on_target = Client(KubeConfig.from_dict(target.kubeconfig))
    for res, name, ns in (
        (ConfigMap, "planted", "default"),
        (CustomResourceDefinition, "modelmetadatas.modelexpress.nvidia.com", None),
    ):
        with pytest.raises(ApiError) as missing:
            on_target.get(res, name, namespace=ns)
        assert missing.value.status.code == 404

    # The same URL serving the expected CRDs applies them (the refusal was not cached).
    served.write_text(
        yaml.safe_dump_all(
            [
                crd,
                _modelexpress_crd(
                    "modelcacheentries.modelexpress.nvidia.com",
                    "modelcacheentries",
                    "ModelCacheEntry",
                ),
            ]
        )
    )
    outcome, _ = _reconcile(hub_env, target, base_url, testbin, tmp_path)
    assert MODELEXPRESS.name not in outcome.failures, outcome.failures
    on_target.get(CustomResourceDefinition, "modelmetadatas.modelexpress.nvidia.com")
    on_target.get(CustomResourceDefinition, "modelcacheentries.modelexpress.nvidia.com")
