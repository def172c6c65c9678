"""The loopback proxy every helm run connects through: the deny list, for helm.

helm opens its own connections, so the guarded transport (``transport.py``)
never sees them: before this proxy only the kubeconfig's server was checked,
and client-go then followed whatever redirect the server answered, into any
range (a blind request to the metadata service, from the operator's pod).
Chart downloads went wherever the repository's index pointed.

What was chosen, and why:

- **A proxy the operator owns, not a rule about client-go's behaviour.**
  client-go follows redirects without a hook to veto them; the Go resolver
  it uses is not ours; and a check before helm runs is a second resolution,
  which a name can answer differently (DNS rebinding). A proxy is the one
  place every connection of helm passes and the operator decides, so one
  rule covers the API server, its redirects, chart repositories, their
  redirects and OCI registries alike.
- **How helm is pointed at it.** The kubeconfig helm gets names it as every
  cluster's ``proxy-url``, which client-go applies to every request, loopback
  included; ``HTTPS_PROXY`` and ``HTTP_PROXY`` carry chart downloads (Go's
  ``ProxyFromEnvironment``), with ``NO_PROXY`` empty. Go never proxies a
  request to ``localhost`` or a loopback address from the environment, so a
  chart repository on loopback is reached directly; loopback is allowed by
  the deny list's default, and a deny list that names loopback is enforced
  for the API server (proxy-url) but not for such chart downloads.
- **One resolution, and the checked address dialled.** On each ``CONNECT``
  (or plain ``http://`` request) the host is resolved once, every address is
  checked (``address.vet``: a name with any denied address is refused), and
  the proxy connects to an address it checked, by number, never by name. A
  refused host gets a 403 and is recorded, so the run's failure can say
  which connection was refused rather than only helm's words.
- **Per helm run, on 127.0.0.1, on a port the kernel picks.** Its life is the
  run's, so nothing listens between runs, every tunnel closes with the run,
  and what it refused belongs to that run's error.
- **Only for the helm it was made for.** Any local process can connect to a
  loopback port, and a connection through the proxy comes from the
  operator's address (a NetworkPolicy allowing the operator allows it). So
  each proxy makes a random credential and its URL carries it as userinfo;
  Go sends it as ``Proxy-Authorization: Basic`` on every CONNECT and plain
  request, and a request without it (compared in constant time) gets a 407
  before anything is resolved or dialled. The credential is in helm's
  environment and its private kubeconfig only, never on a command line,
  and dies with the run.

A plain ``http://`` request is forwarded with ``Connection: close``: a
client that reused the connection for another host would otherwise reach
the first host's address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
from collections.abc import Iterable
from secrets import token_urlsafe
from urllib.parse import urlsplit

import httpx2

from modelplane.kube.address import (
    AddressDenied,
    IPAddress,
    IPNetwork,
    Resolver,
    resolve,
    vet,
)

log = logging.getLogger("modelplane.kube.proxy")

# A request head (the CONNECT line and helm's few headers) is far smaller.
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
CHUNK = 64 * 1024
# How long, and how much, a client told its head is too long may go on sending.
LINGER_SECONDS = 1.0
LINGER_BYTES = 1024 * 1024
# The user of every proxy's credential; the password is each proxy's own.
PROXY_USER = "modelplane"
# Hop-by-hop headers, and the ones meant for the proxy, are not forwarded.
_DROPPED = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te"}


class BadRequest(ValueError):
    """A request head this proxy does not take."""

    code, reason = 400, "Bad Request"


class RequestLineTooLong(BadRequest):
    code, reason = 414, "URI Too Long"


class HeadTooLong(BadRequest):
    code, reason = 431, "Request Header Fields Too Large"


class ConnectProxy:
    """An HTTP proxy on loopback that connects only to addresses the deny list admits.

    ``async with ConnectProxy(deny) as proxy``: ``proxy.url`` is where it
    listens, its credential in it; ``refused`` holds every refusal, in order;
    ``admitted`` counts the connections it made and ``unauthorized`` the
    requests without the credential. Leaving the block closes the listener
    and every tunnel.
    """

    def __init__(
        self,
        deny: Iterable[IPNetwork],
        *,
        resolver: Resolver = resolve,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self._deny = tuple(deny)
        self._resolve = resolver
        self._connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.refused: list[AddressDenied] = []
        self.admitted = 0
        self.unauthorized = 0
        self.port = 0
        # URL-safe, so it needs no escaping as a URL's password.
        self._token = token_urlsafe(32)
        credential = f"{PROXY_USER}:{self._token}".encode()
        self._authorization = base64.b64encode(credential)

    @property
    def url(self) -> str:
        """Where it listens, with the credential it asks of every request (a secret)."""
        return f"http://{PROXY_USER}:{self._token}@127.0.0.1:{self.port}"

    @property
    def secrets(self) -> tuple[str, ...]:
        """What of it is secret: for ``redact``, should helm ever quote its URL."""
        return (self._token,)

    def environment(self) -> dict[str, str]:
        """The variables that send Go's HTTP clients (helm's chart downloads) through it."""
        return {"HTTPS_PROXY": self.url, "HTTP_PROXY": self.url, "NO_PROXY": ""}

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or sent a head too long to be helm's
        except asyncio.CancelledError:
            pass  # closed with the run: the tunnel ends here, as meant
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), HEAD_TIMEOUT_SECONDS)
            method, host, port, forwarded = _parse(head)
        except BadRequest as err:
            await _reply(writer, err.code, err.reason)
            if isinstance(err, HeadTooLong | RequestLineTooLong):
                await _linger(reader)
            return
        except TimeoutError:
            await _reply(writer, 400, "Bad Request")
            return
        if not self._authorized(head):
            # Said to no log: any local process can make as many as it likes.
            self.unauthorized += 1
            await _reply(
                writer,
                407,
                "Proxy Authentication Required",
                'Proxy-Authenticate: Basic realm="modelplane"\r\n',
            )
            return
        try:
            addresses = await vet(host, port, self._deny, self._resolve)
        except AddressDenied as err:
            self.refused.append(err)
            log.warning("refused helm a connection: %s", err)
            await _reply(writer, 403, "Forbidden by the operator's --deny-target-cidr")
            return
        except httpx2.TransportError:
            await _reply(writer, 502, "Bad Gateway (cannot resolve the host)")
            return
        upstream = await self._dial(addresses, port)
        if upstream is None:
            await _reply(writer, 502, "Bad Gateway (cannot connect)")
            return
        self.admitted += 1
        up_reader, up_writer = upstream
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(forwarded)
                await up_writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await up_writer.wait_closed()

    def _authorized(self, head: bytes) -> bool:
        given = _header(head, "proxy-authorization")
        if given is None:
            return False
        scheme, _, credential = given.partition(" ")
        # Constant time: how much of a guess matched must not show in the timing.
        matched = hmac.compare_digest(credential.strip().encode(), self._authorization)
        return matched and scheme.lower() == "basic"

    async def _dial(
        self, addresses: list[IPAddress], port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for address in addresses:
            try:
                # By number: the address just checked, never a second lookup.
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), port), self._connect_timeout
                )
            except (OSError, TimeoutError):
                continue  # nothing was sent: the next checked address may answer
        return None


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers, at most ``MAX_HEAD`` bytes of them.

    A line longer than the stream's buffer is a ``LimitOverrunError`` of
    ``readuntil`` (``readline`` turns it into a bare ValueError): either is
    a head too long, answered as such, never an error of the proxy's own.
    """
    head = bytearray()
    while not head.endswith(b"\r\n\r\n"):
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise _too_long(head) from None
        except asyncio.IncompleteReadError:
            raise BadRequest("the connection closed mid-request") from None
        if len(head) + len(line) > MAX_HEAD:
            raise _too_long(head)
        head += line
    return bytes(head)


def _too_long(head: bytearray) -> BadRequest:
    if not head:
        return RequestLineTooLong("the request line is too long")
    return HeadTooLong("the request head is too long")


async def _linger(reader: asyncio.StreamReader) -> None:
    """Read and drop what the client still sends, for a little while.

    Closed with unread input, the socket would answer with a reset, which
    can reach the client before it has read the reply it was just sent.
    """
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            dropped = 0
            while dropped < LINGER_BYTES and (data := await reader.read(CHUNK)):
                dropped += len(data)


def _parse(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, the head to forward) of a CONNECT or absolute-form request."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the request head is not ASCII") from None
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("not an HTTP/1.x request line")
    method, target, version = parts
    if method == "CONNECT":
        # authority-form, host:port, [v6]:port (RFC 9110 9.3.6)
        split = urlsplit(f"//{target}")
        try:
            port = split.port
        except ValueError:
            raise BadRequest("CONNECT to a port that is not a number") from None
        if not split.hostname or port is None:
            raise BadRequest("CONNECT needs host:port")
        return method, split.hostname, port, b""
    split = urlsplit(target)
    try:
        port = split.port or 80
    except ValueError:
        raise BadRequest("a port that is not a number") from None
    if split.scheme != "http" or not split.hostname:
        raise BadRequest("only CONNECT and absolute http:// requests are proxied")
    path = split.path or "/"
    if split.query:
        path += f"?{split.query}"
    headers = [
        line
        for line in header_lines
        if line and line.split(":", 1)[0].strip().lower() not in _DROPPED
    ]
    forwarded = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
    return method, split.hostname, port, forwarded.encode("ascii")


def _header(head: bytes, name: str) -> str | None:
    """The value of the head's first header ``name`` (lower case); the head is ASCII."""
    for line in head.decode("ascii").split("\r\n")[1:]:
        field, colon, value = line.partition(":")
        if colon and field.strip().lower() == name:
            return value.strip()
    return None


async def _reply(writer: asyncio.StreamWriter, code: int, reason: str, headers: str = "") -> None:
    status = f"HTTP/1.1 {code} {reason}\r\n"
    writer.write(f"{status}{headers}Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
    except OSError:
        pass
    finally:
        if dst.can_write_eof():
            with contextlib.suppress(OSError):
                dst.write_eof()
