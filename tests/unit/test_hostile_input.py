"""Hostile and careless input: a clear refusal naming the file or field, never a traceback.

``render`` exits 2 with the file and the field in its message; the operator
reports InvalidSpec naming the field; a fetched manifest set holding anything
the catalog does not expect is refused whole. The API server's side of the
same verdicts is tests/integration/test_admission_parity.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from tests.serving import serve_directory
from tests.shared_fixtures import upstream_dir
from typer.testing import CliRunner

from modelplane import pins
from modelplane.actions import apply
from modelplane.actions.apply import ManifestError, fetch_manifests, vet_manifests
from modelplane.api.crd import servingstack_crd
from modelplane.api.grammar import (
    CHART_VERSION,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    HOST_PATH,
    HOSTNAME,
    IMAGE_TAG,
    SECRET_KEY,
)
from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import BY_NAME
from modelplane.catalog.types import CRDServes
from modelplane.cli import inputs
from modelplane.cli.main import app
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler

from .conftest import CA_PEM, manifest

MODELEXPRESS = BY_NAME["modelexpress-crds"]

GAIE = BY_NAME["gaie-crds"]

UPSTREAM = upstream_dir()


def _render(*args: str) -> Any:
    return CliRunner().invoke(app, ["render", *args])


def _refused(result: Any, *needles: str) -> str:
    """A refusal: status 2, nothing on stdout, a one-screen error, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    err = str(result.stderr)
    assert err.startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _stack_file(tmp_path: Path, data: Any = None) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(manifest() if data is None else data))
    return path


# --- files that are not text, or not data ---------------------------------------

GOOD = yaml.safe_dump(manifest())

NOT_TEXT: dict[str, bytes] = {
    "stray-byte": GOOD.replace("west", "we\udcffst").encode("utf-8", "surrogateescape"),
    "utf-16-with-bom": GOOD.encode("utf-16"),
    "utf-16-be-with-bom": b"\xfe\xff" + GOOD.encode("utf-16-be"),
    "random-bytes": bytes(range(256)) * 8,
    "latin-1": GOOD.replace("west", "w\u00e9st").encode("latin-1"),
}
DEEP: dict[str, str] = {
    "flow-lists": "[" * 5000 + "]" * 5000,
    "flow-maps": "{a: " * 3000 + "1" + "}" * 3000,
    "block-maps": "".join(f"{'  ' * i}k:\n" for i in range(2000)) + "  " * 2000 + "v\n",
    "deep-in-spec": GOOD + "  gateway: " + "[" * 4000 + "]" * 4000 + "\n",
}


@pytest.mark.parametrize("name", sorted(NOT_TEXT))
@pytest.mark.parametrize("flag", ["-f", "--observed"])
def test_a_file_that_is_not_utf8_text_is_refused(tmp_path: Path, name: str, flag: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_TEXT[name])
    args = ["-f", str(bad)] if flag == "-f" else ["-f", str(_stack_file(tmp_path)), flag, str(bad)]
    err = _refused(_render(*args), str(bad))
    assert "UTF-16" in err if "utf-16" in name else "not UTF-8 text" in err


def test_a_stray_byte_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_TEXT["stray-byte"])
    line = GOOD[: GOOD.index("west")].count("\n") + 1
    _refused(_render("-f", str(bad)), "byte 0xff", f"(line {line})")


@pytest.mark.parametrize("name", sorted(DEEP))
@pytest.mark.parametrize("flag", ["-f", "--observed"])
def test_yaml_nested_thousands_deep_is_refused(tmp_path: Path, name: str, flag: str) -> None:
    bad = tmp_path / "deep.yaml"
    bad.write_text(DEEP[name])
    args = ["-f", str(bad)] if flag == "-f" else ["-f", str(_stack_file(tmp_path)), flag, str(bad)]
    _refused(_render(*args), str(bad), "nested deeper than")


def test_a_file_larger_than_any_input_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 1024 * 1024)
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * (1024 * 1024) + "\n")
    _refused(_render("-f", str(big)), str(big), "larger than 1 MiB")


def test_a_key_given_twice_is_refused_not_silently_the_last(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(GOOD + "  nvidiaDriverRoot: /\n  nvidiaDriverRoot: /opt/nvidia\n")
    _refused(_render("-f", str(path)), str(path), "'nvidiaDriverRoot' a second time", "line ")
    # A key that overrides one a merge key brings is not a key given twice.
    path.write_text(
        GOOD.replace("spec:\n", "spec:\n  gateway:\n    <<: {className: eg}\n    className: gw\n")
    )
    assert _render("-f", str(path)).exit_code == 0


def test_a_key_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(GOOD + "  1: one\n  true: yes\n")
    _refused(_render("-f", str(path)), "not a string")


def test_a_date_stays_a_string_as_kubectl_sends_it(tmp_path: Path) -> None:
    # Unquoted, PyYAML would make a date of it and the models would refuse a
    # key the API server accepts.
    path = tmp_path / "date.yaml"
    path.write_text(GOOD.replace("key: kubeconfig", "key: 2024-01-01"))
    result = _render("-f", str(path), "-o", "json")
    assert result.exit_code == 0, result.output


def test_unknown_keys_cannot_write_to_the_terminal(tmp_path: Path) -> None:
    path = _stack_file(tmp_path, manifest(**{"\x1b[2Jclear": 1}))
    err = _refused(_render("-f", str(path)))
    assert "\x1b" not in err
    assert "'\\x1b[2Jclear'" in err


def test_a_flood_of_errors_is_cut_short(tmp_path: Path) -> None:
    path = _stack_file(tmp_path, manifest(**{f"field{i}": i for i in range(500)}))
    err = _refused(_render("-f", str(path)), "and 480 more errors")
    assert err.count("\n") < 30


# --- wire names only ---------------------------------------------------------------


def _renamed(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted wire path of the parent, python name) of every field whose wire name differs."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if alias != name:
            yield prefix, name
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _renamed(annotation, f"{prefix}.{alias}".lstrip("."))


RENAMED = sorted(_renamed(ServingStackSpec))


@pytest.mark.parametrize(("parent", "name"), RENAMED, ids=[f"{p}.{n}" for p, n in RENAMED])
def test_a_python_field_name_is_refused_as_the_api_server_does(
    tmp_path: Path, parent: str, name: str
) -> None:
    spec: dict[str, Any] = {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}]}
    node = spec
    for part in filter(None, parent.split(".")):
        node = node.setdefault(part, {})
    field = (
        ServingStackSpec.model_fields[name] if not parent else _model_at(parent).model_fields[name]
    )
    node[name] = copy.deepcopy(field.get_default(call_default_factory=True))
    with pytest.raises(ValidationError):
        ServingStackSpec.model_validate(spec)
    path = _stack_file(tmp_path, manifest(**{k: v for k, v in spec.items() if k != "secrets"}))
    wire = f"spec.{parent}.{name}".replace("..", ".")
    _refused(_render("-f", str(path)), f"{wire}: unknown field; the field is written {field.alias}")


def _model_at(dotted: str) -> type[BaseModel]:
    model: type[BaseModel] = ServingStackSpec
    for part in dotted.split("."):
        field = next(f for n, f in model.model_fields.items() if (f.alias or n) == part)
        assert isinstance(field.annotation, type)
        model = field.annotation
    return model


# --- values as the API server reads them -----------------------------------------


def test_a_null_is_an_absent_field_as_the_api_server_reads_it() -> None:
    spec = ServingStackSpec.model_validate(
        {
            "secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k", "namespace": None}],
            "nvidiaDriverRoot": None,
            "gateway": {"className": None, "listeners": None},
            "versions": None,
        }
    )
    assert spec.nvidia_driver_root == pins.NVIDIA_DRIVER_ROOT
    assert spec.gateway.class_name == pins.GATEWAY_CLASS_NAME
    assert spec.gateway.listeners == []
    assert spec.versions.cert_manager == BY_NAME["cert-manager"].version
    with pytest.raises(ValidationError):
        ServingStackSpec.model_validate({"secrets": None})


@pytest.mark.parametrize(
    ("port", "valid"), [(80, True), (80.0, True), ("80", False), (True, False), (80.5, False)]
)
def test_a_port_is_an_integer_as_json_writes_one(port: Any, valid: bool) -> None:
    spec = _spec_with_port(port)
    if valid:
        assert ServingStackSpec.model_validate(spec).gateway.listeners[0].port == 80
    else:
        with pytest.raises(ValidationError):
            ServingStackSpec.model_validate(spec)


def _spec_with_port(port: Any) -> dict[str, Any]:
    return {
        "secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}],
        "gateway": {"listeners": [{"name": "web", "port": port, "protocol": "HTTP"}]},
    }


# --- strings that reach a URL, an image, a helm argument or the target -----------

VERSION_FIELDS = [
    "versions.certManager",
    "versions.envoyGateway",
    "versions.nodeFeatureDiscovery",
    "versions.nvidiaDraDriver",
    "versions.prometheus",
    "versions.trustManager",
    "standard.leaderWorkerSet",
    "dynamo.grove",
    "dynamo.kaiScheduler",
]
HOSTILE_STRINGS = [
    "x/../../../other/repo/main/a?",
    "../..",
    "a?b",
    "a#b",
    "a%2f..",
    "1.2.3\n",
    "1.2.3 --set x=y",
    "--post-renderer=/bin/sh",
    "v1.2.3;rm",
    "\x1b[31m1.2.3",
    "1.2.3/../x",
]

# (wire path, valid values, invalid values)
GRAMMARS: list[tuple[str, list[str], list[str]]] = [
    *(
        (
            path,
            ["1.2.3", "v1.2.3", "v0.1.0-alpha.12-rc2", "0.19.0", "84.4.0", "1.0.0+build.5"],
            [
                "v1",
                "1.2",
                "01.2.3",
                "1.2.3-",
                "1.2.3-01",
                "latest",
                "V1.2.3",
                # Beyond what Helm's semver parser reads (uint64).
                "18446744073709551616.0.0",
                *HOSTILE_STRINGS,
            ],
        )
        for path in VERSION_FIELDS
    ),
    (
        "dynamo.modelExpress",
        ["0.4.1", "latest", "_x", "A-1.b_2", "v", "vx"],
        # The CRDs' URL adds the "v": v0.5.0 would fetch .../vv0.5.0/...
        [".x", "-x", "a:b", "a@sha256", "v0.5.0", "v1", *HOSTILE_STRINGS],
    ),
    (
        "nvidiaDriverRoot",
        ["/", "/home/kubernetes/bin/nvidia", "/run/nvidia/driver", "/opt/.nvidia", "/a...b"],
        ["", "//", "/a//b", "/a/", "a/b", "/./a", "/a/..", "/a/../b", "/...", "/a b", "/a\n"],
    ),
    (
        "gateway.hostname",
        ["west.example.com", "gateway", "a-1.b-2.example", "x" * 63 + ".com"],
        [
            "West.example.com",
            "*.example.com",
            "10.0.0.1",
            "example.com.",
            ".example.com",
            "-a.com",
            "a-.com",
            "a_b.com",
            "host:443",
            "[::1]",
            "x" * 64 + ".com",
            "a.123",
        ],
    ),
    (
        "gateway.className",
        ["envoy", "eg", "my.class-1"],
        ["Envoy", "-envoy", "envoy-", "a_b", "a/b", "a..b"],
    ),
    (
        "gateway.listeners.0.name",
        ["http", "web-1", "a.b"],
        ["HTTP", "web_1", "-web", "web-", "a b"],
    ),
    (
        "gateway.clientCAs.0.name",
        ["fleet", "fleet-a.b"],
        ["Fleet", "fleet/a", "../fleet", "fleet a"],
    ),
    ("secrets.0.name", ["kc", "a.b-c"], ["x/../../../kube-system/secrets/y", "KC", ""]),
    (
        "secrets.0.key",
        ["kubeconfig", "key.json", "a_B-1.x", ".a", "a.."],
        ["a/b", "a b", "", ".", "..", "..a"],
    ),
    ("secrets.1.namespace", ["identities", "a" * 63], ["a.b", "A", "../kube-system", "", "a" * 64]),
    (
        "claimWaitTimeout",
        ["10m", "0s", "1h30m", "2h", "90s", "1h0m5s", "9999h99999m9999999s"],
        # Go's ParseDuration reads these; the field takes whole h, m and s only, in order.
        ["", "10", "1.5h", "10ms", "1d", "30s1m", "-1m", "1m1m", "10 m", "1H", "10m\n"],
    ),
]


def _base() -> dict[str, Any]:
    return {
        "secrets": [
            {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"},
            {"type": "GoogleApplicationCredentials", "name": "sa", "key": "k", "namespace": "ns"},
        ],
        "gateway": {
            "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
            "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
        },
    }


def _with(path: str, value: Any) -> dict[str, Any]:
    spec = _base()
    node: Any = spec
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[parts[-1]] = value
    return spec


def _paths(spec: dict[str, Any]) -> list[str]:
    try:
        ServingStackSpec.model_validate(spec)
    except ValidationError as err:
        return [".".join(str(p) for p in e["loc"]) for e in err.errors()]
    return []


CASES = [(path, v, True) for path, ok, _ in GRAMMARS for v in ok] + [
    (path, v, False) for path, _, bad in GRAMMARS for v in bad
]


@pytest.mark.parametrize(("path", "value", "valid"), CASES)
def test_grammar(path: str, value: str, valid: bool) -> None:
    # The length limits stay what they were; a value past one is refused for that.
    assert _paths(_with(path, value)) == ([] if valid else [path])


def test_every_pin_is_a_chart_version() -> None:
    for name in dir(pins):
        value = getattr(pins, name)
        if name.isupper() and isinstance(value, str) and value[:1] in "v0123456789":
            if name == "MODEL_EXPRESS":
                assert IMAGE_TAG.matches(value), name
            else:
                assert CHART_VERSION.matches(value), (name, value)


def test_model_express_cannot_steer_the_manifest_url() -> None:
    url = MODELEXPRESS.manifests.url("x/../../../other/repo/main/a?")  # type: ignore[union-attr]
    assert "other/repo" in url  # what the spec field could do before it had a grammar
    assert _paths(_with("dynamo.modelExpress", "x/../../../other/repo/main/a?")) == [
        "dynamo.modelExpress"
    ]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.gateway.hostname", "10.0.0.1"),
        ("spec.nvidiaDriverRoot", "//"),
        ("spec.dynamo.modelExpress", "x/../../../other/repo/main/a?"),
        ("spec.gateway.listeners.0.name", "Web"),
        ("spec.gateway.className", "Envoy"),
    ],
)
def test_render_names_the_field_and_what_it_must_be(tmp_path: Path, path: str, value: str) -> None:
    spec = _with(path.removeprefix("spec."), value)
    data = {**manifest(), "spec": spec}
    err = _refused(_render("-f", str(_stack_file(tmp_path, data))), f"\n{path}: must be ")
    assert repr(value) in err


def test_the_operator_names_the_field_in_invalid_spec() -> None:
    # The spec is refused before the hub or a target is reached.
    reconciler = StackReconciler(
        hub=None,  # type: ignore[arg-type]
        helm=None,  # type: ignore[arg-type]
        options=OperatorOptions(),
        emit=lambda *_: None,
    )
    body = {**manifest(), "spec": _with("gateway.hostname", "10.0.0.1")}
    outcome = asyncio.run(reconciler.reconcile(body))
    assert outcome.blocked_reason == "InvalidSpec"
    assert outcome.blocked_message is not None
    assert outcome.blocked_message.startswith("spec.gateway.hostname: must be a lowercase DNS")


def _schema_at(path: str) -> dict[str, Any]:
    node: dict[str, Any] = servingstack_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = node["properties"]["spec"]
    for part in path.split("."):
        node = node["items"] if part.isdigit() else node["properties"][part]
    return node


GRAMMAR_OF = {
    "dynamo.modelExpress": IMAGE_TAG,
    "nvidiaDriverRoot": HOST_PATH,
    "claimWaitTimeout": DURATION,
    "gateway.hostname": HOSTNAME,
    "gateway.className": DNS_SUBDOMAIN,
    "gateway.listeners.0.name": DNS_SUBDOMAIN,
    "gateway.clientCAs.0.name": DNS_SUBDOMAIN,
    "secrets.0.name": DNS_SUBDOMAIN,
    "secrets.0.key": SECRET_KEY,
    "secrets.0.namespace": DNS_LABEL,
    **dict.fromkeys(VERSION_FIELDS, CHART_VERSION),
}


@pytest.mark.parametrize("path", sorted(GRAMMAR_OF))
def test_the_crd_carries_the_same_pattern(path: str) -> None:
    node = _schema_at(path)
    assert node["pattern"] == GRAMMAR_OF[path].pattern
    assert node["pattern"].startswith("^") and node["pattern"].endswith("$")


@pytest.mark.parametrize("grammar", sorted({g.pattern for g in GRAMMAR_OF.values()}))
def test_patterns_stay_in_the_subset_re2_and_ecma_share(grammar: str) -> None:
    # Python-only or ECMA-only syntax the API server's Go regexp would refuse
    # or read differently; the integration parity test checks the rest.
    for construct in ("(?=", "(?!", "(?<", "\\d", "\\w", "\\s", "\\b", "\\Z", "\\A"):
        assert construct not in grammar


# --- fetched manifests ----------------------------------------------------------------


def _crd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
    }


def _expected(component: str) -> tuple[list[str], tuple[str, ...]]:
    c = BY_NAME[component]
    assert c.manifests is not None
    return [r.crd for r in c.requirements if isinstance(r, CRDServes)], c.manifests.other_crds


GAIE_REQUIRED, GAIE_OTHERS = _expected(GAIE.name)
URL = "https://user:s3cret@mirror.example/gaie/v1.0.1/manifests.yaml"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planted"}},
            "ConfigMap planted",
        ),
        (
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "own-the-cluster"},
            },
            "ClusterRoleBinding own-the-cluster",
        ),
        (_crd("widgets.example.com"), "CustomResourceDefinition widgets.example.com"),
        (
            {**_crd(GAIE_REQUIRED[0]), "apiVersion": "apiextensions.k8s.io/v1beta1"},
            f"CustomResourceDefinition {GAIE_REQUIRED[0]}",
        ),
        ({"kind": "Secret\x1b[2J", "metadata": {"name": ["x"]}}, "Secret\\u001b[2J (no name)"),
        ({"metadata": None}, "(no kind) (no name)"),
    ],
)
def test_anything_else_refuses_the_whole_set(extra: dict[str, Any], named: str) -> None:
    objects = [_crd(n) for n in GAIE_REQUIRED] + [extra]
    with pytest.raises(ManifestError) as refused:
        vet_manifests(objects, GAIE_REQUIRED, GAIE_OTHERS, URL)
    message = str(refused.value)
    assert named in message
    assert "none of it was applied" in message
    assert "s3cret" not in message and "mirror.example/gaie" in message
    assert isinstance(refused.value, ValueError)  # what the reconciler's guard catches


def test_the_set_must_hold_the_required_crd() -> None:
    every = [_crd(n) for n in GAIE_REQUIRED + list(GAIE_OTHERS)]
    assert vet_manifests(every, GAIE_REQUIRED, GAIE_OTHERS, URL) == every
    with pytest.raises(ManifestError, match=f"lacks CustomResourceDefinition {GAIE_REQUIRED[0]}"):
        vet_manifests([_crd(GAIE_OTHERS[0])], GAIE_REQUIRED, GAIE_OTHERS, URL)


@pytest.mark.parametrize(
    ("component", "files"),
    [
        (GAIE.name, sorted((UPSTREAM / "gateway-api-inference-extension").glob("*.yaml"))),
        (MODELEXPRESS.name, [UPSTREAM / "modelexpress" / "crds.yaml"]),
    ],
)
def test_the_real_upstream_crds_pass(component: str, files: list[Path]) -> None:
    if not files or not files[0].exists():
        pytest.skip(f"no upstream fixtures at {UPSTREAM}")
    objects = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    required, others = _expected(component)
    assert vet_manifests(objects, required, others, "fixture") == objects
    # Every CRD the catalog expects is one the upstream files hold.
    assert {o["metadata"]["name"] for o in objects} == set(required) | set(others)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_directory(tmp_path) as url:
        yield url, tmp_path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested deeper than"),
        (b"\xff\xfe" + "kind: x".encode("utf-16-le"), "not UTF-8"),
        (b"---\n---\nkind: A\n---\njust a string\n", "document 3 is a str"),
    ],
)
def test_fetched_manifests_that_are_not_objects_are_refused(
    served: tuple[str, Path], content: bytes, message: str
) -> None:
    url, directory = served
    (directory / "m.yaml").write_bytes(content)
    with pytest.raises(ManifestError, match=message):
        asyncio.run(fetch_manifests(f"{url}/m.yaml"))


def test_fetched_manifests_are_bounded(
    served: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply, "MAX_MANIFEST_BYTES", 1024 * 1024)
    url, directory = served
    (directory / "m.yaml").write_bytes(b"#" * (2 * 1024 * 1024))
    with pytest.raises(ManifestError, match="more than 1 MiB"):
        asyncio.run(fetch_manifests(f"{url}/m.yaml"))


def test_fetched_manifests_are_objects(served: tuple[str, Path]) -> None:
    url, directory = served
    docs = [_crd("a.example.com"), None, _crd("b.example.com")]
    (directory / "m.yaml").write_text(yaml.safe_dump_all(docs))
    # An empty document between two "---" is nothing; a list is not an object.
    assert asyncio.run(fetch_manifests(f"{url}/m.yaml")) == [docs[0], docs[2]]
    (directory / "m.yaml").write_text(yaml.safe_dump_all([*docs, ["a", "b"]]))
    with pytest.raises(ManifestError, match="document 4 is a list"):
        asyncio.run(fetch_manifests(f"{url}/m.yaml"))
