"""A target's answers to a reflector, scripted in order, for unit tests without a server."""

from __future__ import annotations

import asyncio

import httpx2


class Script:
    """Answers requests in order; past the script, holds the request open until cancelled."""

    def __init__(self, answers: list[httpx2.Response]) -> None:
        self.answers = answers
        self.requests: list[dict[str, str]] = []
        self.done = asyncio.Event()

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(dict(request.url.params))
        if len(self.requests) <= len(self.answers):
            return self.answers[len(self.requests) - 1]
        self.done.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def list_answer(rv: str, *names: str) -> httpx2.Response:
    """A LIST of ConfigMap-like objects named ``names`` in namespace ``ns``, at ``rv``."""
    items = [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": rv}} for n in names]
    return httpx2.Response(200, json={"metadata": {"resourceVersion": rv}, "items": items})
