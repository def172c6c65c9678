"""Token caching, refresh ahead of expiry, and the one-retry 401 rule of TokenAuth."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from modelplane.credentials.identity.base import Token
from modelplane.credentials.identity.cache import TokenCache, TokenSource
from modelplane.kube.client import TargetClient
from modelplane.kube.transport import AuthTransport, TokenAuth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingMinter:
    """Mints token-1, token-2, ... each ``lifetime`` seconds long, on ``clock``."""

    def __init__(self, clock: Clock, lifetime: float = 3600.0, gives_way: bool = False) -> None:
        self.clock, self.lifetime, self.gives_way = clock, lifetime, gives_way
        self.count = 0

    async def mint(self) -> Token:
        if self.gives_way:
            # Back to the event loop once, as a real mint's request would:
            # every other caller gathered with this one runs meanwhile and
            # finds this mint under way. No time passes, so none is waited on.
            await asyncio.sleep(0)
        self.count += 1
        return Token(f"token-{self.count}", self.clock() + self.lifetime)


async def test_a_fresh_token_is_reused_and_refreshed_ahead_of_expiry() -> None:
    clock = Clock()
    minter = CountingMinter(clock, lifetime=3600)
    source = TokenSource(minter, clock)
    assert await source.token() == "token-1"
    clock.now += 3000  # ten minutes left: still fresh
    assert await source.token() == "token-1"
    clock.now += 301  # under five minutes left: refreshed before it expires
    assert await source.token() == "token-2"
    assert minter.count == 2


async def test_short_lived_tokens_refresh_at_three_quarters_of_their_life() -> None:
    clock = Clock()
    minter = CountingMinter(clock, lifetime=2)
    source = TokenSource(minter, clock)
    assert await source.token() == "token-1"
    clock.now += 1.4
    assert await source.token() == "token-1"
    clock.now += 0.2  # 1.6 s of 2: past three quarters
    assert await source.token() == "token-2"


async def test_concurrent_callers_share_one_mint() -> None:
    clock = Clock()
    minter = CountingMinter(clock, gives_way=True)
    source = TokenSource(minter, clock)
    tokens = await asyncio.gather(*(source.token() for _ in range(10)))
    assert set(tokens) == {"token-1"}
    assert minter.count == 1


async def test_concurrent_401s_refresh_once() -> None:
    clock = Clock()
    minter = CountingMinter(clock, gives_way=True)
    source = TokenSource(minter, clock)
    stale = await source.token()
    fresh = await asyncio.gather(*(source.refresh(stale) for _ in range(5)))
    assert set(fresh) == {"token-2"}
    assert minter.count == 2


def _client(source: TokenSource, answer: list[int], seen: list[str]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["Authorization"])
        return httpx2.Response(answer.pop(0) if len(answer) > 1 else answer[0], json={})

    return httpx2.AsyncClient(
        transport=httpx2.MockTransport(handler),
        auth=TokenAuth(source),
        base_url="https://target.invalid",
    )


async def test_a_401_forces_one_refresh_and_one_retry() -> None:
    clock = Clock()
    minter = CountingMinter(clock)
    seen: list[str] = []
    async with _client(TokenSource(minter, clock), [401, 200], seen) as client:
        response = await client.post("/api/v1/namespaces", json={"metadata": {"name": "x"}})
    assert response.status_code == 200
    assert seen == ["Bearer token-1", "Bearer token-2"]
    assert minter.count == 2


async def test_a_401_after_the_refresh_stands_never_a_loop() -> None:
    clock = Clock()
    minter = CountingMinter(clock)
    seen: list[str] = []
    async with _client(TokenSource(minter, clock), [401], seen) as client:
        response = await client.get("/api")
        assert response.status_code == 401
        assert seen == ["Bearer token-1", "Bearer token-2"]
        # The next request uses the refreshed token and again retries only once.
        response = await client.get("/api")
    assert response.status_code == 401
    assert seen[2:] == ["Bearer token-2", "Bearer token-3"]
    assert minter.count == 3


def test_the_sync_flow_is_refused_rather_than_sending_no_token() -> None:
    source = TokenSource(CountingMinter(Clock()))
    with (
        httpx2.Client(
            transport=httpx2.MockTransport(lambda r: httpx2.Response(200)),
            auth=TokenAuth(source),
        ) as client,
        pytest.raises(RuntimeError, match="asynchronously"),
    ):
        client.get("https://target.invalid/api")


def test_the_cache_keeps_sources_by_key_and_drops_the_least_recently_used() -> None:
    cache = TokenCache(limit=2)
    built: list[str] = []

    def build(name: str) -> CountingMinter:
        built.append(name)
        return CountingMinter(Clock())

    a = cache.source("a", lambda: build("a"))
    assert cache.source("a", lambda: build("a")) is a
    cache.source("b", lambda: build("b"))
    cache.source("a", lambda: build("a"))  # a is now the most recent
    cache.source("c", lambda: build("c"))  # b goes
    assert len(cache) == 2
    assert cache.source("a", lambda: build("a")) is a
    cache.source("b", lambda: build("b"))
    assert built == ["a", "b", "c", "b"]


async def test_both_clients_of_a_target_share_one_token_and_one_refresh() -> None:
    # The identity's auth rides on the transport both clients share: a 401 on
    # either refreshes once, and the other sends the fresh token without minting.
    clock = Clock()
    minter = CountingMinter(clock)
    source = TokenSource(minter, clock)
    seen: list[str] = []
    answers = [200, 401, 200, 200]

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("Authorization", ""))
        body = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}}
        return httpx2.Response(answers.pop(0), json=body)

    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "clusters": [{"name": "t", "cluster": {"server": "https://target.invalid"}}],
        "users": [{"name": "t", "user": {}}],
    }
    transport = AuthTransport(TokenAuth(source), httpx2.MockTransport(handler))
    params = ConnectionParams(transport=transport)  # type: ignore[arg-type]
    client = TargetClient(KubeConfig.from_dict(kubeconfig).get(), params)
    try:
        await client.get(ConfigMap, "x", namespace="default")
        response = await client.http.get("/api")
        await client.get(ConfigMap, "x", namespace="default")
    finally:
        await client.close()
    assert response.status_code == 200
    assert seen == ["Bearer token-1", "Bearer token-1", "Bearer token-2", "Bearer token-2"]
    assert minter.count == 2


async def test_the_transport_resends_the_body_with_the_refreshed_token() -> None:
    clock = Clock()
    source = TokenSource(CountingMinter(clock), clock)
    sent: list[tuple[str, bytes]] = []
    answers = [401, 201]

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append((request.headers["Authorization"], request.content))
        return httpx2.Response(answers.pop(0), json={})

    transport = AuthTransport(TokenAuth(source), httpx2.MockTransport(handler))
    async with httpx2.AsyncClient(transport=transport, base_url="https://target.invalid") as http:
        response = await http.post("/api/v1/namespaces", json={"metadata": {"name": "x"}})
    assert response.status_code == 201
    body = b'{"metadata":{"name":"x"}}'
    assert sent == [("Bearer token-1", body), ("Bearer token-2", body)]
