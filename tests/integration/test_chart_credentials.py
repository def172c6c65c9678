"""A chart repository's user and password stay secret: the real helm, the real operator.

A loopback chart repository requires basic auth, and is named by a URL with
the credentials in it, as a mirror often is. helm is the built one behind a
wrapper that records every command line it is started with: what any local
user can read in /proc.

- The operator is given such a repository for cert-manager
  (``--chart-repository-for``) that holds no chart it asks for, so helm
  fails and quotes the repository it was given. The password is in no
  status message, no event, no line of the operator's log.
- ``TargetHelm`` renders a chart from such a repository: the credentials
  reach it, yet neither is on any command line helm was started with, and
  the repository file that carried them is private and gone after the run.
- ``TargetHelm`` told a wrong password says the repository refused it,
  without the password.
- An ``oci://user:password@registry`` reference (a registry over TLS on
  loopback that asks for basic auth): helm sends the credentials from a
  registry file, and neither they nor the password are on its command line
  or in its error.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration import substrate as substrate_module
from tests.integration.hubs import Harness
from tests.integration.substrate import Helm as PackagingHelm
from tests.integration.test_helm_connections import _self_signed
from tests.serving import serve_requests
from tests.testenv import find_binaries
from tests.waiting import wait_for

from modelplane.actions.helm import Helm, HelmError, TargetHelm
from modelplane.kube.address import DEFAULT_DENIED
from modelplane.plan.model import PlannedRelease, ReleaseAction, ReleaseState

USER = "mirror-user"
PASSWORD = "pa55-w0rd-of-the-mirror"
CHARTS = Path(__file__).resolve().parent.parent / "fixtures" / "charts"
# helm template asks no API server; the kubeconfig's server is only checked.
KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "x",
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
)


@dataclass
class AuthRepo:
    """A chart repository on loopback that serves its directory to USER:PASSWORD only."""

    url: str
    directory: Path
    authorizations: list[str | None] = field(default_factory=list)

    def url_with(self, user: str = USER, password: str = PASSWORD) -> str:
        return self.url.replace("http://", f"http://{user}:{password}@", 1)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def auth_repo(helm: PackagingHelm, tmp_path: Path) -> Iterator[AuthRepo]:
    """mp-demo, packaged and indexed with URLs relative to the repository, behind basic auth."""
    directory = tmp_path / "auth-repo"
    directory.mkdir()
    helm.run("package", str(CHARTS / "mp-demo"), "--destination", str(directory))
    helm.run("repo", "index", str(directory))
    seen: list[str | None] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != _basic(USER, PASSWORD):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    with serve_requests(functools.partial(Handler, directory=str(directory))) as url:
        yield AuthRepo(url, directory, seen)


@pytest.fixture
def recorded_helm(testbin: dict[str, Path], tmp_path: Path) -> tuple[Path, Path]:
    """(a helm that appends its command line to a file and runs the built helm, that file).

    For a ``--repository-config`` it also appends that file's mode and path.
    """
    argv = tmp_path / "helm-argv"
    argv.touch()
    wrapper = tmp_path / "recorded-helm"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {argv}\n'
        "prev=\n"
        'for a in "$@"; do\n'
        f'  [ "$prev" = --repository-config ] && stat -c "mode %a %n" "$a" >> {argv}\n'
        '  prev="$a"\n'
        "done\n"
        f'exec {testbin["helm"]} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, argv


def _release(repository: str, chart: str = "mp-demo", version: str = "0.1.0") -> PlannedRelease:
    return PlannedRelease(
        component="demo",
        name="mp-demo",
        chart=chart,
        repository=repository,
        version=version,
        namespace="default",
        values={},
        wait=False,
        depends_on=[],
        digest="d",
        state=ReleaseState.ABSENT,
        action=ReleaseAction.INSTALL,
    )


def _target_helm(binary: Path, home: Path) -> TargetHelm:
    return TargetHelm.guarding(Helm(str(binary), home, timeout_seconds=30), DEFAULT_DENIED)


def _events(h: Harness) -> list[dict[str, Any]]:
    items = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").json()["items"]
    return list(items)


def test_a_failing_chart_repository_with_credentials_keeps_the_password_out_of_everything_said(
    harness: Harness,
    auth_repo: AuthRepo,
    recorded_helm: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrapper, argv = recorded_helm
    built = find_binaries()
    monkeypatch.setattr(substrate_module, "find_binaries", lambda: {**built, "helm": wrapper})
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})  # Managed: cert-manager is a helm release
    harness.start("--chart-repository-for", f"cert-manager={auth_repo.url_with()}")

    def failed() -> dict[str, Any] | None:
        for component in harness.status().get("components", []):
            if component["name"] == "cert-manager" and "not found" in component.get("message", ""):
                return dict(component)
        return None

    component = wait_for("cert-manager failing on its chart", failed, deadline=120)
    # What helm said is still told: which chart was not found.
    assert "cert-manager" in component["message"]
    # helm reached the repository with the credentials it was given.
    assert _basic(USER, PASSWORD) in auth_repo.authorizations

    def warned() -> list[dict[str, Any]] | None:
        found = [e for e in _events(harness) if "not found" in e.get("message", "")]
        return found or None

    wait_for("a Warning event of the failure", warned, deadline=60)
    harness.stop()
    assert PASSWORD not in json.dumps(harness.status())
    assert PASSWORD not in json.dumps(_events(harness))
    log = harness.log.read_text()
    assert "not found" in log
    assert PASSWORD not in log
    # Nor on helm's command lines, which any local user reads in /proc.
    started = argv.read_text()
    assert "cert-manager" in started
    assert PASSWORD not in started and USER not in started


async def test_a_chart_comes_from_a_repository_with_credentials_kept_off_helms_command_line(
    auth_repo: AuthRepo, recorded_helm: tuple[Path, Path], tmp_path: Path
) -> None:
    wrapper, argv = recorded_helm
    helm = _target_helm(wrapper, tmp_path / "home")
    rendered = await helm.template(_release(auth_repo.url_with()), KUBECONFIG)
    assert "kind: ConfigMap" in rendered
    # The index and the chart, each asked for with the credentials.
    assert auth_repo.authorizations == [_basic(USER, PASSWORD)] * 2
    started = argv.read_text()
    assert PASSWORD not in started and USER not in started
    # One private file for the run's two helms (the index, then the chart), gone after.
    modes = {tuple(line.split()[1:]) for line in started.splitlines() if line.startswith("mode ")}
    ((mode, path),) = modes
    assert mode == "600"
    assert not Path(path).exists()


async def test_a_wrong_password_is_said_as_refused_without_the_password(
    auth_repo: AuthRepo, recorded_helm: tuple[Path, Path], tmp_path: Path
) -> None:
    wrapper, _ = recorded_helm
    helm = _target_helm(wrapper, tmp_path / "home")
    wrong = "not-the-mirrors-password"
    with pytest.raises(HelmError) as caught:
        await helm.template(_release(auth_repo.url_with(password=wrong)), KUBECONFIG)
    said = str(caught.value)
    assert "401" in said
    assert wrong not in said and PASSWORD not in said
    assert auth_repo.authorizations == [_basic(USER, wrong)]


@dataclass
class AuthRegistry:
    """An OCI registry over TLS on loopback: 401 without USER:PASSWORD, else 404 for all."""

    url: str
    authorizations: list[str | None]


@pytest.fixture
def auth_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AuthRegistry]:
    cert, key = _self_signed()
    (tmp_path / "registry.pem").write_bytes(cert)
    (tmp_path / "registry.key").write_bytes(key)
    # helm trusts it as the operator's helm trusts a mirror's private CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "registry.pem"))
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != _basic(USER, PASSWORD):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="registry"')
            else:
                self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "registry.pem", tmp_path / "registry.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield AuthRegistry(f"oci://127.0.0.1:{server.server_address[1]}/charts", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_an_oci_registry_gets_the_credentials_from_a_file_not_helms_command_line(
    auth_registry: AuthRegistry, recorded_helm: tuple[Path, Path], tmp_path: Path
) -> None:
    wrapper, argv = recorded_helm
    helm = _target_helm(wrapper, tmp_path / "home")
    reference = auth_registry.url.replace("oci://", f"oci://{USER}:{PASSWORD}@", 1)
    with pytest.raises(HelmError) as caught:
        await helm.template(_release(reference), KUBECONFIG)
    # The registry was asked with the credentials, and answered that it has no such chart.
    assert _basic(USER, PASSWORD) in auth_registry.authorizations
    said = str(caught.value)
    assert "not found" in said
    assert PASSWORD not in said
    started = argv.read_text()
    assert f"{auth_registry.url}/mp-demo" in started
    assert PASSWORD not in started and USER not in started
