"""Helm releases through the real helm binary.

One small function per action, as Flux's helm-controller does: the plan names
the action, this module only carries it out. The target's kubeconfig is
written to a private file for the duration of one call and removed after.

Each helm runs as the leader of its own process group, which the ``Helm``
that started it owns: a run that is cancelled, times out or is abandoned
when the operator stops takes that whole group down with it and reaps helm,
and ``kill_running`` ends every group at once for a leader that must stop
acting this instant (see operator/leader.py).

helm's environment is built from nothing (``Helm._env``), and a
``TargetHelm`` connects only through a loopback proxy of its own run that
applies the deny list to every connection helm opens (kube/proxy.py). A
chart repository's credentials reach helm in a repository file of the run's
own, never on its command line (actions/chart_repository.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelplane.actions.chart_repository import (
    ALIAS,
    registry_file,
    repository_file,
    repository_login,
)
from modelplane.credentials.kubeconfig import load_kubeconfig, vet_kubeconfig
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork
from modelplane.kube.client import check_server
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.kube.proxy import ConnectProxy
from modelplane.kube.scrub import redact, url_secrets
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.wire import RELEASE_DIGEST_LABEL, for_go

# What helm takes from the operator's environment: where programs are, where
# temporary files go, and which CAs to trust (a mirror's private CA is often
# given so). None of them says where to connect or with which credentials.
_PASSED_ENV = ("PATH", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")


NO_HELM = "no helm binary: set MODELPLANE_HELM to its path, or put helm on PATH"


class HelmError(KnownError):
    """helm failed; the message is helm's own stderr, trimmed and redacted (kube/scrub.py)."""

    kind = ErrorKind.HELM_FAILED


def locate() -> str | None:
    """The helm named by ``$MODELPLANE_HELM``, else the first ``helm`` on ``$PATH``, else None.

    ``HelmError`` when MODELPLANE_HELM names no executable: that is a
    mistake in how the operator was started, not a missing helm.
    """
    override = os.environ.get("MODELPLANE_HELM")
    if override:
        binary = shutil.which(override)
        if binary is None:
            raise HelmError(
                f"MODELPLANE_HELM={override} is not an executable helm binary; "
                "point it at helm, or unset it to use the helm on PATH"
            )
        return binary
    return shutil.which("helm")


class ProcessGroups:
    """The process groups of the helm runs in flight, by group id (helm's own pid)."""

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    @contextlib.contextmanager
    def owning(self, pgid: int) -> Iterator[None]:
        self._ids.add(pgid)
        try:
            yield
        finally:
            self._ids.discard(pgid)

    def kill_all(self) -> None:
        for pgid in self:
            kill_group(pgid)


async def _end(proc: asyncio.subprocess.Process) -> None:
    """Kill helm's group, then wait until helm is reaped and its pipes are closed."""
    # While any process of the group lives, the kernel keeps its id from
    # being reused, so this reaches helm's group and no other.
    kill_group(proc.pid)
    # A second cancellation stops the waiting, not the reaping.
    await asyncio.shield(proc.wait())


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group; one already gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class Helm:
    binary: str
    # HELM_CACHE_HOME and friends live here, never in the user's home.
    home: Path
    timeout_seconds: int = 600
    # Shared by every copy made of this Helm (see TargetHelm.guarding), so
    # that kill_running on any of them reaches every helm they started.
    groups: ProcessGroups = field(
        default_factory=ProcessGroups, compare=False, repr=False, kw_only=True
    )

    @classmethod
    def find(cls, home: Path, timeout_seconds: int = 600) -> Helm:
        """The helm ``locate`` finds; without one, a Helm whose every run says so.

        A Provided-only operator never runs helm, so no helm is not a reason
        to stop: the first release that needs it fails with ``NO_HELM``,
        which Ready says.
        """
        return cls(locate() or "", home, timeout_seconds)

    def _env(self, proxy: ConnectProxy | None = None) -> dict[str, str]:
        """helm's whole environment: its homes, the proxy, and nothing else of the pod's.

        The pod's environment is the operator's, not the target's: a
        HELM_KUBEAPISERVER, HELM_KUBETOKEN or KUBECONFIG there would override
        the kubeconfig helm is given (helm's own settings read them), and an
        HTTPS_PROXY or NO_PROXY would route around the operator's proxy.
        """
        env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
        # client-go keeps its discovery cache under $HOME/.kube: ours, too.
        env["HOME"] = str(self.home)
        for var, sub in (
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ):
            env[var] = str(self.home / sub)
        if proxy is not None:
            env.update(proxy.environment())
        return env

    async def run(
        self,
        *args: str,
        kubeconfig: str,
        stdin: bytes | None = None,
        secrets: Iterable[str] = (),
        said_on_stdout: bool = False,
    ) -> str:
        """helm's stdout; ``HelmError`` with its last words, without ``secrets``, if it fails.

        ``said_on_stdout``: for a command (``repo update``) that gives the
        reason it failed on stdout and only its summary on stderr.
        """
        async with self._route(kubeconfig) as (routed, proxy):
            if not self.binary:
                raise HelmError(NO_HELM)
            out, err, code = await self._spawn(args, routed, stdin, proxy)
            if code != 0:
                said_on = (out + err) if said_on_stdout else err
                message = said_on.decode(errors="replace").strip().splitlines()
                # helm quotes the repository it was given, userinfo and all.
                known = [*secrets, *(proxy.secrets if proxy is not None else ())]
                said = redact(" ".join(message[-3:]), known)
                raise HelmError(said or f"helm {args[0]} failed")
        return out.decode()

    @asynccontextmanager
    async def _route(self, kubeconfig: str) -> AsyncIterator[tuple[str, ConnectProxy | None]]:
        """The kubeconfig helm is given, and the proxy it goes through: here, as it is, none."""
        yield kubeconfig, None

    async def _spawn(
        self,
        args: Sequence[str],
        kubeconfig: str,
        stdin: bytes | None,
        proxy: ConnectProxy | None,
    ) -> tuple[bytes, bytes, int | None]:
        """Run helm to its end (or kill its group): its stdout, stderr and exit status."""
        async with _private_file(kubeconfig) as path:
            spawn = asyncio.ensure_future(
                asyncio.create_subprocess_exec(
                    self.binary,
                    *args,
                    "--kubeconfig",
                    str(path),
                    stdin=asyncio.subprocess.PIPE
                    if stdin is not None
                    else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=self._env(proxy),
                    # Its own session, so its own process group: whatever
                    # helm starts (plugins, post-renderers) is in it, and no
                    # signal meant for the operator's group reaches it unasked.
                    start_new_session=True,
                )
            )
            try:
                # Cancelled mid-spawn, asyncio would kill helm alone and then
                # wait for pipes a child of helm may hold open.
                proc = await asyncio.shield(spawn)
            except BaseException:
                with contextlib.suppress(Exception):
                    await _end(await spawn)
                raise
            with self.groups.owning(proc.pid):
                try:
                    out, err = await proc.communicate(stdin)
                except BaseException:
                    # Cancelled (a stopped daemon, an operator shutting down)
                    # or timed out by the caller: nothing of this run may go
                    # on acting.
                    await _end(proc)
                    raise
        return out, err, proc.returncode

    async def apply(
        self, release: PlannedRelease, kubeconfig: str, *, take_ownership: bool = False
    ) -> str | None:
        """Carry out the planned action; for an install or upgrade, helm's release as JSON.

        The JSON is what helm stored, as helm itself printed it (``-o json``):
        the revision and manifest the operator records on the hub, read from
        no Secret a tenant could have written meanwhile (plan.release_trust).
        ``take_ownership``: objects of the release that exist and belong to no
        release are taken over (``spec.adopt``, once the conflict scan has
        named each; helm 3.17 and later).
        """
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
            return None
        if action not in (ReleaseAction.INSTALL, ReleaseAction.UPGRADE):
            return None
        return await self._install_or_upgrade(release, str(action), kubeconfig, take_ownership)

    async def _install_or_upgrade(
        self, release: PlannedRelease, verb: str, kubeconfig: str, take_ownership: bool
    ) -> str:
        async with self._chart(release, kubeconfig) as chart:
            return await self._install_or_upgrade_chart(
                release, verb, chart, kubeconfig, take_ownership
            )

    async def _install_or_upgrade_chart(
        self,
        release: PlannedRelease,
        verb: str,
        chart: list[str],
        kubeconfig: str,
        take_ownership: bool,
    ) -> str:
        args = [verb, *chart]
        args += [
            "--labels",
            f"{RELEASE_DIGEST_LABEL}={release.digest}",
            "--timeout",
            f"{self.timeout_seconds}s",
            "--output",
            "json",
        ]
        if verb == "install":
            args.append("--create-namespace")
        else:
            # Only upgrades add history; install has no such flag.
            args += ["--history-max", "5"]
        if release.wait:
            args.append("--wait")
        if take_ownership:
            args.append("--take-ownership")
        values = for_go(release.values).encode()
        return await self.run(
            *args, kubeconfig=kubeconfig, stdin=values, secrets=url_secrets(release.repository)
        )

    async def template(
        self,
        release: PlannedRelease,
        kubeconfig: str,
        *,
        kube_version: str | None = None,
        api_versions: Sequence[str] = (),
        is_upgrade: bool = False,
    ) -> str:
        """The manifest an install or upgrade of ``release`` would store, rendered locally.

        The chart and values ``apply`` would install, without hooks and
        without the chart's crds/ directory: what Helm keeps as a release's
        manifest. Nothing is sent to the cluster; ``kube_version`` and
        ``api_versions`` (the target's, from discovery) stand in for what
        an install would learn from it, so a chart that renders by
        ``.Capabilities`` renders as it would there.
        """
        async with self._chart(release, kubeconfig) as chart:
            args = ["template", *chart, "--no-hooks"]
            if kube_version:
                args += ["--kube-version", kube_version]
            if api_versions:
                args += ["--api-versions", ",".join(api_versions)]
            if is_upgrade:
                args.append("--is-upgrade")
            values = for_go(release.values).encode()
            return await self.run(
                *args, kubeconfig=kubeconfig, stdin=values, secrets=url_secrets(release.repository)
            )

    @asynccontextmanager
    async def _chart(
        self, release: PlannedRelease, kubeconfig: str, *, show: bool = False
    ) -> AsyncIterator[list[str]]:
        """helm's arguments for the release's chart, with no credentials among them.

        A repository URL with a user and password is given as a repository
        file of this block's own, whose index is fetched first, or for an
        OCI registry as a registry file; see actions/chart_repository.py.
        """
        login = repository_login(release.repository)
        if login is None:
            yield _chart_args(release, release.chart, release.repository, show=show)
            return
        with _private_directory() as directory:
            if login.oci:
                config = directory / "registry.json"
                _write_private(config, registry_file(login))
                yield [
                    *_chart_args(release, release.chart, login.url, show=show),
                    "--registry-config",
                    str(config),
                ]
                return
            config = directory / "repositories.yaml"
            _write_private(config, repository_file(login))
            files = ["--repository-config", str(config), "--repository-cache", str(directory)]
            await self.run(
                "repo",
                "update",
                ALIAS,
                # Without it, a repository that cannot be read is only a warning.
                "--fail-on-repo-update-fail",
                *files,
                kubeconfig=kubeconfig,
                secrets=url_secrets(release.repository),
                said_on_stdout=True,
            )
            try:
                yield [*_chart_args(release, f"{ALIAS}/{release.chart}", None, show=show), *files]
            except HelmError as err:
                if ALIAS not in str(err):
                    raise
                # helm names the repository by its alias alone: say which it is.
                raise HelmError(f"{err} ({ALIAS}: {login.url})") from err

    async def show_crds(self, release: PlannedRelease, kubeconfig: str) -> str:
        """The CRDs of the chart's crds/ directories (its own and its subcharts'), as YAML.

        Those Helm installs once and never upgrades; nothing is sent to the
        cluster.
        """
        async with self._chart(release, kubeconfig, show=True) as chart:
            return await self.run(
                "show",
                "crds",
                *chart,
                kubeconfig=kubeconfig,
                secrets=url_secrets(release.repository),
            )

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

    def kill_running(self) -> None:
        """SIGKILL every helm this Helm (or a copy of it) is running, and what each started.

        Synchronous, for a process about to exit at once: the runs are not
        reaped here, as the process that would reap them is going.
        """
        self.groups.kill_all()


def _chart_source(chart: str, repository: str | None) -> list[str]:
    """The chart as helm fetches it: under an ``oci://`` prefix, with ``--repo``, or by alias."""
    if repository is None:
        return [chart]
    if repository.startswith("oci://"):
        return [f"{repository.rstrip('/')}/{chart}"]
    return [chart, "--repo", repository]


def _chart_args(
    release: PlannedRelease, chart: str, repository: str | None, *, show: bool = False
) -> list[str]:
    """Release name, chart source, namespace, version and values from stdin, as helm takes them.

    ``chart`` is found in ``repository`` (``--repo``, or under an ``oci://``
    prefix); without one, ``chart`` names it alone (``<alias>/<chart>``). For
    ``helm show`` (``show``): the chart and its version alone.
    """
    source = [*_chart_source(chart, repository), "--version", release.version]
    if show:
        return source
    return [release.name, *source, "--namespace", release.namespace, "--values", "-"]


@dataclass(frozen=True)
class TargetHelm(Helm):
    """helm that connects only where the operator would connect itself.

    Every run goes through a ``ConnectProxy`` of its own (see kube/proxy.py):
    the kubeconfig helm gets names it as each cluster's ``proxy-url`` and the
    environment as the proxy for chart downloads, and it connects to an
    address only after checking every address the host resolves to. The
    kubeconfig's server is also checked before helm starts, so a denied
    server is said as such without running helm at all.
    """

    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED

    @classmethod
    def guarding(cls, helm: Helm, deny: Iterable[IPNetwork]) -> TargetHelm:
        return cls(
            helm.binary, helm.home, helm.timeout_seconds, deny=tuple(deny), groups=helm.groups
        )

    @asynccontextmanager
    async def _route(self, kubeconfig: str) -> AsyncIterator[tuple[str, ConnectProxy | None]]:
        # Parsed once, off the event loop: its server is checked, then every
        # cluster of it is sent through a proxy of this run's own.
        doc, server = await asyncio.to_thread(_read_kubeconfig, kubeconfig)
        await check_server(server, self.deny)
        async with ConnectProxy(self.deny) as own:
            try:
                yield await asyncio.to_thread(through_proxy, doc, own.url), own
            except HelmError as err:
                if own.refused:
                    # The cause, rather than helm's account of what followed it.
                    raise HelmConnectionDenied(own.refused[0], str(err)) from err
                raise


def _read_kubeconfig(kubeconfig: str) -> tuple[dict[str, Any], str]:
    """The kubeconfig helm is to get, parsed and vetted, and the server it names."""
    doc = load_kubeconfig(kubeconfig)
    return doc, vet_kubeconfig(doc, allow_unsafe=True).cluster.server


class HelmConnectionDenied(AddressDenied):
    """helm asked for a connection the deny list refuses: a redirect, or a chart source.

    An ``AddressDenied``, so that Ready says ``TargetAddressDenied`` as it does
    for a denied server.
    """

    def __init__(self, denied: AddressDenied, helm_said: str) -> None:
        super().__init__(denied.host, denied.address, denied.network)
        self.args = (
            f"helm was refused a connection (a redirect, or a chart source): {denied.args[0]}; "
            f"helm said: {helm_said}",
        )


def through_proxy(doc: dict[str, Any], proxy_url: str) -> str:
    """The kubeconfig ``doc``, with every cluster's ``proxy-url`` set to ``proxy_url``.

    Any ``proxy-url`` of its own (possible only with --allow-unsafe-kubeconfig)
    is replaced: the deny list is not the kubeconfig's to route around.
    ``doc`` is left as it is.
    """
    clusters = [
        {**entry, "cluster": {**entry["cluster"], "proxy-url": proxy_url}}
        if isinstance(entry, dict) and isinstance(entry.get("cluster"), dict)
        else entry
        for entry in doc.get("clusters") or []
    ]
    return for_go({**doc, "clusters": clusters})


@asynccontextmanager
async def _private_file(content: str) -> AsyncIterator[Path]:
    with _private_directory() as directory:
        path = directory / "target.kubeconfig"
        _write_private(path, content)
        yield path


@contextlib.contextmanager
def _private_directory() -> Iterator[Path]:
    # mkdtemp creates it 0700: no other user lists or opens what it holds.
    directory = tempfile.mkdtemp(prefix="modelplane-")
    try:
        yield Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_private(path: Path, content: str) -> None:
    # 0600 from its creation, not chmod-ed after: never readable by another.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
