"""A bound on every success answer a target sends: its size, what its parse would build, its coding.

lightkube and httpx read a 200 answer whole (``Response.aread``) and
decode ``Content-Encoding: gzip`` unasked, so a typed GET of the claim
Lease, an apply's answer or a probe of ``/readyz`` held whatever the
server sent, and several times that once decoded. The guarded transport
(``transport.py``) asks for no coding (``Accept-Encoding: identity``),
refuses an answer coded anyway, and hands every success body to its
reader through ``BoundedStream``, which stops it past ``AnswerBound``: so
many bytes, or so much memory as ``untrusted.json_cost`` estimates its
parse would build, counted chunk by chunk as it arrives. Every reader of
the target's clients, typed or raw, is bounded at once.

A request may carry its own bound under the ``BOUND`` extension: a LIST
page reads more than a typed GET, and a watch, whose stream lives for
minutes, is bounded by its lines (``reflector._lines``) and passes
``UNBOUNDED``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2

from modelplane.untrusted import cost_of

MiB = 1024 * 1024
# The request extension that carries a request's own ``AnswerBound``.
BOUND = "modelplane.answer_bound"


@dataclass(frozen=True)
class AnswerBound:
    """At most ``bytes`` of a success body, and ``built`` bytes its JSON parse would build."""

    bytes: int
    built: int


# A typed read's answer is one object (etcd keeps at most 1.5 MiB of one)
# or lightkube's unpaginated list of a chart's CRDs (kube-prometheus-stack's
# are 4.3 MiB of YAML). Real objects' JSON builds about a third of its
# estimate (``json_cost``): 128 MiB of estimate is some 20 MiB of real JSON.
DEFAULT_BOUND = AnswerBound(bytes=32 * MiB, built=128 * MiB)
UNBOUNDED = AnswerBound(bytes=2**62, built=2**62)


class AnswerTooLarge(ValueError):
    """A success answer past its bound, or coded when none was asked; never quotes it."""


def bound_of(request: httpx2.Request) -> AnswerBound:
    """The bound the request carries, else the default."""
    bound = request.extensions.get(BOUND)
    return bound if isinstance(bound, AnswerBound) else DEFAULT_BOUND


def refuse_coded(request: httpx2.Request, response: httpx2.Response) -> None:
    """Refuse an answer coded though ``identity`` was asked: httpx would decode it unbounded."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):
        raise AnswerTooLarge(
            f"{_what(request)}: the answer is coded ({coding[:40]!r}) though "
            "Accept-Encoding: identity was asked, and is not read"
        )


def _what(request: httpx2.Request) -> str:
    # Our own request, not the target's words.
    return f"{request.method} {request.url.path[:200]}"


class Cost:
    """``untrusted.json_cost`` of a text that arrives in chunks, counted as they do."""

    def __init__(self) -> None:
        self.containers = 0
        self.items = 0
        self.chars = 0
        self.wide = False
        self._last = b""

    def add(self, chunk: bytes) -> None:
        self.containers += chunk.count(b"{") + chunk.count(b"[")
        self.items += chunk.count(b",") + chunk.count(b":")
        self.chars += len(chunk)
        # ``\\u`` split across two chunks counts as well.
        joined = self._last + chunk[:1]
        self.wide = self.wide or not chunk.isascii() or b"\\u" in chunk or joined == b"\\u"
        self._last = chunk[-1:]

    @property
    def built(self) -> int:
        return cost_of(self.containers, self.items, self.chars, wide=self.wide)


class BoundedStream(httpx2.AsyncByteStream):
    """A success body, stopped with ``AnswerTooLarge`` as soon as it passes its bound."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, bound: AnswerBound, request: httpx2.Request
    ) -> None:
        self._inner = inner
        self._bound = bound
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        cost = Cost()
        async for chunk in self._inner:
            cost.add(chunk)
            if cost.chars > self._bound.bytes:
                raise AnswerTooLarge(
                    f"{_what(self._request)}: the answer is over the limit of "
                    f"{self._bound.bytes} bytes, and is not read further"
                )
            if cost.built > self._bound.built:
                raise AnswerTooLarge(
                    f"{_what(self._request)}: the answer would build about "
                    f"{cost.built // MiB} MiB in memory once parsed, over the limit of "
                    f"{self._bound.built // MiB} MiB, and is not read further"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def body_of(response: httpx2.Response) -> AsyncIterator[bytes]:
    """An answer's body as it arrives, as it was sent.

    The guarded transport asks for no coding and refuses a success answer
    coded anyway, so there is nothing to decode: ``aiter_raw`` rather than
    ``aiter_bytes``, a decoder, a chunker and an async generator less, held
    for as long as a watch is open. An answer already read whole (one built
    from its bytes) is given as it was read, which ``aiter_raw`` refuses.
    """
    try:
        response.content  # noqa: B018 (raises for an answer not read)
    except httpx2.ResponseNotRead:
        return response.aiter_raw()
    return response.aiter_bytes()


# What an open answer and its request are left with (``shed_headers``):
# one for all of them, as nothing writes the headers of an answer once open.
_NO_HEADERS = httpx2.Headers()


def shed_headers(response: httpx2.Response) -> None:
    """Drop the headers of an open answer and of its request: nothing reads them again.

    A watch's answer is open for minutes and read by its lines alone
    (``kube.watch_body``). Its headers and its request's were read when it began
    (the guard's checks, the status), then kept with it as httpx2's tuples
    of bytes, both ways: some 2 KiB a watch, for each of a target's
    watches (a census of a settled shard, docs/sizing.md).
    """
    response.headers = _NO_HEADERS
    response.request.headers = _NO_HEADERS
