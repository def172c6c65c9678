"""The integration-test environment itself: CLI contract, API surface, helm path."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.resources.resource_v1 import DeviceClass
from tests.testenv import BINARIES, TestEnv, resolve_bin_dir

from .conftest import ChartRepo, Helm


def _testenv_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.testenv", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _client(kubeconfig: dict[str, Any]) -> Client:
    return Client(KubeConfig.from_dict(kubeconfig), field_manager="modelplane-tests")


def _file_references(node: object, path: str = "") -> list[str]:
    """Keys in a kubeconfig that point at local files."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key in ("certificate-authority", "client-certificate", "client-key", "tokenFile"):
                found.append(here)
            found += _file_references(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _file_references(value, f"{path}[{i}]")
    return found


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def test_bin_prints_the_directory_holding_the_binaries(testbin: dict[str, Path]) -> None:
    proc = _testenv_cli("bin")
    assert proc.returncode == 0, proc.stderr
    directory = Path(proc.stdout.strip())
    assert directory == resolve_bin_dir()
    for name in BINARIES:
        assert os.access(directory / name, os.X_OK), name
        assert testbin[name] == directory / name


def test_start_stop_cli(testbin: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "env"
    started = _testenv_cli("start", str(data))
    assert started.returncode == 0, started.stderr
    try:
        kubeconfig_path = data / "kubeconfig"
        assert f"KUBECONFIG={kubeconfig_path}" in started.stdout
        kubeconfig = yaml.safe_load(kubeconfig_path.read_text())
        assert _file_references(kubeconfig) == []
        cluster = kubeconfig["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://127.0.0.1:")
        assert cluster["certificate-authority-data"]
        assert "insecure-skip-tls-verify" not in cluster
        assert kubeconfig["users"][0]["user"]["token"]

        # The kubeconfig works as-is with lightkube (TLS verified against the CA).
        client = Client(KubeConfig.from_file(kubeconfig_path), field_manager="modelplane-tests")
        names = {ns.metadata.name for ns in client.list(Namespace) if ns.metadata}
        assert {"default", "kube-system"} <= names
        client.create(
            ConfigMap(metadata=ObjectMeta(name="survives", namespace="default"), data={"a": "1"})
        )

        env = TestEnv(data)
        pids = env.pids()
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert all(_pid_alive(pid) for pid in pids.values())

        # Starting again while running is a no-op that reports the same server.
        again = _testenv_cli("start", str(data))
        assert again.returncode == 0, again.stderr
        assert TestEnv(data).pids() == pids
    finally:
        stopped = _testenv_cli("stop", str(data))
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_pid_alive(pid) for pid in pids.values())
    assert TestEnv(data).pids() == {}
    # The data directory is kept...
    assert kubeconfig_path.is_file()
    assert (data / "etcd").is_dir()
    assert (data / "kube-apiserver.log").is_file()
    # ...stop is idempotent...
    assert _testenv_cli("stop", str(data)).returncode == 0

    # ...and a restart serves the same data with the same credentials.
    restarted = _testenv_cli("start", str(data))
    assert restarted.returncode == 0, restarted.stderr
    try:
        client = Client(KubeConfig.from_file(kubeconfig_path), field_manager="modelplane-tests")
        cm = client.get(ConfigMap, "survives", namespace="default")
        assert cm.data == {"a": "1"}
    finally:
        assert _testenv_cli("stop", str(data)).returncode == 0


def test_bad_token_is_rejected(hub_env: TestEnv) -> None:
    kubeconfig = hub_env.kubeconfig
    kubeconfig["users"][0]["user"]["token"] = "not-the-token"
    with pytest.raises(ApiError) as err:
        _client(kubeconfig).get(Namespace, "default")
    assert err.value.status.code == 401


def test_resource_k8s_io_v1_is_served(hub_env: TestEnv) -> None:
    with hub_env.http_client() as http:
        resp = http.get("/apis/resource.k8s.io/v1")
        assert resp.status_code == 200, resp.text
        served = {r["name"] for r in resp.json()["resources"]}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served
    assert list(_client(hub_env.kubeconfig).list(DeviceClass)) == []


def test_request_metrics_count_api_calls(hub_env: TestEnv) -> None:
    labels = {"verb": "LIST", "resource": "configmaps", "group": "", "version": "v1"}
    before = hub_env.request_total(**labels)
    client = _client(hub_env.kubeconfig)
    for _ in range(3):
        list(client.list(ConfigMap, namespace="kube-system"))
    assert hub_env.request_total(**labels) == before + 3


def test_hub_and_target_are_independent(hub_env: TestEnv, target_env: TestEnv) -> None:
    assert hub_env.server != target_env.server
    assert hub_env.token != target_env.token
    hub = _client(hub_env.kubeconfig)
    target = _client(target_env.kubeconfig)
    hub.create(ConfigMap(metadata=ObjectMeta(name="only-on-hub", namespace="default")))
    try:
        with pytest.raises(ApiError) as err:
            target.get(ConfigMap, "only-on-hub", namespace="default")
        assert err.value.status.code == 404
    finally:
        hub.delete(ConfigMap, "only-on-hub", namespace="default")


def test_chart_repo_serves_packaged_charts(chart_repo: ChartRepo, helm: Helm) -> None:
    assert chart_repo.charts == {"mp-demo": "0.1.0"}
    index = yaml.safe_load((chart_repo.directory / "index.yaml").read_text())
    (entry,) = index["entries"]["mp-demo"]
    assert entry["urls"] == [f"{chart_repo.url}/mp-demo-0.1.0.tgz"]
    shown = helm.run("show", "chart", "mp-demo", "--repo", chart_repo.url).stdout
    assert "name: mp-demo" in shown


def test_helm_installs_fixture_chart_into_target(
    target_env: TestEnv, helm: Helm, chart_repo: ChartRepo
) -> None:
    kube = ["--kubeconfig", str(target_env.kubeconfig_path)]
    helm.run(
        "install", "demo", "mp-demo",
        "--repo", chart_repo.url,
        "--version", chart_repo.charts["mp-demo"],
        "--namespace", "mp-demo",
        "--create-namespace",
        "--set", "greeting=hi from helm",
        *kube,
    )  # fmt: skip
    client = _client(target_env.kubeconfig)
    cm = client.get(ConfigMap, "demo-mp-demo", namespace="mp-demo")
    assert cm.data == {
        "greeting": "hi from helm",
        "model-name": "demo-model",
        "model-replicas": "1",
    }
    assert cm.metadata is not None and cm.metadata.labels is not None
    assert cm.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"

    status = helm.run("status", "demo", "--namespace", "mp-demo", "--output", "json", *kube)
    assert yaml.safe_load(status.stdout)["info"]["status"] == "deployed"

    # The named-repository path: `helm repo add` writes only under the private helm home.
    helm.run("repo", "add", "mp-fixtures", chart_repo.url)
    assert (helm.home / "config" / "repositories.yaml").is_file()
    helm.run(
        "upgrade", "demo", "mp-fixtures/mp-demo",
        "--namespace", "mp-demo",
        "--set", "model.replicas=2",
        *kube,
    )  # fmt: skip
    cm = client.get(ConfigMap, "demo-mp-demo", namespace="mp-demo")
    assert cm.data is not None
    assert cm.data["model-replicas"] == "2"
    assert cm.data["greeting"] == "hello"  # upgrade without --reuse-values resets to defaults

    helm.run("uninstall", "demo", "--namespace", "mp-demo", *kube)
    with pytest.raises(ApiError) as err:
        client.get(ConfigMap, "demo-mp-demo", namespace="mp-demo")
    assert err.value.status.code == 404


def _crd(name: str, prop: str, annotations: dict[str, str]) -> dict[str, Any]:
    plural, group = name.split(".", 1)
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {prop: {"type": "string"}}}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": plural[:-1].title()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def test_replace_crds_swaps_the_schema_and_keeps_the_digest(
    target_env: TestEnv, tmp_path: Path
) -> None:
    """A Managed seed's fixture CRD becomes the upstream one whole, the operator's digest kept."""
    from tests.testenv.kube import apply, client, get, replace_crds

    from modelplane.wire import DIGEST_ANNOTATION

    swapped, added = "widgets.replace.test.modelplane.ai", "gadgets.replace.test.modelplane.ai"
    upstream = [
        _crd(swapped, "upstream", {"controller-gen.kubebuilder.io/version": "v0.19.0"}),
        _crd(added, "upstream", {}),
    ]
    (tmp_path / "crds.yaml").write_text(yaml.safe_dump_all(upstream))
    with client(target_env) as kube:
        apply(kube, _crd(swapped, "fixture", {DIGEST_ANNOTATION: "the-operators"}))
        try:
            assert replace_crds(target_env, [tmp_path]) == [swapped, added]
            for name in (swapped, added):
                live = get(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
                assert live is not None
                (version,) = live["spec"]["versions"]
                spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
                assert list(spec["properties"]) == ["upstream"]  # not merged with the fixture's
            live = get(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", swapped)
            assert live is not None
            assert live["metadata"]["annotations"] == {
                DIGEST_ANNOTATION: "the-operators",
                "controller-gen.kubebuilder.io/version": "v0.19.0",
            }
        finally:
            for name in (swapped, added):
                with contextlib.suppress(ApiError):  # not there if the test failed early
                    kube.delete(CustomResourceDefinition, name)
