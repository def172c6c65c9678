"""A target's address and answers are untrusted: the rules, without a network.

Nothing here sends a packet: addresses are decided from given resolutions,
and answers come from an in-process transport. The integration tests
(tests/integration/test_target_address.py) show the same against servers on
loopback.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap
from typer.testing import CliRunner

from modelplane.actions.helm import Helm, TargetHelm
from modelplane.cli.main import app
from modelplane.credentials.connect import CredentialsError, connect
from modelplane.credentials.kubeconfig import KubeconfigError, parse_kubeconfig
from modelplane.kube.address import (
    DEFAULT_DENIED,
    AddressDenied,
    IPAddress,
    check_addresses,
    denied_by,
    deny_list,
)
from modelplane.kube.answers import describe_error
from modelplane.kube.client import (
    ApiStatusError,
    OpenCount,
    TargetClient,
    check_server,
    get_json,
    open_target,
    raw_http,
)
from modelplane.kube.transport import GuardedTransport

SECRET = "AKIAEXAMPLESECRET-wJalrXUtnFEMI"
TOKEN = "kubeconfig-token-never-shown"


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def net(text: str) -> Any:
    return ipaddress.ip_network(text)


# ---- the decision ------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("169.254.169.254", "169.254.0.0/16"),  # AWS, GCP, Azure, OCI, OpenStack IMDS
        ("169.254.170.2", "169.254.0.0/16"),  # ECS task metadata
        ("169.254.170.23", "169.254.0.0/16"),  # EKS Pod Identity Agent
        ("169.254.0.23", "169.254.0.0/16"),  # Tencent Cloud
        ("fd00:ec2::254", "fd00:ec2::254/128"),  # EC2 IMDS over IPv6
        ("fd00:ec2::23", "fd00:ec2::23/128"),  # EKS Pod Identity Agent over IPv6
        ("fd20:ce::254", "fd20:ce::254/128"),  # GCE, IPv6-only VMs
        ("100.100.100.200", "100.100.100.200/32"),  # Alibaba Cloud
        ("168.63.129.16", "168.63.129.16/32"),  # Azure WireServer
        ("fe80::a9fe:a9fe", "fe80::/10"),  # OpenStack over IPv6
        ("fe80::1%eth0", "fe80::/10"),
        ("::ffff:169.254.169.254", "169.254.0.0/16"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"),  # NAT64 of 169.254.169.254
        ("::ffff:100.100.100.200", "100.100.100.200/32"),
        # Unspecified: a connection to it reaches the operator's own host.
        ("0.0.0.0", "0.0.0.0/8"),
        ("0.1.2.3", "0.0.0.0/8"),
        ("::", "::/128"),
        ("::ffff:0.0.0.0", "0.0.0.0/8"),
    ],
)
def test_default_list_refuses_link_local_and_metadata_addresses(address: str, network: str) -> None:
    assert denied_by(ip(address), DEFAULT_DENIED) == net(network)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "::1",
        "10.0.0.1",
        "192.168.1.10",
        "172.16.0.1",
        "203.0.113.10",
        "100.100.100.201",
        "100.64.0.1",
        "fd00:ec2::253",
        "2001:db8::1",
        "::ffff:203.0.113.10",
    ],
)
def test_default_list_allows_loopback_and_ordinary_addresses(address: str) -> None:
    assert denied_by(ip(address), DEFAULT_DENIED) is None


@pytest.mark.parametrize(
    ("server", "address"),
    [
        ("https://0.0.0.0:6443", "0.0.0.0"),
        ("https://[::]:6443", "::"),
        # inet_aton's shorthands, which the resolver turns into 0.0.0.0.
        ("https://0:6443", "0.0.0.0"),
        ("https://0x0:6443", "0.0.0.0"),
        ("https://[::ffff:0.0.0.0]:6443", "::ffff:0.0.0.0"),
    ],
)
async def test_unspecified_addresses_and_their_spellings_are_refused(
    server: str, address: str
) -> None:
    with pytest.raises(AddressDenied) as err:
        await check_server(server, DEFAULT_DENIED)
    assert err.value.address == ip(address)
    # Loopback stays allowed: a tunnel to a target, and the tests, live there.
    await check_server("https://127.0.0.1:6443", DEFAULT_DENIED)
    await check_server("https://[::1]:6443", DEFAULT_DENIED)


def test_a_name_is_refused_when_any_address_it_resolves_to_is_denied() -> None:
    resolved = [ip("203.0.113.10"), ip("2001:db8::5"), ip("169.254.169.254")]
    with pytest.raises(AddressDenied) as err:
        check_addresses("api.west.example", resolved, DEFAULT_DENIED)
    assert str(err.value) == (
        "the target address is refused: api.west.example resolves to 169.254.169.254, "
        "in the denied range 169.254.0.0/16 (--deny-target-cidr)"
    )
    assert err.value.network == net("169.254.0.0/16")
    check_addresses("api.west.example", resolved[:2], DEFAULT_DENIED)


def test_deny_list_values_replace_the_default() -> None:
    assert deny_list(None) == DEFAULT_DENIED
    assert deny_list([]) == DEFAULT_DENIED
    assert deny_list(["127.0.0.2/32"]) == (net("127.0.0.2/32"),)
    assert deny_list(["default", "10.0.0.0/8"]) == (*DEFAULT_DENIED, net("10.0.0.0/8"))
    assert deny_list(["none"]) == ()
    assert deny_list(["169.254.169.254"]) == (net("169.254.169.254/32"),)


@pytest.mark.parametrize(
    ("value", "words"),
    [("10.0.0.1/8", "has host bits set"), ("metadata", "does not appear to be")],
)
def test_deny_list_names_a_bad_value(value: str, words: str) -> None:
    with pytest.raises(ValueError) as err:
        deny_list([value])
    assert words in str(err.value)
    assert "expected a CIDR" in str(err.value)


@pytest.mark.parametrize("command", ["run", "check"])
def test_cli_names_the_flag_of_a_bad_cidr(command: str, tmp_path: Path) -> None:
    args = [command, "--deny-target-cidr", "10.0.0.1/8"]
    if command == "check":
        args += ["--kubeconfig", str(tmp_path / "kubeconfig")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--deny-target-cidr" in result.output
    assert "has host bits set" in result.output
    assert "Traceback" not in result.output


# ---- the transport: where requests go -----------------------------------------


Handler = Callable[[httpx2.Request], httpx2.Response]


class Recorder:
    """An in-process server: records what reaches it and answers with ``handler``."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.requests: list[httpx2.Request] = []
        self.handler = handler or (lambda _: httpx2.Response(200, json={"kind": "APIVersions"}))

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.handler(request)

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self)


def resolver(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ip(a) for a in table[host]]

    return resolve


def guarded(server: Recorder, table: dict[str, list[str]] | None = None, **kw: Any) -> Any:
    return GuardedTransport(
        kw.get("deny", DEFAULT_DENIED), server.transport(), resolver=resolver(table or {})
    )


@pytest.mark.parametrize(
    ("host", "resolved"),
    [
        ("metadata.google.internal", ["169.254.169.254"]),
        ("imds.example", ["fd00:ec2::254"]),
        ("dual.example", ["198.51.100.7", "fd00:ec2::254"]),
        ("mapped.example", ["::ffff:169.254.169.254"]),
    ],
)
async def test_a_denied_name_is_never_connected_to(host: str, resolved: list[str]) -> None:
    server = Recorder()
    async with httpx2.AsyncClient(transport=guarded(server, {host: resolved})) as http:
        with pytest.raises(AddressDenied):
            await http.get(f"https://{host}:6443/api")
    assert server.requests == []


async def test_a_denied_address_literal_is_never_connected_to() -> None:
    server = Recorder()
    async with httpx2.AsyncClient(transport=guarded(server)) as http:
        with pytest.raises(AddressDenied):
            await http.get("http://169.254.169.254/latest/meta-data/")
        with pytest.raises(AddressDenied):
            await http.get("http://[fd00:ec2::254]/latest/meta-data/")
    assert server.requests == []


async def test_the_request_goes_to_the_checked_address_and_keeps_its_name() -> None:
    server = Recorder()
    transport = guarded(server, {"api.west.example": ["203.0.113.10", "203.0.113.11"]})
    async with httpx2.AsyncClient(transport=transport) as http:
        response = await http.get("https://api.west.example:6443/api")
    assert response.status_code == 200
    (sent,) = server.requests
    # Connected to the address that was checked, not to a second lookup's answer.
    assert sent.url.host == "203.0.113.10"
    assert sent.url.port == 6443
    assert sent.headers["host"] == "api.west.example:6443"
    assert sent.extensions["sni_hostname"] == "api.west.example"
    # What the caller sees still names the host it asked for.
    assert response.request.url.host == "api.west.example"


async def test_a_refused_connection_falls_back_to_the_next_checked_address() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.host == "2001:db8::5":
            raise httpx2.ConnectError("[Errno 101] Network is unreachable")
        return httpx2.Response(200, json={})

    server = Recorder(handler)
    transport = guarded(server, {"api.west.example": ["2001:db8::5", "203.0.113.10"]})
    async with httpx2.AsyncClient(transport=transport) as http:
        assert (await http.get("https://api.west.example/api")).status_code == 200
    assert [r.url.host for r in server.requests] == ["2001:db8::5", "203.0.113.10"]


async def test_the_deny_list_is_the_one_given() -> None:
    server = Recorder()
    deny = (net("127.0.0.2/32"),)
    async with httpx2.AsyncClient(transport=guarded(server, deny=deny)) as http:
        with pytest.raises(AddressDenied) as err:
            await http.get("http://127.0.0.2:8080/api")
        # The default list no longer applies when another is given.
        await http.get("http://169.254.169.254/api")
    assert "127.0.0.2/32" in str(err.value)
    assert [r.url.host for r in server.requests] == ["169.254.169.254"]


# ---- the transport: what comes back ----------------------------------------------


def answer(
    code: int, body: bytes, content_type: str | None, **headers: str
) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(_: httpx2.Request) -> httpx2.Response:
        h = dict(headers)
        if content_type is not None:
            h["content-type"] = content_type
        return httpx2.Response(
            code, headers=h, content=body, extensions={"reason_phrase": SECRET.encode()}
        )

    return handler


NOT_STATUS = {
    "metadata-json": (
        403,
        json.dumps({"Code": "Success", "AccessKeyId": SECRET, "message": SECRET}).encode(),
        "application/json",
        "an answer of type application/json, not a Kubernetes Status",
    ),
    "html": (
        500,
        f"<html><body>{SECRET}</body></html>".encode(),
        "text/html; charset=utf-8",
        "an answer of type text/html, not a Kubernetes Status",
    ),
    "text": (404, SECRET.encode(), "text/plain", "an answer of type text/plain, not a Kubernetes"),
    "odd-type": (500, SECRET.encode(), f"{SECRET}/x y", "an answer of no recognisable type"),
    "no-type": (502, SECRET.encode(), None, "an answer of no recognisable type"),
    "redirect": (302, b"", "text/html", "an answer of type text/html, not a Kubernetes"),
    "huge-status": (
        500,
        json.dumps({"kind": "Status", "message": "x" * 70000}).encode(),
        "application/json",
        "an answer of type application/json, not a Kubernetes Status",
    ),
}


@pytest.mark.parametrize("case", list(NOT_STATUS), ids=list(NOT_STATUS))
async def test_an_error_answer_that_is_not_a_status_is_told_by_code_and_type(case: str) -> None:
    code, body, content_type, words = NOT_STATUS[case]
    server = Recorder(answer(code, body, content_type, location=f"http://{SECRET}/"))
    async with httpx2.AsyncClient(transport=guarded(server)) as http:
        response = await http.get("http://127.0.0.1:6443/api")
    assert response.status_code == code
    assert response.headers["content-type"] == "application/json"
    assert "location" not in response.headers
    assert SECRET not in response.text
    assert SECRET not in response.reason_phrase
    status = response.json()
    assert status["kind"] == "Status"
    assert status["code"] == code
    assert words in status["message"]
    # httpx's own error text holds the reason phrase and the Location.
    with pytest.raises(httpx2.HTTPStatusError) as err:
        response.raise_for_status()
    assert SECRET not in str(err.value)


async def test_a_status_answer_keeps_its_message_cut_to_length() -> None:
    long = {"kind": "Status", "apiVersion": "v1", "code": 403, "message": "no " * 400}
    short = {**long, "message": 'namespaces is forbidden: User "x" cannot list'}
    for doc in (long, short):
        body = json.dumps(doc).encode()
        server = Recorder(answer(403, body, "application/json; charset=utf-8"))
        async with httpx2.AsyncClient(transport=guarded(server)) as http:
            status = (await http.get("http://127.0.0.1:6443/api")).json()
        assert status["code"] == 403
        assert status["message"] == (doc["message"] if doc is short else "no " * 166 + "no...")


async def test_a_success_is_passed_on_untouched() -> None:
    body = b'{"kind":"APIVersions","versions":["v1"]}'
    server = Recorder(answer(200, body, "application/json", **{"x-custom": "kept"}))
    async with httpx2.AsyncClient(transport=guarded(server)) as http:
        response = await http.get("http://127.0.0.1:6443/api")
    assert response.content == body
    assert response.headers["x-custom"] == "kept"


# ---- lightkube and discovery on top of it -----------------------------------------


def config(server: str = "http://api.west.example:6443") -> Any:
    return KubeConfig.from_dict(kubeconfig_doc(server)).get()


def kubeconfig_doc(server: str, **cluster: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
    }


def target_client(server: Recorder, guard: bool = True) -> TargetClient:
    inner = server.transport()
    table = {"api.west.example": ["203.0.113.10"]}
    transport = (
        GuardedTransport(DEFAULT_DENIED, inner, resolver=resolver(table)) if guard else inner
    )
    return TargetClient(config(), ConnectionParams(transport=transport))  # type: ignore[arg-type]


@pytest.mark.parametrize("case", ["metadata-json", "html", "text"])
async def test_lightkube_errors_carry_no_body_that_is_not_a_status(case: str) -> None:
    code, body, content_type, words = NOT_STATUS[case]
    server = Recorder(answer(code, body, content_type))
    client = target_client(server)
    try:
        with pytest.raises(ApiError) as err:
            await client.get(ConfigMap, "x", namespace="y")
    finally:
        await client.close()
    assert err.value.status.code == code
    assert SECRET not in str(err.value)
    assert SECRET not in describe_error(err.value)
    assert words in describe_error(err.value)


@pytest.mark.parametrize("case", ["metadata-json", "html", "text"])
async def test_discovery_repeats_only_a_status_message_even_unguarded(case: str) -> None:
    code, body, content_type, words = NOT_STATUS[case]
    client = target_client(Recorder(answer(code, body, content_type)), guard=False)
    try:
        with pytest.raises(ApiStatusError) as err:
            await get_json(client, "/api")
    finally:
        await client.close()
    assert err.value.status == code
    assert SECRET not in str(err.value)
    assert words in err.value.reason


async def test_lightkube_error_from_an_unguarded_client_is_described_safely() -> None:
    # lightkube makes an ApiError of any JSON error answer, kind unchecked.
    code, body, content_type, words = NOT_STATUS["metadata-json"]
    client = target_client(Recorder(answer(code, body, content_type)), guard=False)
    try:
        with pytest.raises(ApiError) as err:
            await client.get(ConfigMap, "x", namespace="y")
    finally:
        await client.close()
    assert SECRET in str(err.value)  # lightkube's own text repeats it
    assert SECRET not in describe_error(err.value)
    assert describe_error(err.value) == f"403: {words}"


def test_describe_error_names_protocol_errors_without_the_peers_bytes() -> None:
    err = httpx2.RemoteProtocolError(f"illegal status line: bytearray(b'{SECRET}')")
    assert describe_error(err) == "RemoteProtocolError"
    refused = httpx2.ConnectError("[Errno 111] Connection refused")
    assert describe_error(refused) == "[Errno 111] Connection refused"


async def test_a_target_counts_as_open_until_closed_once() -> None:
    count = OpenCount()
    first = await open_target(config("https://203.0.113.10:6443"), deny=(), count=count)
    async with await open_target(config("https://203.0.113.11:6443"), deny=(), count=count):
        assert count() == 2
    assert count() == 1
    await first.close()
    await first.close()  # a second close changes nothing
    assert count() == 0


def test_discovery_refuses_a_client_that_is_not_a_targets() -> None:
    from lightkube import AsyncClient

    with pytest.raises(TypeError, match="the client of a Target"):
        raw_http(AsyncClient(config()))


# ---- opening a target, and helm --------------------------------------------------


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("http://169.254.169.254", "169.254.169.254 is, in the denied range 169.254.0.0/16"),
        ("https://[fd00:ec2::254]:443", "fd00:ec2::254 is, in the denied range fd00:ec2::254/128"),
        ("https://100.100.100.200:6443", "in the denied range 100.100.100.200/32"),
    ],
)
async def test_connect_refuses_a_denied_server_and_says_where(server: str, words: str) -> None:
    text = yaml.safe_dump(kubeconfig_doc(server))
    with pytest.raises(CredentialsError) as err:
        await connect(text)
    assert err.value.reason == "TargetAddressDenied"
    assert words in str(err.value)
    assert TOKEN not in str(err.value)


async def test_helm_never_runs_against_a_refused_address(tmp_path: Path) -> None:
    ran = tmp_path / "helm-ran"
    fake = tmp_path / "helm"
    fake.write_text(f"#!/bin/sh\ntouch {ran}\n")
    fake.chmod(0o755)
    helm = TargetHelm.guarding(Helm(str(fake), tmp_path), DEFAULT_DENIED)
    text = yaml.safe_dump(kubeconfig_doc("https://169.254.169.254:6443"))
    with pytest.raises(AddressDenied):
        await helm.uninstall("mp-x", "ns", text)
    assert not ran.exists()
    await helm.run("version", kubeconfig=yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1")))
    assert ran.exists()


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ({"proxy-url": "http://169.254.169.254"}, "'proxy-url'"),
        ({"server": "169.254.169.254:6443"}, "not an https:// (or http://) URL"),
        ({"server": "unix:///var/run/k8s.sock"}, "not an https:// (or http://) URL"),
        ({"server": "https://:6443"}, "not an https:// (or http://) URL"),
        ({"server": "https://api.example:port"}, "not an https:// (or http://) URL"),
    ],
    ids=["proxy-url", "no-scheme", "unix", "no-host", "bad-port"],
)
def test_kubeconfig_server_and_proxy_are_vetted(cluster: dict[str, Any], words: str) -> None:
    doc = kubeconfig_doc(cluster.pop("server", "https://203.0.113.10:6443"), **cluster)
    with pytest.raises(KubeconfigError) as err:
        parse_kubeconfig(yaml.safe_dump(doc))
    assert words in str(err.value)
    assert "169.254" not in str(err.value)


@pytest.mark.parametrize(
    "stderr",
    [
        # What helm v3.19 prints for a 500 with an HTML body.
        "Error: INSTALLATION FAILED: Kubernetes cluster unreachable: an error on the server "
        f'("<html><h1>{SECRET}</h1><a href=\\"x\\">") has prevented the request from succeeding',
        "Error: INSTALLATION FAILED: Kubernetes cluster unreachable: Object 'Kind' is missing "
        f'in \'{{"AccessKeyId":"{SECRET}"}}\'',
    ],
    ids=["server-error", "missing-kind"],
)
def test_helm_messages_drop_the_answer_client_go_quotes(stderr: str) -> None:
    from modelplane.actions.helm import HelmError

    text = describe_error(HelmError(stderr))
    assert SECRET not in text
    assert text.startswith("Error: INSTALLATION FAILED: Kubernetes cluster unreachable: ")
    assert "not repeated" in text
