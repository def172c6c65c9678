"""Every answer a target sends is bounded at the transport, typed reads too (issue 40, item 3).

lightkube and httpx read a 200 answer whole and decode ``Content-Encoding:
gzip`` unasked: the claim Lease GET, an apply's answer, the CA ConfigMap
and the lost target's ``/readyz`` probe held whatever a hostile server
sent. Against a loopback server, through the clients ``open_target``
builds: the client stops reading at the bound, asks for no coding and
refuses an answer coded anyway.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.coordination_v1 import Lease
from tests.hostile_server import Answer, HostileServer

from modelplane.backoff import Backoff
from modelplane.kube.bounded import (
    BOUND,
    DEFAULT_BOUND,
    UNBOUNDED,
    AnswerBound,
    AnswerTooLarge,
    BoundedStream,
    body_of,
)
from modelplane.kube.client import Target, open_target
from modelplane.kube.errors import ErrorKind, classify
from modelplane.kube.link import Link
from modelplane.kube.transport import GuardedTransport

MiB = 1 << 20
LEASE = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "claim", "namespace": "modelplane-system"},
}
Script = Callable[[dict[str, str], Answer], Awaitable[None]]


def _config(server: str) -> object:
    return KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "t",
            "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }
    ).get()


async def _target(server: HostileServer) -> Target:
    return await open_target(_config(server.url), deny=(), trust_env=False)  # type: ignore[arg-type]


def lease_padded_with(unit: bytes, size: int) -> Script:
    """A Lease whose one extra field holds ``size`` bytes of ``unit`` repeated."""
    head = json.dumps(LEASE).encode()[:-1] + b', "x": ['
    body = head + unit * (size // len(unit)) + b"0]}"

    async def script(params: dict[str, str], answer: Answer) -> None:
        await answer.send(body)
        await answer.end()

    return script


@pytest.mark.parametrize(
    ("unit", "size", "said"),
    [
        # Past the bytes a typed read's answer may have.
        (b"1,", 48 * MiB, "over the limit of"),
        # Within them, but a parse would build some 1.2 GiB.
        (b"{},", 24 * MiB, "would build about"),
    ],
    ids=["too many bytes", "too much memory once parsed"],
)
async def test_a_typed_get_stops_reading_at_the_bound(unit: bytes, size: int, said: str) -> None:
    async with HostileServer(lease_padded_with(unit, size), fuse=64 * MiB) as server:
        target = await _target(server)
        try:
            with pytest.raises(AnswerTooLarge, match=said) as err:
                await target.client.get(Lease, "claim", namespace="modelplane-system")
        finally:
            await target.close()
    assert "GET /apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases/claim" in str(
        err.value
    )
    # Before, the whole answer was read (and parsed): up to the server's fuse.
    assert server.sent < DEFAULT_BOUND.bytes + 4 * MiB
    assert server.sent < size


async def gzipped_lease(params: dict[str, str], answer: Answer) -> None:
    # 32 MiB of padding in 32 KiB: httpx inflated it unasked and unbounded.
    padded = json.dumps(LEASE).encode()[:-1] + b', "x": "' + b" " * (32 * MiB) + b'"}'
    await answer.start(headers={"Content-Encoding": "gzip"})
    await answer.send(gzip.compress(padded, compresslevel=9))
    await answer.end()


async def test_no_coding_is_asked_and_a_coded_answer_is_refused() -> None:
    async with HostileServer(gzipped_lease) as server:
        target = await _target(server)
        try:
            with pytest.raises(AnswerTooLarge, match="the answer is coded"):
                await target.client.get(Lease, "claim", namespace="modelplane-system")
        finally:
            await target.close()
    head = server.heads[0].lower()
    assert "accept-encoding: identity" in head


async def endless_readyz(params: dict[str, str], answer: Answer) -> None:
    # ``ok``, then padding without end: a probe that reads the body never returns.
    await answer.send(b"ok")
    while await answer.send(b" " * MiB):
        await asyncio.sleep(0)
    await answer.end()


async def test_the_lost_targets_probe_reads_no_body() -> None:
    async with HostileServer(endless_readyz, fuse=64 * MiB) as server:
        target = await _target(server)
        link = Link(target.http, "test", every=Backoff(first=0.01, cap=0.01))
        try:
            assert link.lost(httpx2.ConnectError("down"))
            async with asyncio.timeout(30):
                await link.up.wait()
        finally:
            await link.close()
            await target.close()
    # Before, the probe read the answer whole: to the server's fuse.
    assert server.sent < 16 * MiB


def test_an_answer_too_large_is_an_answer_not_an_outage() -> None:
    # The target answered, with more than is read of one answer: not "unreachable".
    assert classify(AnswerTooLarge("GET /x: too large")).kind is ErrorKind.ANSWERED


@pytest.mark.parametrize(
    ("extensions", "counted"),
    [
        ({}, True),
        ({BOUND: AnswerBound(bytes=MiB, built=MiB)}, True),
        # A watch: bounded by its lines, its answer is passed as it is.
        ({BOUND: UNBOUNDED}, False),
    ],
    ids=["default", "its own bound", "unbounded"],
)
async def test_only_a_bounded_answer_is_counted(
    extensions: dict[str, object], counted: bool
) -> None:
    inner = httpx2.MockTransport(lambda request: httpx2.Response(200, content=b"{}"))
    guard = GuardedTransport((), inner)
    request = httpx2.Request("GET", "https://127.0.0.1/api", extensions=extensions)
    response = await guard.handle_async_request(request)
    assert isinstance(response.stream, BoundedStream) is counted
    assert await response.aread() == b"{}"


class _Sent(httpx2.AsyncByteStream):
    """A body that arrives in pieces, not read yet."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in (b'{"type": ', b'"ADDED"}\n'):
            yield piece


@pytest.mark.parametrize(
    "answer",
    [
        lambda: httpx2.Response(200, stream=_Sent()),
        # Built from its bytes, as a test's transport answers: read already.
        lambda: httpx2.Response(200, content=b'{"type": "ADDED"}\n'),
    ],
    ids=["streamed", "read whole"],
)
async def test_body_of_gives_the_answer_as_it_was_sent(
    answer: Callable[[], httpx2.Response],
) -> None:
    pieces = [piece async for piece in body_of(answer())]
    assert b"".join(pieces) == b'{"type": "ADDED"}\n'
