"""Fetched manifests follow redirects one hop at a time, each hop checked against the deny list.

Servers on loopback: a redirect to 0.0.0.0 (denied by default, and on Linux
a connection to it reaches this host) would land on a listener here, which
counts every connection.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from tests.serving import serve_requests

from modelplane.actions.apply import ManifestError, fetch_manifests
from modelplane.kube.address import AddressDenied

CRD = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a.b}\n"


class Counter:
    """A listener on 127.0.0.1 that answers one manifest and counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.recv(65536)
            body = CRD.encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            conn.close()


@pytest.fixture
def counter() -> Iterator[Counter]:
    found = Counter()
    yield found
    found.sock.close()
    found.thread.join(5)


def redirecting(to: Callable[[str], str | None], seen: list[str]) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            location = to(self.path)
            if location is None:
                body = CRD.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


async def test_a_redirect_to_a_denied_address_is_refused_before_it_is_connected_to(
    counter: Counter,
) -> None:
    seen: list[str] = []
    handler = redirecting(lambda _: f"http://0.0.0.0:{counter.port}/manifests.yaml", seen)
    with serve_requests(handler) as url, pytest.raises(AddressDenied) as caught:
        await fetch_manifests(f"{url}/v1/manifests.yaml")
    assert seen == ["/v1/manifests.yaml"]
    assert counter.accepted == 0
    assert "0.0.0.0/8" in str(caught.value)


async def test_redirects_are_followed_hop_by_hop_up_to_a_limit() -> None:
    seen: list[str] = []
    handler = redirecting(lambda path: f"{path}x", seen)
    with serve_requests(handler) as url, pytest.raises(ManifestError, match="5 redirects"):
        await fetch_manifests(f"{url}/m")
    assert len(seen) == 6


async def test_a_relative_redirect_within_the_limit_is_followed() -> None:
    seen: list[str] = []
    hops = {"/a": "/b", "/b": "c"}
    with serve_requests(redirecting(lambda path: hops.get(path), seen)) as url:
        objects = await fetch_manifests(f"{url}/a")
    assert seen == ["/a", "/b", "/c"]
    assert [o["metadata"]["name"] for o in objects] == ["a.b"]


async def test_a_redirect_from_https_to_http_is_refused() -> None:
    from modelplane.kube.fetch import FetchError, next_hop

    with pytest.raises(FetchError, match="http://"):
        next_hop("https://mirror.example/a", "http://mirror.example/b")
    assert next_hop("https://mirror.example/a/b", "../c") == "https://mirror.example/c"
    with pytest.raises(FetchError, match="file"):
        next_hop("http://mirror.example/a", "file:///etc/passwd")
