"""helm's connections: a clean environment, and a loopback proxy that applies the deny list.

The proxy is exercised with real sockets on loopback (127.0.0.2 stands in
for a denied address: every 127/8 address is the host's own); helm is a
script that records what it was given. tests/integration/test_helm_connections.py
runs the real helm through it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from modelplane.actions import helm as helm_module
from modelplane.actions.helm import Helm, HelmConnectionDenied, HelmError, TargetHelm
from modelplane.api.spec import SecretType
from modelplane.credentials import connect as connect_module
from modelplane.credentials.connect import Credentials, Identity, connect
from modelplane.credentials.kubeconfig import load_kubeconfig
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPAddress
from modelplane.kube.errors import ErrorKind, classify
from modelplane.kube.proxy import ConnectProxy

DENIED = (*DEFAULT_DENIED, ipaddress.ip_network("127.0.0.2/32"))
POD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HELM_KUBEAPISERVER": "https://169.254.169.254",
    "HELM_KUBETOKEN": "pod-token-never-given-to-helm",
    "HELM_KUBECONTEXT": "other",
    "KUBECONFIG": "/var/run/secrets/hub.kubeconfig",
    "HTTPS_PROXY": "http://proxy.pod.example:3128",
    "https_proxy": "http://proxy.pod.example:3128",
    "NO_PROXY": "*",
    "AWS_SECRET_ACCESS_KEY": "never-given-to-helm",
    "MODELPLANE_HELM": "/usr/local/bin/helm",
}


def kubeconfig(server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }
    )


def recording_helm(tmp: Path) -> Path:
    """A helm that writes its environment and its kubeconfig (the argument after --kubeconfig)."""
    script = tmp / "helm"
    script.write_text(
        "#!/bin/sh\n"
        f"env > {tmp}/env\n"
        'while [ "$1" != --kubeconfig ]; do shift; done\n'
        f'cp "$2" {tmp}/kubeconfig\n'
    )
    script.chmod(0o755)
    return script


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


async def test_helm_gets_its_homes_and_the_proxy_and_nothing_else_of_the_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in list(os.environ):
        monkeypatch.delenv(var)
    for var, value in POD_ENV.items():
        monkeypatch.setenv(var, value)
    helm = TargetHelm.guarding(Helm(str(recording_helm(tmp_path)), tmp_path / "home"), DENIED)
    await helm.run("version", kubeconfig=kubeconfig("https://127.0.0.1:1"))
    env = read_env(tmp_path / "env")
    # The shell adds PWD (and may add SHLVL, _); everything else is what helm was given.
    given = {k: v for k, v in env.items() if k not in ("PWD", "SHLVL", "_")}
    home = tmp_path / "home"
    proxy = given["HTTPS_PROXY"]
    assert given == {
        "PATH": POD_ENV["PATH"],
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
        "NO_PROXY": "",
    }
    split = urlsplit(proxy)
    assert (split.scheme, split.hostname) == ("http", "127.0.0.1")
    # With the run's own credential, which the proxy asks of every request.
    assert split.username and split.password and len(split.password) >= 32
    # client-go takes the proxy from the kubeconfig, for every cluster.
    doc = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert [c["cluster"]["proxy-url"] for c in doc["clusters"]] == [proxy]
    assert doc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"


async def test_a_kubeconfigs_own_proxy_url_is_replaced_by_the_operators(tmp_path: Path) -> None:
    helm = TargetHelm.guarding(Helm(str(recording_helm(tmp_path)), tmp_path / "home"), DENIED)
    doc = yaml.safe_load(kubeconfig("https://127.0.0.1:1"))
    doc["clusters"][0]["cluster"]["proxy-url"] = "http://169.254.169.254:80"
    await helm.run("version", kubeconfig=yaml.safe_dump(doc))
    written = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert urlsplit(written["clusters"][0]["cluster"]["proxy-url"]).hostname == "127.0.0.1"


async def test_a_helm_run_parses_its_kubeconfig_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked and sent through the proxy from one parse: a Secret's kubeconfig
    # may be a MiB of YAML, and two parses could read two different documents.
    calls: list[str] = []

    def counted(data: bytes | str) -> dict[str, Any]:
        calls.append(str(data))
        return load_kubeconfig(data)

    monkeypatch.setattr(helm_module, "load_kubeconfig", counted)
    monkeypatch.setattr(helm_module, "load_yaml", counted, raising=False)
    helm = TargetHelm.guarding(Helm(str(recording_helm(tmp_path)), tmp_path / "home"), DENIED)
    await helm.run("version", kubeconfig=kubeconfig("https://127.0.0.1:1"))
    assert len(calls) == 1


class _Tokens:
    """A cloud identity's tokens, minted without a cloud."""

    async def token(self) -> str:
        return "minted-token"

    async def refresh(self, stale: str) -> str:
        return "minted-token"


async def test_an_identity_targets_kubeconfig_is_parsed_once_to_connect_and_once_per_helm_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every YAML parse builds a reader: counted wherever it happens.
    parses: list[object] = []
    reader_init = yaml.reader.Reader.__init__

    def counted(self: yaml.reader.Reader, stream: Any) -> None:
        parses.append(stream)
        reader_init(self, stream)

    monkeypatch.setattr(connect_module, "token_source", lambda *_: _Tokens())
    monkeypatch.setattr(yaml.reader.Reader, "__init__", counted)
    identity = Identity(SecretType.GOOGLE_APPLICATION_CREDENTIALS, b"{}", "Secret ns/sa key 'k'")
    target = await connect(
        Credentials(kubeconfig("https://127.0.0.1:1"), identity), deny=(), timeout=1.0
    )
    try:
        # Emptied of its users and vetted from the one parse.
        assert len(parses) == 1
        given = await target.helm_kubeconfig()
        assert len(parses) == 1
        helm = TargetHelm.guarding(Helm(str(recording_helm(tmp_path)), tmp_path / "home"), DENIED)
        await helm.run("version", kubeconfig=given)
        assert len(parses) == 2
    finally:
        await target.close()
    monkeypatch.undo()
    written = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert [u["user"] for u in written["users"]] == [{"token": "minted-token"}]


# ---- the proxy ---------------------------------------------------------------------


class Listener:
    """A TCP server that counts connections and answers each with a fixed HTTP reply."""

    def __init__(self) -> None:
        self.accepted = 0
        self.received: list[bytes] = []

    async def start(self, host: str) -> int:
        self.server = await asyncio.start_server(self._handle, host, 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        head = await reader.readuntil(b"\r\n\r\n")
        self.received.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()


@contextlib.asynccontextmanager
async def listening(host: str) -> AsyncIterator[tuple[Listener, int]]:
    # In the test's own event loop (an async fixture would run in another).
    listener = Listener()
    port = await listener.start(host)
    try:
        yield listener, port
    finally:
        await listener.close()


def authorization(proxy_url: str) -> str:
    """The Proxy-Authorization header Go's clients send for a proxy URL with userinfo."""
    split = urlsplit(proxy_url)
    credential = base64.b64encode(f"{split.username}:{split.password}".encode()).decode()
    return f"Proxy-Authorization: Basic {credential}\r\n"


def authorized(proxy: ConnectProxy, head: str) -> str:
    """``head`` with the proxy's credential, after its request line."""
    line, _, rest = head.partition("\r\n")
    return f"{line}\r\n{authorization(proxy.url)}{rest}"


async def ask(proxy: ConnectProxy, head: str, *, credential: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write((authorized(proxy, head) if credential else head).encode())
    await writer.drain()
    answer = await reader.read(65536)
    writer.close()
    return answer


def resolver_of(table: dict[str, list[str]], calls: list[str]) -> Any:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        calls.append(host)
        return [ipaddress.ip_address(a) for a in table[host]]

    return resolve


async def test_a_connect_to_a_denied_address_is_refused_and_never_dialled() -> None:
    async with listening("127.0.0.2") as (listener, port), ConnectProxy(DENIED) as proxy:
        answer = await ask(proxy, f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert listener.accepted == 0
    (refusal,) = proxy.refused
    assert refusal.address == ipaddress.ip_address("127.0.0.2")
    assert proxy.admitted == 0


@pytest.mark.parametrize(
    "resolved",
    [["169.254.169.254"], ["127.0.0.1", "169.254.169.254"], ["0.0.0.0"], ["::ffff:127.0.0.2"]],
)
async def test_a_name_with_any_denied_address_is_refused(resolved: list[str]) -> None:
    calls: list[str] = []
    async with ConnectProxy(DENIED, resolver=resolver_of({"api.x": resolved}, calls)) as proxy:
        answer = await ask(proxy, "CONNECT api.x:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert len(proxy.refused) == 1


async def test_a_name_is_resolved_once_and_its_checked_address_dialled() -> None:
    calls: list[str] = []
    resolve = resolver_of({"api.west.example": ["127.0.0.1"]}, calls)
    async with (
        listening("127.0.0.1") as (listener, port),
        ConnectProxy(DENIED, resolver=resolve) as proxy,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(
            authorized(proxy, f"CONNECT api.west.example:{port} HTTP/1.1\r\n\r\n").encode()
        )
        established = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"GET / HTTP/1.1\r\nHost: api.west.example\r\n\r\n")
        answer = await reader.read(65536)
        writer.close()
    assert established.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"ok")
    assert calls == ["api.west.example"]
    assert listener.accepted == 1
    assert proxy.admitted == 1


async def test_a_plain_http_request_is_forwarded_for_one_request_only() -> None:
    async with listening("127.0.0.1") as (listener, port), ConnectProxy(DENIED) as proxy:
        answer = await ask(
            proxy,
            f"GET http://127.0.0.1:{port}/index.yaml?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive\r\n\r\n",
        )
    assert answer.endswith(b"ok")
    (head,) = listener.received
    lines = head.decode().split("\r\n")
    assert lines[0] == "GET /index.yaml?x=1 HTTP/1.1"
    assert "Connection: close" in lines
    assert not [line for line in lines if line.lower().startswith("proxy-authorization")]


@pytest.mark.parametrize(
    "head",
    [
        "GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",  # https goes by CONNECT
        "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",  # no port
        "GET / HTTP/1.1\r\n\r\n",  # origin-form: not a proxy request
        "CONNECT 127.0.0.1:x HTTP/1.1\r\n\r\n",
    ],
)
async def test_requests_a_proxy_does_not_take_are_bad_requests(head: str) -> None:
    async with ConnectProxy(DENIED) as proxy:
        assert (await ask(proxy, head)).startswith(b"HTTP/1.1 400 ")
    assert proxy.admitted == 0


@pytest.mark.parametrize(
    ("head", "answer"),
    [
        # a request line longer than the stream's buffer (64 KiB) ...
        ("GET http://127.0.0.1/" + "a" * 70_000 + " HTTP/1.1\r\n\r\n", b"HTTP/1.1 414 "),
        # ... or longer than a head may be, yet within that buffer
        ("CONNECT " + "a" * 20_000 + ":443 HTTP/1.1\r\n\r\n", b"HTTP/1.1 414 "),
        # one header longer than the buffer, and a head of many short headers
        ("CONNECT h:443 HTTP/1.1\r\nX: " + "a" * 70_000 + "\r\n\r\n", b"HTTP/1.1 431 "),
        ("CONNECT h:443 HTTP/1.1\r\n" + "X: aaaaaaaa\r\n" * 2_000 + "\r\n", b"HTTP/1.1 431 "),
    ],
    ids=["line-over-buffer", "line-over-head", "header-over-buffer", "many-headers"],
)
async def test_a_head_too_long_is_answered_as_such_without_a_traceback(
    head: str, answer: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with ConnectProxy(DENIED) as proxy:
        got = await ask(proxy, head)
    assert got.startswith(answer), got[:100]
    assert proxy.admitted == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    "credential",
    [
        None,
        "Basic " + base64.b64encode(b"modelplane:a-guess").decode(),
        "Bearer a-guess",
        "another-proxys",
    ],
    ids=["none", "wrong-password", "not-basic", "another-proxys"],
)
async def test_a_request_without_the_runs_credential_is_refused_before_any_lookup(
    credential: str | None,
) -> None:
    calls: list[str] = []
    resolve = resolver_of({"api.west.example": ["127.0.0.1"]}, calls)
    async with (
        listening("127.0.0.1") as (listener, port),
        ConnectProxy(DENIED) as other,
        ConnectProxy(DENIED, resolver=resolve) as proxy,
    ):
        if credential == "another-proxys":
            header = authorization(other.url)
        else:
            header = f"Proxy-Authorization: {credential}\r\n" if credential else ""
        answers = [
            await ask(proxy, f"{line}\r\n{header}\r\n", credential=False)
            for line in (
                f"CONNECT api.west.example:{port} HTTP/1.1",
                f"GET http://api.west.example:{port}/index.yaml HTTP/1.1",
            )
        ]
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 407 "), answer
        assert b'Proxy-Authenticate: Basic realm="modelplane"' in answer
    assert calls == [] and listener.accepted == 0
    assert (proxy.admitted, proxy.unauthorized) == (0, 2)
    # Each proxy has a credential of its own.
    assert urlsplit(proxy.url).password != urlsplit(other.url).password


async def test_a_helm_that_quotes_its_proxy_credential_does_not_give_it_away(
    tmp_path: Path,
) -> None:
    # The URL, and the password alone, as no URL rule would find it.
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        'p="${HTTPS_PROXY#http://modelplane:}"\n'
        'echo "Error: proxyconnect $HTTPS_PROXY refused token ${p%@*}" >&2\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    helm = TargetHelm.guarding(Helm(str(script), tmp_path / "home"), DENIED)
    with pytest.raises(HelmError) as caught:
        await helm.run("list", kubeconfig=kubeconfig("https://127.0.0.1:1"))
    said = str(caught.value)
    assert said.startswith("Error: proxyconnect http://127.0.0.1:")
    assert said.endswith(" refused token [redacted]")


async def test_the_proxy_is_gone_when_the_block_ends() -> None:
    async with ConnectProxy(DENIED) as proxy:
        port = proxy.port
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


# ---- what a refusal becomes -------------------------------------------------------


async def test_a_refused_connection_is_the_runs_error_and_reads_as_a_denied_address(
    tmp_path: Path,
) -> None:
    port = 9  # never dialled: the proxy refuses before it connects
    # A helm that is redirected to the denied address: it asks its proxy, with
    # the credential of its URL as Go sends it, then fails.
    connect = tmp_path / "connect.py"
    connect.write_text(
        "import base64, os, socket, urllib.parse\n"
        "u = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])\n"
        "c = base64.b64encode(f'{u.username}:{u.password}'.encode()).decode()\n"
        "s = socket.create_connection((u.hostname, u.port))\n"
        f"s.sendall(f'CONNECT 127.0.0.2:{port} HTTP/1.1\\r\\n"
        "Proxy-Authorization: Basic {c}\\r\\n\\r\\n'.encode())\n"
        "s.recv(100)\n"
    )
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        f"{json.dumps(sys.executable)} {connect}\n"
        "echo 'Error: Kubernetes cluster unreachable: Forbidden' >&2\n"
        "exit 1\n"
    )
    script.chmod(0o755)
    helm = TargetHelm.guarding(Helm(str(script), tmp_path / "home"), DENIED)
    with pytest.raises(HelmConnectionDenied) as caught:
        await helm.run("list", kubeconfig=kubeconfig("https://127.0.0.1:1"))
    assert isinstance(caught.value, AddressDenied)
    assert not isinstance(caught.value, HelmError)
    assert classify(caught.value).kind is ErrorKind.ADDRESS_DENIED
    assert "127.0.0.2" in str(caught.value)
    assert "Kubernetes cluster unreachable" in str(caught.value)
