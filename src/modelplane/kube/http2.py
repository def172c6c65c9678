"""One HTTP/2 connection per target that its idle watches cannot stall.

Over HTTP/1.1 every open watch holds a TLS connection of its own, and those
connections are most of what a healthy target costs the operator
(docs/sizing.md). HTTP/2 carries all of a target's streams on one
connection, but httpcore2's connection reads the network for every stream
under one lock, held for as long as the read blocks: a task queued on that
lock behind a watch that has nothing to read stays queued after its own
response arrived, until the watch gets an event or times out. With two
watches open, a LIST on their connection got no answer
(bench/bench_http2_streams.py; the sister case of upload flow control is
pydantic/httpx2#1133).

``FairHTTP2Connection`` keeps httpcore2's reading and dispatch, and changes
only how a stream waits: while another task reads for the connection, a
stream waits to be told that a read has brought it something, not for the
lock. No task ever queues on the lock, so the one reading is the only one
that may block on the network. Only the streams a read brought events to
are woken, and one more when the reader leaves (to read in its place):
waking every stream at every read cost a shard at 10,000 targets more
than half its CPU, its nine watches a target resuming at each frame any
one of them received.

Two more of httpcore2's HTTP/2 ways would lose a target's connection, and
the class mends them:

- A response closed before its end (a collection past its budget, a watch
  stopped) leaves its stream open: the server goes on sending up to the
  stream's 16 MiB window, and what arrives, read or not, is never handed
  back to the connection's window, so after a few such responses every
  stream of the connection waits for a window that never reopens. Closing
  one early resets its stream (CANCEL) and hands back what it left unread;
  h2 itself hands back what arrives after the reset.
- A graceful GOAWAY (NO_ERROR) says the server still finishes the streams
  up to its last stream id. kube-apiserver sends one with each 401 over
  HTTP/2, so that the client reconnects with new credentials; httpcore2
  failed the stream that carried the 401 with RemoteProtocolError, and h2
  closes its state machine on any GOAWAY, so that no frame after it can be
  read at all (python-hyper/h2#1181). Here a GOAWAY leaves the connection
  draining: the streams the server took read on to their end, no new one
  starts on it (the pool opens a new connection), and it closes once the
  last is done.

``use_fair_http2`` has httpcore2 open its HTTP/2 connections as this class.
httpcore2 looks the class up in its module each time a connection
negotiates h2, so it is put there, for the whole process: every HTTP/2
connection of the process waits this way, which is only fairer.

The class leans on httpcore2's private names: each method it replaces is
marked ``@override`` (mypy fails if httpcore2 drops it), and ``_RELIED_ON``
lists every name it reads or patches, checked when this module is imported,
so that an httpcore2 that renames one fails at start, not as a connection
that stalls. pyproject.toml pins httpcore2 and h2 to the minor versions
this was written against. Where each fix came from, and what would let it go:

- Fair waiting (``_receive_stream_event``, ``_wait_for_outgoing_flow``,
  ``_receive_events``): found with bench/bench_http2_streams.py; upstream
  reads for every stream under one lock (the sister case of uploads is
  pydantic/httpx2#1133). Goes when httpcore2 hands what a read brings to
  the streams waiting for it, so that no stream waits on another's read.
- Early close (``_response_closed``): found by the budgets' early closes,
  tests/integration/test_target_http2.py. Goes when httpcore2 resets a
  stream closed before its end and hands its unread bytes back to the
  connection window.
- Stream permits (``_max_streams_semaphore``, ``handle_async_request``):
  found by a hostile target (issue 40). httpcore2 opens one stream until
  the server's SETTINGS says more, and stays at one if they never say:
  every request then waits behind a watch, for a permit waited for with no
  timeout, so a server advertising MAX_CONCURRENT_STREAMS=1, or none,
  held a read (and its shard slot) for ever. Here a connection assumes 100
  until told otherwise, as Go's client does, and a permit is waited for
  within the request's pool timeout. Goes when httpcore2 assumes a default
  for a missing setting and bounds the permit wait.
- Frames that carry nothing (``_read_incoming_data``, ``idle_frames``):
  found by a hostile target (issue 40). Empty DATA, SETTINGS that change
  nothing, PINGs, unknown frames kept a read busy for ever, a core per
  connection, counted by no budget: past ``MAX_IDLE_FRAMES`` more of them
  than frames that carry something, the connection is closed as a
  protocol error (GOAWAY ENHANCE_YOUR_CALM, RFC 9113 section 10.5). Goes
  when h2 or httpcore2 bound such frames themselves. (A WINDOW_UPDATE of 0
  is already a connection error in h2.)
- A pool request's event (``_PoolRequest``): found by
  bench/bench_watch_chain.py. httpcore2 sets up an asyncio.Event for every
  request as the pool gives it a connection, waited on or not, and keeps it
  as long as the answer is open: 0.8 KiB for each open watch. Here it is set
  up only for a request that waits for a connection. Goes when httpcore2
  makes a request's event only when the request waits.
- No header tables (``_send_connection_init``): found by a census of a
  shard's live objects at 1,000 targets (docs/sizing.md). httpcore2 keeps
  HPACK's default 4 KiB tables both ways on every connection, 9 KiB a
  target as Python objects, for headers a watch sends once in minutes.
  Here the connection asks for none (``kube.header_tables``). Goes when
  httpcore2 takes its HTTP/2 settings from its caller.
- Settings in lists (``_send_connection_init``,
  ``_receive_remote_settings_change``): found by a count of a shard's
  deques by holder (docs/sizing.md). h2 keeps each setting's values in a
  deque, 760 bytes however few, 13 a connection: 9.9 KiB a target. Here in
  lists (``kube.h2_settings``). Goes when h2 keeps them in less.
- A request's headers once answered (``handle_async_request``): found by
  a census of a settled shard. httpcore2 keeps a request, its headers
  included, for as long as its answer is open: a watch's, for minutes.
  Here they are dropped once the answer has begun. Goes when httpcore2
  lets go of what it has sent.
- Graceful GOAWAY (``_DrainingStateMachine``, ``is_available``): found by
  kube-apiserver's 401 over HTTP/2; h2 closes on any GOAWAY
  (python-hyper/h2#1181). Goes when h2 drains on a NO_ERROR GOAWAY and
  httpcore2 reads the streams at or below its last stream id.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable
from typing import Any

import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import httpcore2
from h2.errors import ErrorCodes
from httpcore2._async import connection_pool as _pool
from httpcore2._async import http2 as _h2
from httpcore2._async.interfaces import AsyncConnectionInterface
from httpcore2._synchronization import AsyncEvent, AsyncSemaphore
from typing_extensions import override

from modelplane.kube import h2_settings
from modelplane.kube.header_tables import keep_no_header_tables
from modelplane.kube.relied_on import missing_names

# What _write_outgoing_data reads of a request is its write timeout; closing
# a response has no request at hand, so it writes as this one.
_CLOSING = httpcore2.Request(
    "GET", "https://closing.invalid/", extensions={"timeout": {"write": 10.0}}
)


# Streams a connection opens before the server's SETTINGS say how many it
# takes, and if they never say: 100, the least RFC 9113 (section 6.5.2)
# recommends a server allow, and what Go's client assumes until the
# server's SETTINGS arrive (golang.org/x/net/http2, transport.go,
# initialMaxConcurrentStreams). A lower limit the server sends still holds.
ASSUMED_MAX_STREAMS = 100

# How many more frames that carry nothing than frames that carry something
# a connection takes before it is closed as a protocol error. A real API
# server sends next to none (a SETTINGS, its ACK, the odd PING of a proxy),
# and each answer pays for one; a server that sends them without end costs
# a core for as long as it does, and no budget counts them.
MAX_IDLE_FRAMES = 1000

# Events of frames that carry nothing the client asked for. A DATA frame is
# one only when empty, a SETTINGS frame only when it changes nothing (see
# ``carries_nothing``).
_IDLE_EVENTS = (
    h2.events.SettingsAcknowledged,
    h2.events.PingReceived,
    h2.events.PingAckReceived,
    h2.events.WindowUpdated,
    h2.events.PriorityUpdated,
    h2.events.UnknownFrameReceived,
    h2.events.AlternativeServiceAvailable,
    h2.events.InformationalResponseReceived,
)


def carries_nothing(event: h2.events.Event) -> bool:
    """Whether the frame ``event`` stands for brought nothing a stream reads."""
    if isinstance(event, h2.events.DataReceived):
        return not event.data
    if isinstance(event, h2.events.RemoteSettingsChanged):
        changes = event.changed_settings.values()
        return all(change.original_value == change.new_value for change in changes)
    return isinstance(event, _IDLE_EVENTS)


def idle_frames(count: int, events: list[h2.events.Event]) -> int:
    """The connection's count after ``events``: up one for each that carries nothing,
    down one (to no less than 0) for each that carries something, so that no
    run of answers banks room for a flood later."""
    for event in events:
        count = count + 1 if carries_nothing(event) else max(count - 1, 0)
    return count


# The pool timeout of the request waiting for a stream permit, by task: the
# permit is waited for deep in httpcore2, which passes no request down.
_PERMIT_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "modelplane_http2_permit_timeout", default=None
)


class _Permits(AsyncSemaphore):
    """httpcore2's stream permits, each waited for within the request's pool timeout."""

    @override
    async def acquire(self) -> None:
        timeout = _PERMIT_TIMEOUT.get()
        try:
            async with asyncio.timeout(timeout):
                await super().acquire()
        except TimeoutError as err:
            raise httpcore2.PoolTimeout(
                f"no HTTP/2 stream free on the connection within {timeout} s: the server "
                "takes no more streams at once"
            ) from err


class _DrainingStateMachine(h2.connection.H2ConnectionStateMachine):
    """h2's connection states, but a GOAWAY received drains the connection, not closes it."""

    def __init__(self) -> None:
        super().__init__()
        self.draining = False

    @override
    def process_input(self, input_: h2.connection.ConnectionInputs) -> list[h2.events.Event]:
        inputs, states = h2.connection.ConnectionInputs, h2.connection.ConnectionState
        if self.state is states.CLIENT_OPEN:
            if input_ is inputs.RECV_GOAWAY:
                self.draining = True
                return []
            if self.draining and input_ is inputs.SEND_HEADERS:
                # A client sends HEADERS only to open a stream: refused,
                # and the connection stays as it is for the streams it has.
                raise h2.exceptions.ProtocolError("the server sent GOAWAY: no new streams")
        return super().process_input(input_)


class FairHTTP2Connection(_h2.AsyncHTTP2Connection):
    """httpcore2's HTTP/2 connection, where a stream never waits behind another's read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._draining = _DrainingStateMachine()
        self._h2_state.state_machine = self._draining
        self._reading = False
        # What each stream waiting for its events waits on, by stream id:
        # True once woken, False once its read timeout passed.
        self._waiters: dict[int, asyncio.Future[bool]] = {}
        # Waited on for anything read at all (a window update).
        self._dispatched: asyncio.Event | None = None
        self._permits: AsyncSemaphore | None = None
        self._idle_frames = 0

    @override
    async def _send_connection_init(self, request: httpcore2.Request) -> None:
        await super()._send_connection_init(request)
        keep_no_header_tables(self._h2_state)
        h2_settings.compact(self._h2_state.local_settings)
        h2_settings.compact(self._h2_state.remote_settings)
        await self._write_outgoing_data(request)

    @override
    async def _receive_remote_settings_change(self, event: h2.events.RemoteSettingsChanged) -> None:
        await super()._receive_remote_settings_change(event)
        # h2 made a deque for each setting the server named that it had not.
        h2_settings.compact(self._h2_state.remote_settings)

    @override
    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        token = _PERMIT_TIMEOUT.set(_timeouts(request).get("pool"))
        try:
            response = await super().handle_async_request(request)
        finally:
            _PERMIT_TIMEOUT.reset(token)
        # Sent, and answered: nothing of httpcore2's reads a request's headers
        # again, and the request is kept for as long as its answer is open (a
        # watch's: minutes, each of a target's watches).
        request.headers = []
        return response

    # httpcore2 makes its stream permits at the first request, just after
    # starting at one stream, and before taking back those over that one:
    # made here as ``_Permits``, starting at ASSUMED_MAX_STREAMS instead.
    @property
    def _max_streams_semaphore(self) -> AsyncSemaphore:
        assert self._permits is not None, "made at the connection's first request"
        return self._permits

    @_max_streams_semaphore.setter
    def _max_streams_semaphore(self, made: AsyncSemaphore) -> None:
        self._permits = _Permits(made._bound)
        self._max_streams = min(ASSUMED_MAX_STREAMS, made._bound)

    @override
    async def _receive_events(
        self, request: httpcore2.Request, stream_id: int | None = None
    ) -> None:
        # Called under the read lock, by every path that reads. Set and
        # cleared with no await between them and the lock's own acquire and
        # release, so "not reading" means the lock is free to take at once.
        self._reading = True
        terminated = self._connection_terminated
        graceful = (
            terminated is not None
            and terminated.error_code == ErrorCodes.NO_ERROR
            and stream_id is not None
            and terminated.last_stream_id is not None
            and stream_id <= terminated.last_stream_id
        )
        try:
            if graceful:
                # httpcore2 refuses to read once terminated; this stream the
                # server still answers, so read as if it were not.
                self._connection_terminated = None
            await super()._receive_events(request, stream_id)
        finally:
            if graceful and self._connection_terminated is None:
                self._connection_terminated = terminated
            self._reading = False
            self._wake()

    @override
    async def _read_incoming_data(self, request: httpcore2.Request) -> list[h2.events.Event]:
        events: list[h2.events.Event] = await super()._read_incoming_data(request)
        self._idle_frames = idle_frames(self._idle_frames, events)
        if self._idle_frames > MAX_IDLE_FRAMES:
            await self._refuse_idle_frames(request)
        return events

    async def _refuse_idle_frames(self, request: httpcore2.Request) -> None:
        """Close the connection as a protocol error; every stream on it fails with it."""
        error = httpcore2.RemoteProtocolError(
            f"the server sent more than {MAX_IDLE_FRAMES} HTTP/2 frames that carry nothing "
            "(empty DATA, SETTINGS, PING, ...): the connection is closed"
        )
        # As httpcore2 does with a read that failed: raised again to every
        # stream that reads after, and the pool takes no new request here.
        self._read_exception = error
        self._connection_error = True
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2_state.close_connection(ErrorCodes.ENHANCE_YOUR_CALM)
        with contextlib.suppress(httpcore2.NetworkError, httpcore2.TimeoutException):
            await self._write_outgoing_data(request)
        await self.aclose()
        raise error

    @override
    def is_available(self) -> bool:
        return super().is_available() and not self._draining.draining

    @override
    async def _receive_stream_event(self, request: httpcore2.Request, stream_id: int) -> Any:
        try:
            while not self._events.get(stream_id):
                if self._reading:
                    await self._await_events(request, stream_id)
                    continue
                async with self._read_lock:
                    if not self._events.get(stream_id):
                        await self._receive_events(request, stream_id)
                await self._write_outgoing_data(request)
        finally:
            # However it leaves (its events in, a timeout, cancelled), a
            # reader that leaves nobody reading wakes a stream to take over.
            self._hand_over()
        # Its events are in: httpcore2 pops the next one, and raises on a reset.
        return await super()._receive_stream_event(request, stream_id)

    @override
    async def _wait_for_outgoing_flow(self, request: httpcore2.Request, stream_id: int) -> int:
        # httpcore2's, but waiting as a stream waits for its events: a large
        # request body stalls behind an idle watch's read the same way.
        while True:
            window = self._h2_state.local_flow_control_window(stream_id)
            flow = min(window, self._h2_state.max_outbound_frame_size)
            if flow > 0:
                return int(flow)
            if self._reading:
                await self._await_dispatch(request)
                continue
            try:
                async with self._read_lock:
                    if self._h2_state.local_flow_control_window(stream_id) <= 0:
                        await self._receive_events(request)
                await self._write_outgoing_data(request)
            finally:
                self._hand_over()

    @override
    async def _response_closed(self, stream_id: int) -> None:
        unread = self._events.get(stream_id, [])
        data = [e for e in unread if isinstance(e, h2.events.DataReceived)]
        left = sum(e.flow_controlled_length or 0 for e in data)
        ended = any(isinstance(e, h2.events.StreamEnded | h2.events.StreamReset) for e in unread)
        stream = self._h2_state.streams.get(stream_id)
        reset = stream is not None and not stream.closed and not ended
        if reset:
            try:
                self._h2_state.reset_stream(stream_id, ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:
                reset = False  # closed meanwhile: nothing more comes for it
        if left:
            self._h2_state.acknowledge_received_data(left, stream_id)
        if reset or left:
            # Before httpcore2's own close, which may close the connection.
            with contextlib.suppress(httpcore2.NetworkError, httpcore2.TimeoutException):
                await self._write_outgoing_data(_CLOSING)
        await super()._response_closed(stream_id)

    def _wake(self) -> None:
        """After a read: wake the streams it brought events to (all, if the connection ended)."""
        self._wake_flow()
        ended = self._read_exception is not None or self._connection_terminated is not None
        for stream_id, waiter in self._waiters.items():
            if ended or self._events.get(stream_id) or stream_id not in self._events:
                _resolve(waiter)

    def _hand_over(self) -> None:
        """With nobody reading, wake one stream still waiting, to read for the rest."""
        if self._reading:
            return
        self._wake_flow()
        waiting = next((w for w in self._waiters.values() if not w.done()), None)
        if waiting is not None:
            waiting.set_result(True)

    def _wake_flow(self) -> None:
        """Wake what waits for any read at all (a window to send in)."""
        if self._dispatched is not None:
            self._dispatched.set()
            self._dispatched = None

    async def _await_events(self, request: httpcore2.Request, stream_id: int) -> None:
        """Wait until a read brought this stream something, or it is its turn to read.

        Within the request's read timeout, as ``_within`` waits, but with
        a timer that resolves the waiter rather than cancels the task: an
        idle watch waits here for minutes, and a timeout context and one
        coroutine less are what each of a target's open watches holds less.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters[stream_id] = waiter
        timeout = _timeouts(request).get("read")
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            woken = await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiters.get(stream_id) is waiter:
                del self._waiters[stream_id]
        if not woken:
            # This stream's own read timeout, as if it had read the network
            # itself; the connection and its other streams are left as they are.
            raise httpcore2.ReadTimeout(f"no answer within {timeout} s")

    async def _await_dispatch(self, request: httpcore2.Request) -> None:
        """Wait until the reading task has dispatched what it read, or stopped reading."""
        if self._dispatched is None:
            self._dispatched = asyncio.Event()
        await _within(request, self._dispatched.wait())


class _PoolRequest(_pool.AsyncPoolRequest):
    """httpcore2's request in its pool, whose event is made only if it waits for a connection.

    httpcore2 sets up an event (an asyncio.Event and its deque, 0.8 KiB) as
    it gives a request its connection, though the request that is given
    one at once never waits on it, and keeps it for as long as the
    response is open: for minutes, for each of a target's open watches.
    """

    def __init__(self, request: httpcore2.Request) -> None:
        super().__init__(request)
        self._waiting = False

    @override
    def assign_to_connection(self, connection: AsyncConnectionInterface | None) -> None:
        self.connection = connection
        if self._waiting:
            self._connection_acquired.set()

    @override
    async def wait_for_connection(self, timeout: float | None = None) -> AsyncConnectionInterface:
        if self.connection is None:
            self._waiting = True
            try:
                await self._connection_acquired.wait(timeout=timeout)
            finally:
                self._waiting = False
                # Another that was never set up, if it has to wait again.
                self._connection_acquired = AsyncEvent()
        assert self.connection is not None
        return self.connection


def _resolve(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(True)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def _timeouts(request: httpcore2.Request) -> dict[str, float | None]:
    timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
    return timeouts


async def _within(request: httpcore2.Request, waited: Awaitable[Any]) -> None:
    """Await ``waited`` within the request's read timeout.

    ``asyncio.timeout`` rather than ``wait_for``, which made a task of
    every wait.
    """
    timeout = _timeouts(request).get("read")
    try:
        async with asyncio.timeout(timeout):
            await waited
    except TimeoutError as err:
        # This stream's own read timeout, as if it had read the network
        # itself; the connection and its other streams are left as they are.
        raise httpcore2.ReadTimeout(f"no answer within {timeout} s") from err


# Every private name of httpcore2's HTTP/2 connection this module overrides,
# reads or sets, and h2's draining rests on: checked at import.
_RELIED_ON: dict[object, tuple[str, ...]] = {
    _h2: ("AsyncHTTP2Connection",),
    _h2.AsyncHTTP2Connection: (
        "_receive_events",
        "_receive_stream_event",
        "_wait_for_outgoing_flow",
        "_response_closed",
        "_write_outgoing_data",
        "is_available",
        # Set in __init__ and read here.
        "_h2_state",
        "_read_lock",
        "_events",
        "_connection_terminated",
        "_read_exception",
        "_connection_error",
        "_read_incoming_data",
        "_send_connection_init",
        "_receive_remote_settings_change",
        "_write_outgoing_data",
        "aclose",
        # Set at the first request: the permits are made as ``_Permits``.
        "_max_streams",
        "_max_streams_semaphore",
        "handle_async_request",
    ),
    AsyncSemaphore: ("_bound", "acquire"),
    _pool: ("AsyncPoolRequest",),
    _pool.AsyncPoolRequest: (
        "assign_to_connection",
        "wait_for_connection",
        "clear_connection",
        "connection",
        "_connection_acquired",
    ),
    AsyncEvent: ("set", "wait"),
    h2.connection.H2ConnectionStateMachine: ("process_input", "state"),
    h2.connection.H2Connection: (
        "state_machine",
        "update_settings",
        "encoder",
        "local_settings",
        "remote_settings",
    ),
    h2.settings.Settings: h2_settings.RELIED_ON,
}


def _check_relied_on() -> None:
    missing = missing_names(_RELIED_ON)
    if missing:
        raise ImportError(
            "modelplane.kube.http2 patches httpcore2's HTTP/2 connection, and this "
            f"httpcore2 or h2 has no {', '.join(missing)}: pin the versions pyproject.toml "
            "names, or port the fixes (see the module's docstring)"
        )


_check_relied_on()


def use_fair_http2() -> None:
    """Open every HTTP/2 connection of this process as a ``FairHTTP2Connection``,
    and queue every request of its pools as a ``_PoolRequest``."""
    _h2.AsyncHTTP2Connection = FairHTTP2Connection  # type: ignore[misc]
    _pool.AsyncPoolRequest = _PoolRequest  # type: ignore[misc]
