"""The simulated cluster's binaries and the processes that run them.

hack/build-controllers.sh builds every binary named here into the testbin
cache, one directory per version, reading the versions from this module; the
runtime resolves the same directories.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.testenv.env import (
    SETUP_HINT,
    TESTBIN_KEY,
    TestbinMissingError,
    TestEnvError,
    _alive,
    _log_tail,
    _terminate,
    cache_root,
    start_logged,
)

from modelplane.catalog.components import trust_manager

# The one place these versions are named (hack/build-controllers.sh reads them).
KWOK_VERSION = "v0.8.0"
# The catalog's pin, read from trust_manager.py by hack/build-controllers.sh too.
TRUST_MANAGER_VERSION = trust_manager.VERSION
# Not the catalog's v1.8.4 (envoy_gateway.VERSION): the Go module proxy lists
# v1.8.4 but refuses its zip ("This module version is not available"), so the
# simulated cluster runs v1.8.3, the nearest patch of the pinned minor.
ENVOY_GATEWAY_VERSION = "v1.8.3"

KUBE_CONTROLLERS: tuple[str, ...] = ("kube-controller-manager", "kube-scheduler")


def controller_dirs() -> dict[str, Path]:
    """Each simulated-cluster binary's cache directory, by binary name."""
    root = cache_root()
    return {
        "kube-controller-manager": root / TESTBIN_KEY,
        "kube-scheduler": root / TESTBIN_KEY,
        "kwok": root / f"kwok-{KWOK_VERSION}",
        "trust-manager": root / f"trust-manager-{TRUST_MANAGER_VERSION}",
        "envoy-gateway": root / f"envoy-gateway-{ENVOY_GATEWAY_VERSION}",
    }


def find_controller(name: str) -> Path:
    """The path of one simulated-cluster binary; raise :class:`TestbinMissingError` if unbuilt.

    ``$MODELPLANE_TESTBIN`` wins when it holds the binary, as for the others.
    """
    override = os.environ.get("MODELPLANE_TESTBIN")
    if override and os.access(Path(override).expanduser() / name, os.X_OK):
        return Path(override).expanduser() / name
    path = controller_dirs()[name] / name
    if not os.access(path, os.X_OK):
        raise TestbinMissingError(
            f"simulated-cluster binary {name} not found at {path}; {SETUP_HINT} "
            "(hack/build-controllers.sh builds it)"
        )
    return path


def kwok_stages() -> Path:
    """The Stage objects kwok runs with (copied next to it by hack/build-controllers.sh)."""
    path = find_controller("kwok").parent / "stages.yaml"
    if not path.is_file():
        raise TestbinMissingError(f"kwok's stages.yaml not found at {path}; {SETUP_HINT}")
    return path


class Processes:
    """Processes started under one data directory, their pids in ``DIR/<name>.pid``.

    A pid is only ever signalled while its command line names the data
    directory, so a recycled pid of someone else's process is left alone.
    """

    def __init__(self, data_dir: Path, names: Sequence[str]) -> None:
        self.data_dir = data_dir
        self.names = tuple(names)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def marker(self) -> str:
        return f"{self.data_dir}/"

    def log(self, name: str) -> Path:
        return self.data_dir / f"{name}.log"

    def spawn(
        self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        if not any(self.marker in a or a == str(self.data_dir) for a in args):
            raise TestEnvError(f"{name}'s command line must name {self.data_dir}")
        proc = start_logged(self.data_dir, name, args, env)
        self._procs[name] = proc
        return proc

    def pid(self, name: str) -> int | None:
        try:
            pid = int((self.data_dir / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid, self.marker) else None

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in self.names:
            pid = self.pid(name)
            if pid is not None:
                out[name] = pid
        return out

    def check(self, name: str) -> None:
        """Raise with the log's tail if ``name`` was started here and has exited."""
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise TestEnvError(
                f"{name} exited with {proc.returncode}:\n{_log_tail(self.log(name))}"
            )

    def stop(self, names: Sequence[str] | None = None, timeout: float = 10.0) -> None:
        """SIGTERM (then SIGKILL) the named processes, in the order given."""
        for name in names if names is not None else self.names:
            with contextlib.suppress(OSError, ValueError):
                pid = int((self.data_dir / f"{name}.pid").read_text().strip())
                _terminate([pid], self.marker, timeout)
            proc = self._procs.pop(name, None)
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
