"""``modelplane render``: bad input, and the machine-readable outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.cli.main import app

from .conftest import CA_PEM, manifest


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _write(tmp_path: Path, data: Any, name: str = "stack.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _bad(tmp_path: Path, data: Any) -> str:
    result = _run("render", "-f", str(_write(tmp_path, data)))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    return str(result.stderr)


def _with(path: str, value: Any) -> dict[str, Any]:
    data = manifest(
        gateway={"listeners": [{"name": "web", "port": 80, "protocol": "HTTP"}]},
        versions={"certManager": "v1.20.2"},
    )
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


def test_not_yaml(tmp_path: Path) -> None:
    err = _bad(tmp_path, "spec: [unclosed\n  - : :")
    assert "not valid YAML" in err


def test_not_a_mapping(tmp_path: Path) -> None:
    err = _bad(tmp_path, "- just\n- a list\n")
    assert "expected a ServingStack mapping, got list" in err


def test_missing_file(tmp_path: Path) -> None:
    result = _run("render", "-f", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "nope.yaml" in result.stderr


@pytest.mark.parametrize(
    ("path", "value", "field_path"),
    [
        ("spec.colour", "blue", "spec.colour"),
        ("spec.gateway.listeners.0.tls", {}, "spec.gateway.listeners.0.tls"),
        ("spec.gateway.className", "x" * 64, "spec.gateway.className"),
        ("spec.gateway.listeners.0.port", 65536, "spec.gateway.listeners.0.port"),
        ("spec.versions.certManager", "", "spec.versions.certManager"),
        ("spec.nvidiaDriverRoot", "/" * 513, "spec.nvidiaDriverRoot"),
        ("spec.stack", "Turbo", "spec.stack"),
        ("spec.components", "Borrowed", "spec.components"),
        ("spec.gateway.listeners.0.protocol", "UDP", "spec.gateway.listeners.0.protocol"),
        ("spec.secrets.0.type", "Token", "spec.secrets.0.type"),
    ],
)
def test_field_errors_name_the_path(tmp_path: Path, path: str, value: Any, field_path: str) -> None:
    err = _bad(tmp_path, _with(path, value))
    assert f"\n{field_path}: " in err


@pytest.mark.parametrize(
    ("path", "value", "field_path", "message"),
    [
        (
            "spec.secrets",
            [{"type": "GoogleApplicationCredentials", "name": "a", "key": "b"}],
            "spec.secrets",
            "exactly one secrets entry must have type Kubeconfig",
        ),
        (
            "spec.secrets",
            [
                {"type": "Kubeconfig", "name": "a", "key": "b"},
                {"type": "GoogleApplicationCredentials", "name": "a", "key": "b"},
                {"type": "NebiusServiceAccountCredentials", "name": "a", "key": "b"},
            ],
            "spec.secrets",
            "at most one cloud identity",
        ),
        (
            "spec.secrets.0.namespace",
            "elsewhere",
            "spec.secrets.0",
            "namespace may be set only on cloud identity entries",
        ),
        (
            "spec.gateway.listeners",
            [{"name": "a", "port": 80, "protocol": "HTTP"}] * 2,
            "spec.gateway.listeners",
            "listener names must be unique",
        ),
        (
            "spec.gateway.clientCAs",
            [{"name": "a", "certificate": CA_PEM}] * 2,
            "spec.gateway.clientCAs",
            "clientCAs names must be unique",
        ),
    ],
)
def test_rule_errors_name_the_path(
    tmp_path: Path, path: str, value: Any, field_path: str, message: str
) -> None:
    err = _bad(tmp_path, _with(path, value))
    assert f"\n{field_path}: {message}" in err


def test_wrong_kind(tmp_path: Path) -> None:
    err = _bad(tmp_path, {**manifest(), "kind": "InferenceCluster"})
    assert "kind must be ServingStack" in err


def test_bad_observed_file(tmp_path: Path) -> None:
    stack = _write(tmp_path, manifest())
    observed = _write(tmp_path, {"apis": [], "surprise": 1}, "observed.yaml")
    result = _run("render", "-f", str(stack), "--observed", str(observed))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "apis" in result.stderr and "surprise" in result.stderr


def _json(tmp_path: Path, data: dict[str, Any], *extra: str) -> dict[str, Any]:
    result = _run("render", "-f", str(_write(tmp_path, data)), "-o", "json", *extra)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_json_releases_and_objects(tmp_path: Path) -> None:
    doc = _json(
        tmp_path,
        manifest(
            stack="Dynamo",
            gateway={
                "hostname": "a.example",
                "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
            },
        ),
    )
    assert (doc["stack"], doc["components"]) == ("Dynamo", "Managed")
    assert doc["releases"]
    for release in doc["releases"]:
        for key in ("name", "chart", "repository", "version", "namespace", "values"):
            assert key in release, key
        assert release["name"] == f"mp-{release['chart']}"
        assert isinstance(release["values"], dict)
    assert doc["objects"]
    for obj in doc["objects"]:
        assert set(obj) >= {"apiVersion", "kind", "metadata"}
        assert obj["metadata"]["name"]
    kinds = {o["kind"] for o in doc["objects"]}
    assert {"Gateway", "ClientTrafficPolicy", "Queue", "Deployment", "Bundle"} <= kinds
    held = {h["object"]: h["reason"] for h in doc["heldBack"]}
    assert any(
        "Gateway/" in k and "gateways.gateway.networking.k8s.io/v1" in v for k, v in held.items()
    )
    assert doc["requirements"]
    assert [m["component"] for m in doc["manifests"]] == ["gaie-crds", "modelexpress-crds"]


def test_json_provided_has_no_releases(tmp_path: Path) -> None:
    doc = _json(tmp_path, manifest(components="Provided"))
    assert doc["releases"] == []
    assert doc["manifests"] == []
    assert {o["kind"] for o in doc["objects"]} == {
        "Namespace",
        "EnvoyProxy",
        "GatewayClass",
        "Gateway",
    }


def test_yaml_output_is_the_same_document(tmp_path: Path) -> None:
    path = _write(tmp_path, manifest())
    as_yaml = _run("render", "-f", str(path), "-o", "yaml")
    as_json = _run("render", "-f", str(path), "-o", "json")
    assert as_yaml.exit_code == 0 and as_json.exit_code == 0
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_observed_file_changes_the_plan(tmp_path: Path) -> None:
    observed = {
        "apis": {"gateway.networking.k8s.io": {"gateways": ["v1"]}},
        "gateway_addresses": ["10.0.0.1"],
    }
    obs = _write(tmp_path, observed, "observed.yaml")
    doc = _json(tmp_path, manifest(), "--observed", str(obs))
    held = [h["object"] for h in doc["heldBack"]]
    assert not any("/Gateway/" in h for h in held)
    assert any("/GatewayClass/" in h for h in held)


def test_text_output_sections(tmp_path: Path) -> None:
    result = _run("render", "-f", str(_write(tmp_path, manifest())))
    assert result.exit_code == 0
    out = result.stdout
    assert "\x1b[" not in out  # no escape codes when not on a terminal
    sections = (
        "Components",
        "Sources",
        "Install order",
        "Held back",
        "Notes",
        "Gateway",
        "Objects",
    )
    order = [out.index(f"\n{s}") for s in sections]
    assert order == sorted(order)
    # Offline, a Managed install meets its requirements itself: nothing to show.
    assert "Requirements" not in out
    for text in ("cert-manager", "v1.20.2", "gateway-helm", "v1.8.4", "plain HTTP"):
        assert text in out
    # Piped, the text fits an 80-column terminal.
    assert max(len(line) for line in out.splitlines()) <= 80


def test_text_output_does_not_read_input_as_markup(tmp_path: Path) -> None:
    # No spec field that reaches the text output may hold "[" any more; an
    # observed fact still can.
    stack = _write(tmp_path, manifest())
    # (A served version, named in the unmet requirement's message: an
    # address like this one is no longer published at all.)
    observed = _write(
        tmp_path, {"apis": {"cert-manager.io": {"certificates": ["[bold]x"]}}}, "observed.yaml"
    )
    result = _run("render", "-f", str(stack), "--observed", str(observed))
    assert result.exit_code == 0, result.output
    assert "[bold]x" in result.stdout


def test_crds_and_requirements_commands_run() -> None:
    assert _run("crds").exit_code == 0
    result = _run("requirements", "--stack", "Dynamo")
    assert result.exit_code == 0
    assert "grove" in result.stdout and "leader-worker-set" not in result.stdout
    result = _run("requirements", "--stack", "Standard")
    assert "leader-worker-set" in result.stdout and "### grove" not in result.stdout
