"""A target's watches and requests on one HTTP/2 connection, none stalled by an idle watch.

Against a real kube-apiserver, through the product's own target connection
(``kube.client.open_target``): a dozen and more watches that have nothing to
say must neither hold up a LIST on the same connection nor each other's
events.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from lightkube import KubeConfig
from lightkube.resources.core_v1 import ConfigMap, Namespace
from tests.testenv import TestEnv
from tests.waiting import wait_for_async

from modelplane.kube.bounded import BOUND, UNBOUNDED, body_of, shed_headers
from modelplane.kube.client import Target, open_target
from modelplane.kube.watch_body import _h2_stream, watch_body

# As many as a healthy target holds open (docs/sizing.md), and a few more.
WATCHES = 16
# Answers of 2.7 MB closed after their first bytes (see the test).
CLOSED_EARLY = 20


# In the test's own event loop: the connection's locks belong to the loop that made them.
@pytest_asyncio.fixture(loop_scope="function")
async def target_and_namespace(hub_env: TestEnv) -> AsyncIterator[tuple[Target, str]]:
    """The product's connection to the test hub, and a namespace of its own there."""
    ns = f"http2-{uuid.uuid4().hex[:8]}"
    config = KubeConfig.from_dict(hub_env.kubeconfig).get()
    target = await open_target(config, deny=(), trust_env=False)
    await target.client.create(Namespace.from_dict({"metadata": {"name": ns}}))
    yield target, ns
    await target.client.delete(Namespace, ns)
    await target.close()


def _pool(http: httpx2.AsyncClient) -> Any:
    """httpcore2's pool under ``http``'s transport wrappers."""
    transport: Any = http._transport
    while not hasattr(transport, "_pool"):
        transport = getattr(transport, "_inner", None) or transport._transport
    return transport._pool


def _h2_states(http: httpx2.AsyncClient) -> list[Any]:
    """The h2 state of each HTTP/2 connection in ``http``'s pool, under the transport's wrappers."""
    states = []
    for connection in _pool(http).connections:
        inner = getattr(connection, "_connection", None)
        if inner is not None and hasattr(inner, "_h2_state"):
            states.append(inner._h2_state)
    return states


async def _h2_states_after_reads(target_and_namespace: tuple[Target, str], reads: int) -> list[Any]:
    """The h2 state of each of the target's HTTP/2 connections, after ``reads`` GETs on them."""
    target, ns = target_and_namespace
    http = target.client.http
    for _ in range(reads):
        answer = await http.get(f"/api/v1/namespaces/{ns}/configmaps")
        assert answer.status_code == 200, answer.text
    states = _h2_states(http)
    assert states, "no HTTP/2 connection in the pool"
    return states


def _local_port(response: httpx2.Response) -> int:
    stream = response.extensions["network_stream"]
    return int(stream.get_extra_info("client_addr")[1])


async def test_idle_watches_share_one_http2_connection_and_stall_nothing(
    target_and_namespace: tuple[Target, str],
) -> None:
    target, ns = target_and_namespace
    client, http = target.client, target.client.http
    opened: list[httpx2.Response] = []
    seen: list[asyncio.Queue[dict[str, Any]]] = [asyncio.Queue() for _ in range(WATCHES)]

    async def watch(i: int) -> None:
        params = {"watch": "true", "timeoutSeconds": "120"}
        async with http.stream(
            "GET", f"/api/v1/namespaces/{ns}/configmaps", params=params
        ) as answer:
            opened.append(answer)
            async for line in answer.aiter_lines():
                await seen[i].put(json.loads(line))

    tasks = [asyncio.create_task(watch(i)) for i in range(WATCHES)]

    async def all_open() -> bool:
        return len(opened) == WATCHES

    try:
        await wait_for_async("every watch open", all_open, deadline=30, interval=0.05)
        # Every watch is open and idle: a LIST on their connection is answered.
        async with asyncio.timeout(5):
            listed = await http.get(f"/api/v1/namespaces/{ns}/configmaps")
        assert listed.status_code == 200, listed.text

        # One change reaches every watch, each on its own stream.
        await client.create(ConfigMap.from_dict({"metadata": {"name": "one", "namespace": ns}}))
        async with asyncio.timeout(10):
            events = [await queue.get() for queue in seen]
        assert {(e["type"], e["object"]["metadata"]["name"]) for e in events} == {("ADDED", "one")}

        # ...and all of it went over one connection, as HTTP/2.
        answers = [*opened, listed]
        assert {a.http_version for a in answers} == {"HTTP/2"}
        assert len({_local_port(a) for a in answers}) == 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_responses_closed_early_give_the_connection_its_window_back(
    target_and_namespace: tuple[Target, str],
) -> None:
    # Each LIST answers about 2.7 MB (random, so that gzip does not shrink
    # it). Twenty closed after their first bytes leave the server 50 MB to
    # send, three times the connection's 16 MiB window, had nothing reset
    # their streams or handed back what they left: then the last LIST's
    # answer, one stream among twenty-one, cannot be sent whole, however the
    # server orders its frames and however far it got before it was asked.
    target, ns = target_and_namespace
    client, http = target.client, target.client.http
    for i in range(3):
        await client.create(
            ConfigMap.from_dict(
                {
                    "metadata": {"name": f"big-{i}", "namespace": ns},
                    "data": {"x": base64.b64encode(os.urandom(675_000)).decode()},
                }
            )
        )
    for _ in range(CLOSED_EARLY):
        async with http.stream("GET", f"/api/v1/namespaces/{ns}/configmaps") as answer:
            async for _chunk in answer.aiter_bytes():
                break
    async with asyncio.timeout(10):
        listed = await http.get(f"/api/v1/namespaces/{ns}/configmaps")
    assert listed.status_code == 200
    assert listed.http_version == "HTTP/2"
    assert len(listed.json()["items"]) == 3


async def test_a_connection_keeps_no_header_tables(
    target_and_namespace: tuple[Target, str],
) -> None:
    # HPACK's tables are state a watch's headers, sent once in minutes, do
    # not need: the server is asked to keep none for its answers, and our
    # encoder keeps none for our requests.
    for state in await _h2_states_after_reads(target_and_namespace, 20):
        assert state.decoder.max_allowed_table_size == 0
        assert len(state.decoder.header_table.dynamic_entries) == 0
        assert len(state.encoder.header_table.dynamic_entries) == 0


async def test_a_connection_keeps_its_settings_in_lists(
    target_and_namespace: tuple[Target, str],
) -> None:
    # h2 keeps each setting's values in a deque of 760 bytes: in lists here,
    # those the server's SETTINGS added included, and still read right.
    for state in await _h2_states_after_reads(target_and_namespace, 5):
        for settings in (state.local_settings, state.remote_settings):
            kept = settings._settings
            assert kept and not any(isinstance(v, collections.deque) for v in kept.values())
        assert state.local_settings.header_table_size == 0
        assert state.remote_settings.max_concurrent_streams > 1


def _configmaps(target_and_namespace: tuple[Target, str]) -> tuple[httpx2.AsyncClient, str]:
    """The target's raw client, and the path of the test namespace's ConfigMaps."""
    target, ns = target_and_namespace
    return target.client.http, f"/api/v1/namespaces/{ns}/configmaps"


async def _watch(
    http: httpx2.AsyncClient, path: str, seconds: int = 3, **timeouts: float
) -> httpx2.Response:
    """A WATCH of ``path`` from now, for ``seconds``, sent as the reflector sends one."""
    rv = (await http.get(path)).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": str(seconds)}
    request = http.build_request(
        "GET",
        path,
        params=params,
        timeout=httpx2.Timeout(10.0, **timeouts),
        extensions={BOUND: UNBOUNDED},
    )
    response = await http.send(request, stream=True)
    assert response.status_code == 200
    return response


async def test_an_open_watch_keeps_no_headers_and_still_reads(
    target_and_namespace: tuple[Target, str],
) -> None:
    # A watch's answer is open for minutes: its headers and its request's,
    # httpx2's and httpcore2's, are dropped once it has begun, and its
    # events still arrive.
    http, path = _configmaps(target_and_namespace)
    response = await _watch(http, path, seconds=60)
    try:
        shed_headers(response)
        assert not response.headers and not response.request.headers
        sent = [r.request for r in _pool(http)._requests]
        assert sent and all(r.headers == [] for r in sent)
        name = f"watched-{uuid.uuid4().hex[:8]}"
        made = await http.post(path, json={"metadata": {"name": name}, "data": {"a": "b"}})
        assert made.status_code == 201, made.text
        buffer = b""
        async with asyncio.timeout(30):
            async for chunk in body_of(response):
                buffer += chunk
                if b"\n" in buffer:
                    break
        event = json.loads(buffer.split(b"\n")[0])
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", name)
    finally:
        await response.aclose()


async def test_a_watch_is_read_from_its_http2_stream_to_its_end(
    target_and_namespace: tuple[Target, str],
) -> None:
    # Read under the layers, straight from the stream: every event in order,
    # and the end when the server ends the watch (its timeoutSeconds).
    http, path = _configmaps(target_and_namespace)
    response = await _watch(http, path)
    try:
        assert _h2_stream(response) is not None, "not read from the HTTP/2 stream"
        names = [f"read-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
        for name in names:
            made = await http.post(path, json={"metadata": {"name": name}})
            assert made.status_code == 201, made.text
        body = b""
        async with asyncio.timeout(30):
            async for chunk in watch_body(response):
                body += chunk
        events = [json.loads(line) for line in body.splitlines() if line.strip()]
        added = [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"]
        assert added == names
    finally:
        await response.aclose()
    # The stream ended cleanly: the connection goes on answering.
    assert (await http.get(path)).status_code == 200


async def test_a_quiet_watch_past_its_read_timeout_fails_as_httpx2s_timeout(
    target_and_namespace: tuple[Target, str],
) -> None:
    # httpcore2's errors reach the reflector as httpx2's, which it reads as an outage.
    target, ns = target_and_namespace
    http = target.client.http
    response = await _watch(http, f"/api/v1/namespaces/{ns}/secrets", read=0.5)
    try:
        with pytest.raises(httpx2.ReadTimeout):
            async for _chunk in watch_body(response):
                pass
    finally:
        await response.aclose()
    assert (await http.get(f"/api/v1/namespaces/{ns}/secrets")).status_code == 200


async def test_a_401_over_http2_is_read_and_the_next_request_still_answered(
    hub_env: TestEnv,
) -> None:
    # kube-apiserver answers a refused credential over HTTP/2 with a GOAWAY
    # before the 401: the 401 is what the caller must see, not a protocol error,
    # and the next request goes out on a connection that takes new streams.
    config = copy.deepcopy(hub_env.kubeconfig)
    config["users"][0]["user"]["token"] = "not-the-token"
    target = await open_target(KubeConfig.from_dict(config).get(), deny=(), trust_env=False)
    try:
        first = await target.client.http.get("/api/v1/namespaces")
        second = await target.client.http.get("/api/v1/namespaces")
        assert (first.status_code, second.status_code) == (401, 401)
        assert {first.http_version, second.http_version} == {"HTTP/2"}
    finally:
        await target.close()
