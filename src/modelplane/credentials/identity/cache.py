"""Tokens of one identity for one target: cached, and refreshed ahead of expiry.

Every client of a target (lightkube's, the raw one discovery uses, the
watches) sends through one ``kube.transport.TokenAuth`` on one source, so they
share one token and one refresh. The ``TokenCache`` keeps sources across reconciles, so a
reconcile that opens its target afresh does not mint afresh.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from modelplane.credentials.identity.base import Minter, Token

# A token is refreshed this long before it expires, at most: a request sent
# with it must still arrive in time, and helm may run for minutes on one.
REFRESH_AHEAD_SECONDS = 300.0
# ... and at least this share of its lifetime before, for short-lived tokens.
REFRESH_AHEAD_SHARE = 0.25
CACHE_LIMIT = 256


class TokenSource:
    """One minter's tokens: the current one while it is fresh, else a new one.

    Concurrent callers share one mint. ``refresh(stale)`` is for a 401: it
    mints unless another caller already replaced the stale token.
    """

    def __init__(self, minter: Minter, clock: Callable[[], float] = time.time) -> None:
        self._minter = minter
        self._clock = clock
        self._token: Token | None = None
        self._minted_at = 0.0
        self._lock = asyncio.Lock()
        # How many tokens were minted: what tests and metrics read.
        self.mints = 0

    def _fresh(self) -> bool:
        token = self._token
        if token is None:
            return False
        lifetime = max(0.0, token.expires_at - self._minted_at)
        ahead = min(REFRESH_AHEAD_SECONDS, lifetime * REFRESH_AHEAD_SHARE)
        return self._clock() < token.expires_at - ahead

    async def _mint(self) -> str:
        minted_at = self._clock()
        token = await self._minter.mint()
        self._token, self._minted_at = token, minted_at
        self.mints += 1
        return token.value

    async def token(self) -> str:
        if self._fresh():
            assert self._token is not None
            return self._token.value
        async with self._lock:
            if self._fresh():
                assert self._token is not None
                return self._token.value
            return await self._mint()

    async def refresh(self, stale: str) -> str:
        """A token other than ``stale``, minted now unless another caller just did."""
        async with self._lock:
            if self._token is not None and self._token.value != stale and self._fresh():
                return self._token.value
            return await self._mint()


def cache_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class TokenCache:
    """Token sources by identity and target, kept across reconciles.

    Keyed by a digest of the credential and the target, so a changed Secret
    or kubeconfig gets a new source and the old one ages out. Bounded: the
    least recently used source goes first.
    """

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self._limit = limit
        self._sources: OrderedDict[str, TokenSource] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sources)

    def source(self, key: str, build: Callable[[], Minter]) -> TokenSource:
        """The source for ``key``, built (``build`` may raise ``IdentityError``) if new."""
        found = self._sources.get(key)
        if found is not None:
            self._sources.move_to_end(key)
            return found
        fresh = TokenSource(build())
        self._sources[key] = fresh
        while len(self._sources) > self._limit:
            self._sources.popitem(last=False)
        return fresh
