"""Fixtures for integration tests against real kube-apiservers (and helm) on loopback.

``hub_env`` and ``target_env`` are two independent API servers (each with its
own etcd), started once per session.  ``chart_repo`` serves the charts under
``tests/fixtures/charts/`` — packaged with the real ``helm package`` and indexed
with ``helm repo index`` — from an HTTP server on 127.0.0.1.

Missing binaries make these fixtures fail with the instruction to run
hack/setup.sh; integration tests are never skipped silently.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from modelplane.testenv import TestbinMissingError, TestEnv, find_binaries, helm_environ

INTEGRATION_DIR = Path(__file__).resolve().parent
CHARTS_DIR = INTEGRATION_DIR.parent / "fixtures" / "charts"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _binaries() -> dict[str, Path]:
    try:
        return find_binaries()
    except TestbinMissingError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)  # outside `except`: no chained traceback


@pytest.fixture(scope="session")
def testbin() -> dict[str, Path]:
    """Paths of kube-apiserver, etcd and helm (fails if they were not built)."""
    return _binaries()


def _start_env(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    _binaries()
    env = TestEnv(tmp_path_factory.mktemp(name))
    try:
        env.start()
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="session")
def hub_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """The hub cluster's API server (where the operator and its CRDs live)."""
    yield from _start_env("hub", tmp_path_factory)


@pytest.fixture(scope="session")
def target_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A second, independent API server: the cluster the operator installs into."""
    yield from _start_env("target", tmp_path_factory)


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HELM_CONFIG_HOME/CACHE/DATA live under here, so helm never touches ~."""
    return tmp_path_factory.mktemp("helm-home")


@dataclass(frozen=True)
class Helm:
    """Runs the built helm with a private home; ``kubeconfig`` args are added by callers."""

    binary: Path
    home: Path

    @property
    def environ(self) -> dict[str, str]:
        return helm_environ(self.home)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc


@pytest.fixture(scope="session")
def helm(testbin: dict[str, Path], helm_home: Path) -> Helm:
    return Helm(binary=testbin["helm"], home=helm_home)


@dataclass(frozen=True)
class ChartRepo:
    """A helm chart repository served over HTTP on loopback."""

    url: str
    directory: Path
    charts: dict[str, str]  # chart name -> version


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def chart_repo(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartRepo]:
    """Every chart under tests/fixtures/charts, packaged and indexed, served on 127.0.0.1."""
    directory = tmp_path_factory.mktemp("chart-repo")
    handler = functools.partial(_QuietHandler, directory=os.fspath(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"

    charts: dict[str, str] = {}
    for chart in sorted(p for p in CHARTS_DIR.iterdir() if (p / "Chart.yaml").is_file()):
        helm.run("package", str(chart), "--destination", str(directory))
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        charts[str(meta["name"])] = str(meta["version"])
    helm.run("repo", "index", str(directory), "--url", url)

    thread = threading.Thread(target=server.serve_forever, name="chart-repo", daemon=True)
    thread.start()
    try:
        yield ChartRepo(url=url, directory=directory, charts=charts)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
