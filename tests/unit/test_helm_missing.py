"""No helm: a clear refusal where it is needed, and nothing else stops.

A Provided-only operator never runs helm, so a missing helm on PATH is no
reason to stop; it is said by the first release that needs it. A
MODELPLANE_HELM that names no program is a mistake in how the operator was
started, said in one line with exit status 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.actions.helm import NO_HELM, Helm, HelmError, TargetHelm
from modelplane.cli.main import app
from modelplane.kube.address import DEFAULT_DENIED
from modelplane.kube.errors import ErrorKind, classify

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "x",
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
}


@pytest.fixture
def no_helm_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("MODELPLANE_HELM", raising=False)


@pytest.mark.usefixtures("no_helm_on_path")
async def test_no_helm_on_path_is_found_and_said_by_the_first_run(tmp_path: Path) -> None:
    helm = TargetHelm.guarding(Helm.find(tmp_path / "home"), DEFAULT_DENIED)
    with pytest.raises(HelmError) as caught:
        await helm.run("list", kubeconfig=yaml.safe_dump(KUBECONFIG))
    assert str(caught.value) == NO_HELM
    assert classify(caught.value).kind is ErrorKind.HELM_FAILED


def test_run_with_a_modelplane_helm_that_is_no_program_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = tmp_path / "hub.yaml"
    hub.write_text(yaml.safe_dump(KUBECONFIG))
    monkeypatch.setenv("MODELPLANE_HELM", str(tmp_path / "no-such-helm"))
    result = CliRunner().invoke(app, ["run", "--kubeconfig", str(hub)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: MODELPLANE_HELM=")
