"""Helm releases through the real helm binary.

One small function per action, as Flux's helm-controller does: the plan names
the action, this module only carries it out. The target's kubeconfig is
written to a private file for the duration of one call and removed after.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.wire import RELEASE_DIGEST_LABEL


class HelmError(KnownError):
    """helm failed; the message is helm's own stderr, trimmed."""

    kind = ErrorKind.HELM_FAILED


@dataclass(frozen=True)
class Helm:
    binary: str
    # HELM_CACHE_HOME and friends live here, never in the user's home.
    home: Path
    timeout_seconds: int = 600

    @classmethod
    def find(cls, home: Path, timeout_seconds: int = 600) -> Helm:
        """The helm named by ``$MODELPLANE_HELM``, else the first ``helm`` on ``$PATH``."""
        override = os.environ.get("MODELPLANE_HELM")
        if override:
            binary = shutil.which(override)
            if binary is None:
                raise HelmError(
                    f"MODELPLANE_HELM={override} is not an executable helm binary; "
                    "point it at helm, or unset it to use the helm on PATH"
                )
            return cls(binary, home, timeout_seconds)
        binary = shutil.which("helm")
        if binary is None:
            raise HelmError("no helm binary: set MODELPLANE_HELM to its path, or put helm on PATH")
        return cls(binary, home, timeout_seconds)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        for var, sub in (
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ):
            env[var] = str(self.home / sub)
        return env

    async def run(self, *args: str, kubeconfig: str, stdin: bytes | None = None) -> str:
        async with _private_file(kubeconfig) as path:
            proc = await asyncio.create_subprocess_exec(
                self.binary,
                *args,
                "--kubeconfig",
                str(path),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(),
            )
            try:
                out, err = await proc.communicate(stdin)
            except asyncio.CancelledError:
                proc.kill()
                await proc.wait()
                raise
        if proc.returncode != 0:
            message = err.decode(errors="replace").strip().splitlines()
            raise HelmError(" ".join(message[-3:]) or f"helm {args[0]} failed")
        return out.decode()

    async def apply(self, release: PlannedRelease, kubeconfig: str) -> None:
        """Carry out the release's planned action."""
        action = release.action
        if action is ReleaseAction.REINSTALL:
            await self.uninstall(release.name, release.namespace, kubeconfig)
            action = ReleaseAction.INSTALL
        if action is ReleaseAction.ROLLBACK:
            await self.run(
                "rollback",
                release.name,
                "--namespace",
                release.namespace,
                "--timeout",
                f"{self.timeout_seconds}s",
                kubeconfig=kubeconfig,
            )
            return
        if action not in (ReleaseAction.INSTALL, ReleaseAction.UPGRADE):
            return
        await self._install_or_upgrade(release, str(action), kubeconfig)

    async def _install_or_upgrade(
        self, release: PlannedRelease, verb: str, kubeconfig: str
    ) -> None:
        args = [verb, release.name]
        if release.repository.startswith("oci://"):
            args.append(f"{release.repository.rstrip('/')}/{release.chart}")
        else:
            args += [release.chart, "--repo", release.repository]
        args += [
            "--namespace",
            release.namespace,
            "--version",
            release.version,
            "--values",
            "-",
            "--labels",
            f"{RELEASE_DIGEST_LABEL}={release.digest}",
            "--timeout",
            f"{self.timeout_seconds}s",
        ]
        if verb == "install":
            args.append("--create-namespace")
        else:
            # Only upgrades add history; install has no such flag.
            args += ["--history-max", "5"]
        if release.wait:
            args.append("--wait")
        values = yaml.safe_dump(release.values).encode()
        await self.run(*args, kubeconfig=kubeconfig, stdin=values)

    async def uninstall(self, name: str, namespace: str, kubeconfig: str) -> None:
        try:
            await self.run(
                "uninstall",
                name,
                "--namespace",
                namespace,
                "--timeout",
                f"{self.timeout_seconds}s",
                kubeconfig=kubeconfig,
            )
        except HelmError as err:
            if "not found" not in str(err):
                raise


@asynccontextmanager
async def _private_file(content: str) -> AsyncIterator[Path]:
    # mkstemp creates the file 0600; the directory is ours alone too.
    directory = tempfile.mkdtemp(prefix="modelplane-")
    fd, name = tempfile.mkstemp(dir=directory, suffix=".kubeconfig")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        yield Path(name)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
