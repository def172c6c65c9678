"""A watch the network breaks is taken up again from the copy, not listed again.

Issue 42: a settled shard on a loaded machine missed its watches' deadlines,
and each broken watch listed its collection again (a target's CRDs are 6 MB),
which loaded the machine further. client-go continues such a watch from its
last resourceVersion; so does the reflector now, and lists only when the
server answers that version with 410. Over real sockets (a loopback server
that drops the connection mid-answer), so the break is the one httpx2 sees.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from tests.hostile_server import Answer, HostileServer

from modelplane.kube.link import Link
from modelplane.kube.reflector import RESTARTS, Reflector, WatchKey
from modelplane.wire import ApiRef

KEY = WatchKey(ApiRef("", "v1", "configmaps"), namespace="ns")
# How long a test may hang before it fails, never a measure of speed.
GUARD = 20.0


def _cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


GONE = _event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})


@dataclass(frozen=True)
class Said:
    """One answer: these bytes, then the connection dropped (``cut``) or the answer ended."""

    body: bytes
    cut: bool = False


def _listed(rv: str, *, cut: bool = False) -> Said:
    items = [_cm("a", "9"), _cm("b", "9")]
    body = json.dumps({"metadata": {"resourceVersion": rv}, "items": items}).encode()
    return Said(body[:20] if cut else body, cut)


class Target:
    """Answers LISTs and WATCHes from two scripts; past a script, holds the request open."""

    def __init__(self, lists: list[Said], watches: list[Said]) -> None:
        self.script = {"lists": lists, "watches": watches}
        self.server = HostileServer(self.answer)
        self.asked: dict[str, list[dict[str, str]]] = {"lists": [], "watches": []}
        # The reflector's (synced, listing) as each WATCH was asked for.
        self.state: list[tuple[bool, bool]] = []
        # And as the lost target was probed.
        self.probed: list[tuple[bool, bool]] = []
        self.reflector: Reflector | None = None

    async def answer(self, params: dict[str, str], answer: Answer) -> None:
        if "/readyz" in self.server.heads[-1].split("\r\n", 1)[0]:
            assert self.reflector is not None
            self.probed.append((self.reflector.synced, self.reflector.listing))
            await answer.send(b"ok")
            await answer.end()
            return
        kind = "watches" if params.get("watch") == "true" else "lists"
        asked = self.asked[kind]
        asked.append(params)
        if kind == "watches" and self.reflector is not None:
            self.state.append((self.reflector.synced, self.reflector.listing))
        if len(asked) > len(self.script[kind]):
            await asyncio.Event().wait()
        said = self.script[kind][len(asked) - 1]
        await answer.send(said.body)
        if said.cut:
            answer.abort()
        else:
            await answer.end()


async def _run(target: Target, until: str, times: int = 1, label: str = "") -> list[str]:
    """Run a reflector on ``target`` until it told of ``until`` ``times`` times; what it told."""
    changes: list[str] = []
    done = asyncio.Event()

    def changed(_key: WatchKey, kind: str, _name: str | None) -> None:
        changes.append(kind)
        if changes.count(until) == times:
            done.set()

    async with target.server, target.server.client() as http:
        target.reflector = Reflector(http, KEY, Link(http, "test"), changed, label=label)
        task = asyncio.create_task(target.reflector.run())
        try:
            async with asyncio.timeout(GUARD):
                await done.wait()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return changes


async def test_a_watch_cut_mid_stream_resumes_from_its_last_version_without_a_list() -> None:
    target = Target(
        [_listed("10")],
        [
            Said(_event("MODIFIED", _cm("a", "15")), cut=True),
            Said(_event("ADDED", _cm("c", "20"))),
        ],
    )
    label = "ns/resumed-not-listed"
    changes = await _run(target, until="ADDED", label=label)
    reflector = target.reflector
    assert reflector is not None
    assert len(target.asked["lists"]) == 1, target.asked
    # The stack's modelplane_stack_watch_restarts_total counts it.
    assert RESTARTS[label] == 1
    # From the version of the last event taken in before the cut, not the LIST's.
    assert [w["resourceVersion"] for w in target.asked["watches"]] == ["10", "15"]
    # While the target was lost, and when the watch was asked for again, the
    # copy was not known current, and worth a reconcile's wait.
    assert target.probed == [(False, True)]
    assert target.state == [(True, False), (False, True)]
    assert sorted(reflector.items) == ["ns/a", "ns/b", "ns/c"]
    assert reflector.items["ns/a"]["metadata"]["resourceVersion"] == "15"
    assert reflector.synced and not reflector.listing
    assert (reflector.lists, reflector.resumes) == (1, 1)
    assert changes == ["LIST", "MODIFIED", "LOST", "RESUMED", "ADDED"], changes


async def test_a_resumed_watch_answered_410_lists_again() -> None:
    # The version was compacted away while nothing watched (a long outage,
    # or a server restarted with an empty watch cache): then a LIST.
    target = Target(
        [_listed("10"), _listed("30")],
        [Said(_event("MODIFIED", _cm("a", "15")), cut=True), Said(GONE)],
    )
    changes = await _run(target, until="LIST", times=2)
    reflector = target.reflector
    assert reflector is not None
    assert [w["resourceVersion"] for w in target.asked["watches"]][:2] == ["10", "15"]
    assert reflector.lists == 2 and reflector.expired == 1
    # A real API server answers such a watch 200, then the 410 as its first
    # event: the copy counts as resumed for that moment, as one LISTed at 15
    # and read late would be current as of 15.
    assert changes == ["LIST", "MODIFIED", "LOST", "RESUMED", "LIST"], changes


async def test_a_list_cut_mid_answer_is_listed_again() -> None:
    # Nothing of a LIST cut short is kept: there is no copy to resume.
    target = Target([_listed("10", cut=True), _listed("20")], [])
    changes = await _run(target, until="LIST")
    reflector = target.reflector
    assert reflector is not None
    assert len(target.asked["lists"]) == 2, target.asked
    assert reflector.resumes == 0 and reflector.lists == 1
    # Nothing to wait for while lost: the copy was dropped with the cut LIST.
    assert target.probed == [(False, False)]
    assert changes == ["LOST", "LIST"], changes
