"""``modelplane diff``: its output and its refusals, without a cluster."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from tests.terminal import as_colour_terminal
from typer.testing import CliRunner

from modelplane.cli.diff import capabilities, print_text, template_kubeconfig
from modelplane.cli.main import app
from modelplane.kube.discovery import Served
from modelplane.plan.diff import (
    Diff,
    Drift,
    ObjectChange,
    ObjectChangeKind,
    ReleaseChange,
    ReleaseChangeKind,
)
from modelplane.plan.model import ReleaseAction

from .conftest import manifest

DIFF = Diff(
    name="west",
    namespace="platform",
    server="https://target:6443",
    releases=[
        ReleaseChange(
            component="kube-prometheus-stack",
            release="mp-kube-prometheus-stack",
            namespace="monitoring",
            change=ReleaseChangeKind.UPGRADE,
            action=ReleaseAction.UPGRADE,
            old_version="83.0.0",
            new_version="84.5.0",
            chart="kube-prometheus-stack",
            values_diff="--- a/v\n+++ b/v\n@@ -1 +1 @@\n-a: 1\n+a: 2\n",
        )
    ],
    objects=[
        ObjectChange(
            key="k",
            object="Gateway modelplane-system/inference-gateway",
            component="configuration",
            change=ObjectChangeKind.UPDATE,
            diff="--- a/g\n+++ b/g\n@@ -1 +1 @@\n-    port: 8080\n+    port: 80\n",
            drift=["spec.listeners[name=http]"],
        )
    ],
    drift=[Drift(key="k", object="Gateway x", fields=["spec.listeners[name=http]"])],
)


def _text(terminal: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, highlight=False, soft_wrap=True)
    print_text(DIFF, console)
    return out.getvalue()


def test_the_text_is_plain_in_a_pipe_and_coloured_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A colour terminal's, whatever the caller's is (TERM=dumb, NO_COLOR).
    as_colour_terminal(monkeypatch)
    plain = _text(terminal=False)
    assert "\x1b[" not in plain
    assert (
        "release monitoring/mp-kube-prometheus-stack (kube-prometheus-stack): "
        "upgrade 83.0.0 -> 84.5.0\n" in plain
    )
    assert "-a: 1\n+a: 2\n" in plain
    assert "drift: spec.listeners[name=http]" in plain
    assert "Would change: 1 release, 1 object." in plain
    coloured = _text(terminal=True)
    assert "\x1b[" in coloured
    # Red for what goes, green for what comes.
    assert "\x1b[31m-a: 1" in coloured and "\x1b[32m+a: 2" in coloured


def test_no_change_says_so() -> None:
    out = io.StringIO()
    print_text(Diff(name="w", namespace="p", server="s"), Console(file=out))
    assert out.getvalue() == "No changes.\n"


def test_helm_gets_the_server_and_no_credentials() -> None:
    doc = yaml.safe_load(template_kubeconfig("https://target:6443"))
    assert doc["clusters"][0]["cluster"] == {"server": "https://target:6443"}
    assert doc["users"] == [{"name": "none", "user": {}}]


def test_only_what_looks_like_an_api_version_reaches_helm() -> None:
    found = Served()
    found.add("apps", "v1", "deployments", "Deployment")
    found.add("evil", "v1,--set=x", "xs", "X")
    assert capabilities(found) == ["apps/v1", "apps/v1/Deployment"]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["diff", *args])
    return result.exit_code, result.stdout, result.stderr


def test_bad_input_is_exit_2_with_the_reason(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump(manifest()))
    code, out, err = _run("-f", str(stack), "--kubeconfig", str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert err.startswith("error: kubeconfig") and "does not exist" in err

    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [")
    code, out, err = _run("-f", str(bad), "--kubeconfig", str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert "not valid YAML" in err

    code, _, err = _run(
        "-f", str(stack), "--kubeconfig", str(stack), "--chart-repository-for", "nope=x"
    )
    # typer's usage error, as run gives for the same flag.
    assert code == 2 and "no component made of a chart" in " ".join(err.split())

    code, _, err = _run(
        "-f", str(stack), "--kubeconfig", str(stack), "--image-registry-mirror", "quay.io"
    )
    assert code == 2 and "expected FROM=TO" in " ".join(err.split())


def test_the_identity_flags_are_checks_own(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump(manifest()))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code, out, err = _run(
        "-f", str(stack), "--kubeconfig", str(kubeconfig), "--identity-type", "Kubeconfig"
    )
    assert (code, out) == (2, "")
    assert err.startswith("error: --identity-type and --identity-file go together")
