"""``python -m tests.testenv start`` that fails leaves nothing of its own running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.testenv import BINARIES, TestEnv
from tests.testenv import env as env_module
from tests.testenv.controllers import KUBE_CONTROLLERS, find_controller
from tests.testenv.simcluster import SimCluster


def _start(
    directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.testenv", "start", str(directory), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def _naming(directory: Path) -> dict[int, str]:
    """Every live process whose command line names ``directory``: what a start left."""
    marker = f"{directory}/"
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found[int(entry.name)] = cmdline
    return found


def _stop(directory: Path) -> None:
    SimCluster(TestEnv(directory)).stop()
    TestEnv(directory).stop()


def test_a_controller_never_built_is_refused_before_anything_starts(
    testbin: dict[str, Path], tmp_path: Path
) -> None:
    # The API server's binaries, and none of the simulated cluster's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in BINARIES:
        (bin_dir / name).symlink_to(testbin[name])
    environ = {
        **os.environ,
        "MODELPLANE_TESTBIN": str(bin_dir),
        "MODELPLANE_TESTBIN_CACHE": str(tmp_path / "empty-cache"),
    }
    directory = tmp_path / "env"
    try:
        proc = _start(directory, "--nodes", "cpu=1", env=environ)
        assert proc.returncode == 1, proc.stderr
        assert "simulated-cluster binary kube-controller-manager not found" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert _naming(directory) == {}
    finally:
        _stop(directory)


def test_a_start_that_fails_part_way_stops_everything_it_started(
    testbin: dict[str, Path], tmp_path: Path
) -> None:
    for name in ["kwok", *KUBE_CONTROLLERS]:
        find_controller(name)  # fails, saying how to build it, if it was not
    crds = tmp_path / "crds"
    crds.mkdir()
    # Applied after the API server and the nodes are up; the server refuses
    # it (a CRD's name must be PLURAL.GROUP), so the start fails there.
    bad = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "misnamed.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    (crds / "bad.yaml").write_text(yaml.safe_dump(bad))
    directory = tmp_path / "env"
    try:
        proc = _start(directory, "--nodes", "cpu=1", "--crds", str(crds))
        assert proc.returncode == 1, proc.stderr
        assert "applying CustomResourceDefinition misnamed.example.com failed: 422" in proc.stderr
        # It got as far as the nodes: kwok logged, the API server served.
        assert (directory / "kwok.log").is_file() and (directory / "etcd.log").is_file()
        assert _naming(directory) == {}
    finally:
        _stop(directory)


def test_a_port_taken_between_its_pick_and_the_bind_moves_the_start_to_new_ports(
    testbin: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process binds the API server's port after the pick found it
    # free: played by handing the pick a port this test holds.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks: list[int] = []
        pick = env_module._free_port

        def racing_pick(preferred: int | None = None) -> int:
            picks.append(taken if len(picks) == 2 else pick(preferred))
            return picks[-1]

        monkeypatch.setattr(env_module, "_free_port", racing_pick)
        env = TestEnv(tmp_path / "env")
        try:
            env.start()
            assert picks[2] == taken  # the API server was sent to the taken port first
            assert "address already in use" in (tmp_path / "env" / "kube-apiserver.log").read_text()
            assert not env.server.endswith(f":{taken}")
            with env.http_client(timeout=10) as client:
                assert client.get("/readyz").status_code == 200
        finally:
            env.stop()
