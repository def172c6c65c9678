"""Hostile target API servers on loopback, one per kind of issue 40's findings 2 to 7.

Run by bench_hostile_neighbours.py as a process of its own, so that what
the servers spend (a flood of frames is written as fast as it is read) is
counted apart from the bench's own polling:

    python bench/hostile_targets.py DIR --kinds all --copies 1

It writes ``DIR/targets.json``, a list of ``{"kind", "kubeconfig"}``, then
serves until terminated. The HTTP/1.1 kinds are a small scripted API server
(``FakeApi``): it answers aggregated discovery with what a real
kube-apiserver answered (``DIR/discovery.json``, recorded by the bench),
keeps what it is sent (the claim Lease, the configuration's objects) and
lists it back, holds watches open, and twists one kind of answer:

- ``release-bomb`` (2): Helm's storage Secrets in the release namespaces
  are one revision each whose release is 23 MiB of ``{},`` gzipped (some
  40 KiB as a Secret), just inside the operator's inflate bound;
- ``big-body`` and ``gzip-body`` (3): the claim Lease GET is answered with
  200 MiB, plain or as ``Content-Encoding: gzip``;
- ``big-page`` (4): every LIST is a 44 MiB page of ``[],``, inside the
  64 MiB wire budget;
- ``trickle`` (5): every answer is written one byte a second.

The HTTP/2 kinds speak TLS with ALPN h2 (h2 plays the server):
``h2-one-stream`` and ``h2-no-limit`` (5) advertise MAX_CONCURRENT_STREAMS
of 1, or none, and never answer; ``empty-data`` and ``empty-settings`` (6)
answer with endless frames that carry nothing. ``tarpit`` (7) accepts the
TCP connection and never says a word of TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import json
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import DataFrame, SettingsFrame

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testenv.env import _generate_pki  # noqa: E402

from modelplane.observe.releases import MAX_RELEASE_BYTES  # noqa: E402

MiB = 1 << 20
HTTP1 = ("release-bomb", "big-body", "gzip-body", "big-page", "trickle")
HTTP2 = ("h2-one-stream", "h2-no-limit", "empty-data", "empty-settings")
KINDS = (*HTTP1, *HTTP2, "tarpit")
FINDING = {
    "release-bomb": 2,
    "big-body": 3,
    "gzip-body": 3,
    "big-page": 4,
    "trickle": 5,
    "h2-one-stream": 5,
    "h2-no-limit": 5,
    "empty-data": 6,
    "empty-settings": 6,
    "tarpit": 7,
}
CLAIM_PATH = "/apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases/modelplane-claim"
MAX_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _status(code: int, reason: str) -> bytes:
    return _json(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    )


def release_bomb_secret(namespace: str, release: str) -> dict[str, Any]:
    """One revision of ``release`` whose stored JSON is ``{},`` just inside the inflate bound.

    Finding 2's 60 MiB is refused now by the gunzip bound alone; just under
    it, the JSON is what the parse's memory bound must refuse (finding 2's
    1.4 GiB from 60 MiB is 25 times the text).
    """
    text = b'{"name":"%s","version":1,"manifest":"","chart":[' % release.encode()
    text += b"{}," * ((MAX_RELEASE_BYTES - MiB) // 3) + b'{}],"info":{"status":"deployed"}}'
    helm = base64.b64encode(gzip.compress(text, compresslevel=9))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v1",
            "namespace": namespace,
            "resourceVersion": "1",
            "labels": {"owner": "helm", "name": release, "status": "deployed", "version": "1"},
        },
        "type": "helm.sh/release.v1",
        "data": {"release": base64.b64encode(helm).decode()},
    }


class FakeApi:
    """A scripted kube-apiserver over HTTP/1.1: enough for a stack to reach its reads."""

    def __init__(self, kind: str, discovery: dict[str, Any]) -> None:
        self.kind, self.discovery = kind, discovery
        self.store: dict[str, dict[str, Any]] = {}
        self.bombs: dict[str, bytes] = {}
        self.requests = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                line, *fields = head.split("\r\n")
                method, target, _ = line.split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (f.partition(":") for f in fields if f)
                }
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                self.requests += 1
                await self.answer(method, target, headers, body, writer)
        writer.close()

    async def answer(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> None:
        url = urlsplit(target)
        path, params = url.path.rstrip("/"), dict(parse_qsl(url.query))
        if self.kind == "trickle":
            return await self._trickle(writer)
        if method == "GET" and path == CLAIM_PATH and self.kind in ("big-body", "gzip-body"):
            return await self._big_body(writer, coded=self.kind == "gzip-body")
        if method == "GET" and path in ("/api", "/apis"):
            found = self.discovery[path]
            return await _send(writer, 200, found["body"].encode(), found["type"])
        if method == "GET" and params.get("watch") in ("1", "true"):
            return await self._hold_watch(writer, float(params.get("timeoutSeconds") or 300))
        if method == "GET" and _is_collection(path):
            return await self._list(writer, path, params)
        if method == "GET":
            found_obj = self.store.get(path)
            if found_obj is None:
                return await _send(writer, 404, _status(404, "NotFound"))
            return await _send(writer, 200, _json(found_obj))
        if method == "DELETE":
            self.store.pop(path, None)
            return await _send(writer, 200, _json({"kind": "Status", "status": "Success"}))
        return await self._write(method, path, body, writer)

    async def _write(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = {}
        meta = doc.setdefault("metadata", {})
        if method == "POST":
            path = f"{path}/{meta.get('name', 'x')}"
        created = path not in self.store
        meta.update(resourceVersion=str(self.requests), uid=f"uid-{len(self.store)}")
        meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        self.store[path] = doc
        await _send(writer, 201 if created else 200, _json(doc))

    async def _list(self, writer: asyncio.StreamWriter, path: str, params: dict[str, str]) -> None:
        if self.kind == "big-page":
            head = b'{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},'
            page = head + b'"items":[{"metadata":{"name":"a"},"x":[' + b"[]," * (44 * MiB // 3)
            return await _send(writer, 200, page + b"0]}]}")
        items = [o for p, o in self.store.items() if p.rsplit("/", 1)[0] == path]
        selector = params.get("labelSelector", "")
        if self.kind == "release-bomb" and path.endswith("/secrets") and "owner=helm" in selector:
            namespace = path.split("/")[-2]
            names = selector.partition("(")[2].rstrip(")").split(",")
            blob = b",".join([await self._bomb(namespace, n) for n in names if n])
            head = b'{"kind":"SecretList","apiVersion":"v1","metadata":{"resourceVersion":"1"},'
            return await _send(writer, 200, head + b'"items":[' + blob + b"]}")
        doc = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}}
        await _send(writer, 200, _json({**doc, "items": items}))

    async def _bomb(self, namespace: str, release: str) -> bytes:
        key = f"{namespace}/{release}"
        if key not in self.bombs:
            secret = await asyncio.to_thread(release_bomb_secret, namespace, release)
            self.bombs[key] = _json(secret)
        return self.bombs[key]

    async def _hold_watch(self, writer: asyncio.StreamWriter, seconds: float) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        await asyncio.sleep(seconds)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _big_body(self, writer: asyncio.StreamWriter, *, coded: bool) -> None:
        head = _LEASE_HEAD
        if coded:
            return await _send(
                writer, 200, _gzipped_spaces(head), extra="Content-Encoding: gzip\r\n"
            )
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(head) + 200 * MiB + 2)
        )
        writer.write(head)
        spaces = b" " * MiB
        for _ in range(200):
            writer.write(spaces)
            await writer.drain()
        writer.write(b'"}')
        await writer.drain()

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
        answer += b"{" + b" " * 99_999
        for i in range(len(answer)):
            writer.write(answer[i : i + 1])
            await writer.drain()
            await asyncio.sleep(1.0)


_LEASE_HEAD = (
    b'{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",'
    b'"metadata":{"name":"modelplane-claim","namespace":"modelplane-system"},"x":"'
)
_GZIPPED: dict[bytes, bytes] = {}


def _gzipped_spaces(head: bytes) -> bytes:
    if head not in _GZIPPED:
        _GZIPPED[head] = gzip.compress(head + b" " * (200 * MiB) + b'"}', compresslevel=9)
    return _GZIPPED[head]


def _is_collection(path: str) -> bool:
    """Whether ``path`` names a collection: /api/v1/<r>, /apis/<g>/<v>/<r>, or namespaced."""
    parts = path.strip("/").split("/")
    base = 2 if parts[0] == "api" else 3
    rest = parts[base:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return len(rest) == 1


async def _send(
    writer: asyncio.StreamWriter,
    code: int,
    body: bytes,
    content_type: str = "application/json",
    extra: str = "",
) -> None:
    writer.write(
        f"HTTP/1.1 {code} X\r\nContent-Type: {content_type}\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def h2_server(kind: str) -> Serve:
    """A TLS connection's HTTP/2 server side, as ``kind`` has it behave."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        config = h2.config.H2Configuration(client_side=False, validate_inbound_headers=False)
        conn = h2.connection.H2Connection(config=config)
        conn.initiate_connection()
        conn.data_to_send()  # h2's own first SETTINGS, replaced by the kind's
        said = {} if kind == "h2-no-limit" else {MAX_STREAMS: 1 if kind == "h2-one-stream" else 100}
        writer.write(SettingsFrame(0, settings=said).serialize())
        flood: asyncio.Task[None] | None = None
        with contextlib.suppress(ConnectionError, OSError, h2.exceptions.ProtocolError):
            if kind == "empty-settings":
                flood = asyncio.create_task(_flood(writer, SettingsFrame(0).serialize()))
            while data := await reader.read(65536):
                if flood is not None:
                    continue  # the flood's frames are not h2's: what the client says is dropped
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived) and kind == "empty-data":
                        assert event.stream_id is not None
                        conn.send_headers(event.stream_id, [(":status", "200")])
                        writer.write(conn.data_to_send())
                        frame = DataFrame(event.stream_id, data=b"").serialize()
                        flood = asyncio.create_task(_flood(writer, frame))
                writer.write(conn.data_to_send())
                await writer.drain()
        if flood is not None:
            flood.cancel()
        writer.close()

    return serve


async def _flood(writer: asyncio.StreamWriter, frame: bytes) -> None:
    batch = frame * 1000
    with contextlib.suppress(ConnectionError, OSError):
        while not writer.is_closing():
            writer.write(batch)
            await writer.drain()


async def _tarpit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Reads the ClientHello and says nothing, for as long as the client waits.
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(65536):
            pass
    writer.close()


def _kubeconfig(server: str, ca: bytes | None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "hostile"}}],
    }


async def serve_all(directory: Path, kinds: list[str], copies: int) -> None:
    _generate_pki(directory / "pki")
    ca = (directory / "pki" / "ca.crt").read_bytes()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(directory / "pki" / "apiserver.crt", directory / "pki" / "apiserver.key")
    tls.set_alpn_protocols(["h2"])
    discovery = json.loads((directory / "discovery.json").read_text())
    servers, out = [], []
    for kind in kinds:
        for _ in range(copies):
            if kind in HTTP1:
                server = await asyncio.start_server(FakeApi(kind, discovery).serve, "127.0.0.1", 0)
                scheme, ca_of = "http", None
            else:
                serve = h2_server(kind) if kind in HTTP2 else _tarpit
                server = await asyncio.start_server(
                    serve, "127.0.0.1", 0, ssl=None if kind == "tarpit" else tls
                )
                scheme, ca_of = "https", ca
            port = server.sockets[0].getsockname()[1]
            servers.append(server)
            out.append(
                {"kind": kind, "kubeconfig": _kubeconfig(f"{scheme}://127.0.0.1:{port}", ca_of)}
            )
    if "gzip-body" in kinds:
        await asyncio.to_thread(_gzipped_spaces, _LEASE_HEAD)
    (directory / "targets.json").write_text(json.dumps(out))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--kinds", default="all")
    parser.add_argument("--copies", type=int, default=1)
    args = parser.parse_args()
    kinds = list(KINDS) if args.kinds == "all" else args.kinds.split(",")
    started = time.monotonic()
    asyncio.run(serve_all(args.dir, kinds, args.copies))
    print(f"hostile servers up {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
