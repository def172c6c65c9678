"""Fixtures for integration tests against real kube-apiservers (and helm) on loopback.

``hub_env`` and ``target_env`` are two independent API servers (each with its
own etcd), started once per session; ``hub`` is a client of the hub with the
ServingStack CRD served, and ``target`` a fresh API server for one test.
``chart_repo`` serves the charts under ``tests/fixtures/charts/`` — packaged
with the real ``helm package`` and indexed with ``helm repo index`` — from an
HTTP server on 127.0.0.1.

Missing binaries make these fixtures fail with the instruction to run
hack/test-deps.sh (which the test command runs first); integration tests are never
skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from lightkube import Client
from tests.integration.hubs import (
    Harness,
    HarnessOptions,
    client_for,
    install_servingstack_crd,
    namespace_for,
    private_env,
)
from tests.integration.simcluster import sim_nodes_target, sim_target  # noqa: F401 - fixtures
from tests.integration.substrate import Helm, Substrate, serve_substrate
from tests.serving import serve_directory
from tests.testenv import TestbinMissingError, TestEnv, find_binaries

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
    with private_env(tmp_path_factory.mktemp(name)) as env:
        yield env


@pytest.fixture(scope="session")
def hub_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """The hub cluster's API server (where the operator and its CRDs live)."""
    yield from _start_env("hub", tmp_path_factory)


@pytest.fixture(scope="session")
def target_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A second, independent API server: the cluster the operator installs into."""
    yield from _start_env("target", tmp_path_factory)


@pytest.fixture(scope="session")
def hub(hub_env: TestEnv) -> Client:
    """A client of the hub with the generated ServingStack CRD applied and served.

    Tests create the namespaces they use themselves.
    """
    client = client_for(hub_env)
    install_servingstack_crd(client, hub_env, deadline=60)
    return client


@pytest.fixture
def target(tmp_path: Path) -> Iterator[TestEnv]:
    """A fresh target API server of this test's own (see ``hubs.private_env``).

    Modules whose tests may share one override this with a module-scoped
    fixture built on the same ``private_env``.
    """
    _binaries()
    with private_env(tmp_path / "target") as env:
        yield env


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HELM_CONFIG_HOME/CACHE/DATA live under here, so helm never touches ~."""
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="session")
def helm(testbin: dict[str, Path], helm_home: Path) -> Helm:
    return Helm(binary=testbin["helm"], home=helm_home)


@dataclass(frozen=True)
class ChartRepo:
    """A helm chart repository served over HTTP on loopback."""

    url: str
    directory: Path
    charts: dict[str, str]  # chart name -> version


@pytest.fixture(scope="session")
def chart_repo(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartRepo]:
    """Every chart under tests/fixtures/charts, packaged and indexed, served on 127.0.0.1."""
    directory = tmp_path_factory.mktemp("chart-repo")
    with serve_directory(directory) as url:
        charts: dict[str, str] = {}
        for chart in sorted(p for p in CHARTS_DIR.iterdir() if (p / "Chart.yaml").is_file()):
            helm.run("package", str(chart), "--destination", str(directory))
            meta = yaml.safe_load((chart / "Chart.yaml").read_text())
            charts[str(meta["name"])] = str(meta["version"])
        helm.run("repo", "index", str(directory), "--url", url)
        yield ChartRepo(url=url, directory=directory, charts=charts)


@pytest.fixture(scope="module")
def substrate(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    """The substrate's fixture charts and manifests served on loopback, once per module."""
    yield from serve_substrate(helm, tmp_path_factory.mktemp("substrate"))


@pytest.fixture(scope="module")
def workload_substrate(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    """The substrate whose charts run their real charts' workloads, for a simulated cluster."""
    yield from serve_substrate(helm, tmp_path_factory.mktemp("substrate"), workloads=True)


@pytest.fixture
def harness(
    hub: Client,
    hub_env: TestEnv,
    target: TestEnv,
    substrate: Substrate,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Harness]:
    """An operator harness in a hub namespace of this test's own.

    A module tunes it with a module-level ``HARNESS = HarnessOptions(...)``
    and swaps the target by overriding ``target``.
    """
    options = getattr(request.module, "HARNESS", HarnessOptions())
    assert isinstance(options, HarnessOptions), "a module's HARNESS must be HarnessOptions"
    namespace = namespace_for(options.prefix, request.node.name)
    h = Harness(hub, hub_env, target, substrate, tmp_path, namespace)
    try:
        if options.kubeconfig_secret:
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
        yield h
    finally:
        h.stop()
