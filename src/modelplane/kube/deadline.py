"""A deadline for every request to a target, and one for a whole run of reads.

httpx's timeouts bound each wait on the network, not a request: a server
that sends one byte every few seconds, or empty HTTP/2 frames, answers
within every timeout and never ends. A reconcile holds one of the shard's
``--max-concurrent-target-reads`` slots meanwhile, so fifty such targets
froze every other stack's full reads (issue 40, finding 5).

``Deadlines`` sits on a target's transport and gives each request a time
by which its answer, body and all, is in (``request_deadline``):

- a request: ``REQUEST_SECONDS`` from its start;
- a WATCH: the ``timeoutSeconds`` it asks the server for, and a grace
  (the server ends it then; a real one on time);
- inside ``reads_within`` (a reconcile's slot, ``operator.target_reads``),
  no later than that run's deadline, for requests but not for WATCHes,
  which outlive the run that started them and which the run never waits on.

Past it the request fails with ``httpx2.ReadTimeout``, a transport error,
as if the target had gone quiet: callers already read that as a target
that cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

import httpx2

# A request, from its start to the last byte of its answer. The largest
# answers the operator reads (a page of big CRDs, within its budget) take
# seconds on a real link.
REQUEST_SECONDS = 60.0
# A WATCH is given its timeoutSeconds and this much more, as its read
# timeout is (``kube.reflector``).
WATCH_GRACE_SECONDS = 30.0
# A WATCH that asks for no timeoutSeconds: the server's own default
# (kube-apiserver's --min-request-timeout is 1800 s, at most twice that).
WATCH_DEFAULT_SECONDS = 3600.0


@dataclass
class _Run:
    """The deadline of one run of reads; ``None`` once the run is over."""

    deadline: float | None


# The run of reads a task is in, if any. Tasks started within the run copy
# the same ``_Run``, so a run's end frees them too.
_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "modelplane_target_read_run", default=None
)


@contextlib.contextmanager
def reads_within(seconds: float) -> Iterator[None]:
    """Every request to a target made in this block, or by a task it starts, ends within it.

    A block inside another ends no later than the outer one.
    """
    now = asyncio.get_running_loop().time()
    deadline = _bound(now + seconds, run_deadline())
    run = _Run(deadline)
    token = _RUN.set(run)
    try:
        yield
    finally:
        run.deadline = None
        _RUN.reset(token)


def run_deadline() -> float | None:
    """The loop time the current run of reads must end by, if it has a deadline."""
    run = _RUN.get()
    return None if run is None else run.deadline


def _bound(deadline: float, outer: float | None) -> float:
    return deadline if outer is None else min(deadline, outer)


def _is_watch(params: Mapping[str, str]) -> bool:
    return params.get("watch", "").lower() in ("true", "1")


def _watch_seconds(params: Mapping[str, str]) -> float:
    try:
        asked = float(params.get("timeoutSeconds", ""))
    except ValueError:
        return WATCH_DEFAULT_SECONDS
    return min(asked, WATCH_DEFAULT_SECONDS) if asked > 0 else WATCH_DEFAULT_SECONDS


def request_deadline(params: Mapping[str, str], now: float, run: float | None) -> float:
    """The loop time by which a request with query ``params``, started at ``now``, is done."""
    if _is_watch(params):
        return now + _watch_seconds(params) + WATCH_GRACE_SECONDS
    return _bound(now + REQUEST_SECONDS, run)


class DeadlineExceeded(httpx2.ReadTimeout):
    """A request to a target ran past its deadline (headers, body and all)."""


def _exceeded(request: httpx2.Request) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"{request.method} {request.url.path}: no whole answer by the request's deadline "
        f"(at most {REQUEST_SECONDS:.0f} s, a WATCH its timeoutSeconds and "
        f"{WATCH_GRACE_SECONDS:.0f} s, within a reconcile's read deadline)",
        request=request,
    )


class Deadlines(httpx2.AsyncBaseTransport):
    """Each request through ``inner`` ends by its deadline (``request_deadline``)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        loop = asyncio.get_running_loop()
        params = dict(request.url.params)
        deadline = request_deadline(params, loop.time(), run_deadline())
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._inner.handle_async_request(request)
        except TimeoutError as err:
            raise _exceeded(request) from err
        response.stream = Bounded(response.stream, deadline, request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class Bounded(httpx2.AsyncByteStream):
    """An answer's body, each piece of it read by the request's deadline."""

    def __init__(
        self,
        inner: httpx2.SyncByteStream | httpx2.AsyncByteStream,
        deadline: float,
        request: httpx2.Request,
    ) -> None:
        assert isinstance(inner, httpx2.AsyncByteStream), "an async transport's answer"
        self._inner, self._deadline, self._request = inner, deadline, request

    @property
    def inner(self) -> httpx2.AsyncByteStream:
        """The body this bounds, as the transport under the deadline answered it."""
        return self._inner

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.reading(self._inner.__aiter__())

    def reading(self, pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``pieces`` (the inner body, read another way), each by the request's deadline."""
        return _Pieces(pieces, self._deadline, self._request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Pieces:
    """The pieces of a ``Bounded`` body, as they are read.

    An iterator, not an async generator: a WATCH's body is iterated for
    minutes, and a live async generator costs its frame and a weak
    reference the event loop keeps (``sys.set_asyncgen_hooks``), for each of
    the nine open watches of every target.
    """

    __slots__ = ("_deadline", "_pieces", "_request")

    def __init__(
        self, pieces: AsyncIterator[bytes], deadline: float, request: httpx2.Request
    ) -> None:
        self._pieces, self._deadline, self._request = pieces, deadline, request

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        # StopAsyncIteration, the body's end, passes through as it is.
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._pieces.__anext__()
        except TimeoutError as err:
            raise _exceeded(self._request) from err
