"""The client-go reflector, for one collection on a target: LIST, then WATCH from there.

A ``Reflector`` keeps one collection (a resource, maybe one namespace and
selectors) current: one LIST, then a WATCH from the LIST's resourceVersion,
with bookmarks, re-armed from the last resourceVersion seen whenever the
server ends it. The API conventions this relies on (upstream-facts, "watch";
kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes
and #watch-bookmarks):

- a watch ends after ``timeoutSeconds`` (or whenever the server likes) with a
  clean end of stream: continue from the last resourceVersion, no LIST;
- a watch the network breaks (a reset, a deadline missed) is continued the
  same way once the target answers again: the copy holds every change up
  to its resourceVersion, and the watch sends the rest;
- ``410 Gone``, as the answer or as an ``ERROR`` event, means that
  resourceVersion is compacted away: LIST again and watch from the new one;
- ``BOOKMARK`` events carry only a newer resourceVersion: nothing changed,
  but a later re-arm starts from it and does not run into 410.

lightkube 1.0's ``watch`` sends no ``allowWatchBookmarks``, and on 410 it
re-watches from no resourceVersion at all (``generic_client.py``,
``GenericAsyncClient.watch``), which replays every object as ADDED and
leaves what was deleted meanwhile in place; hence a watch of our own on the
target's raw HTTP client.

When the target stops answering, one probe per target (``kube.link``)
stands in for every watch's retries, and the watches resume within a probe
of the server being back.

A target's server may be anyone's, so a reflector survives whatever it
answers, and waits before each try that follows a failure: a watch that
ends soon after it starts is re-armed with a backoff, reset only by a watch
that stayed open. Its copy has a budget (``kube.budget``) over the LIST's
pages and the watch's life, in objects, bytes and the memory their parse
builds; and what every reflector of a target holds is held in its
``Holdings`` too, within the target's and the shard's totals. Past any of
them the copy is dropped and the collection refused until a later try
finds it within them again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx2

from modelplane.backoff import Attempts, Backoff
from modelplane.kube.answers import describe_error
from modelplane.kube.bounded import BOUND, UNBOUNDED, shed_headers
from modelplane.kube.budget import Budget, Holdings, budget_for
from modelplane.kube.client import (
    CRD_STORAGE_TRIES,
    CRD_STORAGE_WAIT,
    METADATA_LIST,
    METADATA_OBJECT,
    ApiStatusError,
    Decode,
    OverBudget,
    collection_path,
    describe_collection,
    list_pages,
)
from modelplane.kube.collection_copy import CollectionCopy, Outline, object_name_key, whole
from modelplane.kube.link import Link
from modelplane.kube.watch_body import Lines, watch_body
from modelplane.untrusted import Limits, UntrustedInputError, load_json
from modelplane.wire import ApiRef

log = logging.getLogger("modelplane.operator.watch")

# client-go re-arms its watches every 5 to 10 minutes; so do we.
WATCH_TIMEOUT_SECONDS = 300.0
# The longest watch line read: one event, one object. The API server takes
# requests of at most 3 MiB and etcd stores values of at most 1.5 MiB by
# default, so a real object's event stays well below; past this, the line
# is not read further and the collection is listed again.
MAX_WATCH_LINE = 4 * 1024 * 1024
# A CRD's schema nests deeper than a configuration does; still far below
# what the JSON parser recurses to.
_EVENT_LIMITS = Limits(max_bytes=MAX_WATCH_LINE, max_depth=256)
# Between tries of a watch the server refused, or that keeps expiring.
WATCH_BACKOFF = Backoff(first=0.5, cap=30.0)
# A watch open this long (or half its timeoutSeconds, if less) ran its
# course: a real API server keeps one open for the timeoutSeconds asked, so
# only a good watch ends a run of failures and re-arms at once.
HEALTHY_WATCH_SECONDS = 10.0
# Between re-arms of watches that end soon after they start: a server (or a
# proxy in front of it) that closes each after a bookmark drove hundreds of
# requests a second into one reflector. Jittered, so that a stack's dozen
# reflectors do not re-arm in step.
REARM_BACKOFF = Backoff(first=0.5, cap=30.0, jitter=0.5)
# After a collection was refused over its budget: it does not shrink in a
# moment, and each try reads up to the budget again.
BUDGET_BACKOFF = Backoff(first=5.0, cap=300.0, jitter=0.5)

# Watches that broke and listed again, by the label of the stack they serve
# (the operator's metrics read it, and drop a stack's count with the stack).
# Kept here rather than on each Reflector: a stack's reflectors are replaced
# whenever its connection to the target is, and the count must not restart.
RESTARTS: collections.Counter[str] = collections.Counter()


@dataclass(frozen=True, order=True, slots=True)
class WatchKey:
    """One watched collection: a resource, optionally one namespace, label and field selectors.

    ``metadata_only``: the objects' metadata, never the rest (a Secret's data).
    """

    api: ApiRef
    namespace: str | None = None
    labels: str | None = None
    fields: str | None = None
    metadata_only: bool = False

    def params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.labels:
            params["labelSelector"] = self.labels
        if self.fields:
            params["fieldSelector"] = self.fields
        return params

    def __str__(self) -> str:
        api = self.api
        return "/".join(p for p in (api.group, api.version, api.resource) if p)


class Gone(Exception):
    """410: the resourceVersion watched from is no longer available."""


class Unreadable(Gone):
    """A watch line too long, or not a JSON event: list again, as after a 410.

    A LIST reads the collection as it is, so the event the line held is not
    lost; the watch from the new resourceVersion starts after it.
    """


class Refused(Exception):
    """The server answered a LIST or WATCH with an error status."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.code = code


class Reflector(CollectionCopy):
    """Keeps ``items`` equal to one collection; tells ``changed`` the object changed, or None."""

    # Past 30 attributes an instance's dict shares no keys with the others:
    # it was 1.5 KiB a reflector, one for each watch of every target.
    __slots__ = (
        "_armed_at",
        "_changed",
        "_clock",
        "_decode",
        "_healthy_after",
        "_http",
        "_label",
        "_link",
        "_listed_at",
        "_rand",
        "_retry",
        "_sleep",
        "_watch_timeout",
        "bookmarks",
        "expired",
        "key",
        "listing",
        "lists",
        "refusals",
        "resource_version",
        "resumes",
        "served",
        "synced",
        "watches",
    )

    def __init__(
        self,
        http: httpx2.AsyncClient,
        key: WatchKey,
        link: Link,
        changed: Callable[[WatchKey, str, str | None], None],
        *,
        label: str = "",
        watch_timeout: float = WATCH_TIMEOUT_SECONDS,
        budget: Budget | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        outline: Outline | None = None,
        holdings: Holdings | None = None,
        decode: Decode = load_json,
    ) -> None:
        super().__init__(
            describe_collection(key.api, key.namespace, key.labels, key.fields),
            budget or budget_for(key.api, metadata_only=key.metadata_only),
            holdings,
            outline,
        )
        self.key, self._http, self._link, self._changed = key, http, link, changed
        # Parses its pages and events: one may build only what ``outline`` keeps.
        self._decode = decode
        self._label, self._watch_timeout = label, watch_timeout
        self._clock, self._sleep, self._rand = clock, sleep, rand
        # True while ``items`` is known current: after a LIST, until the watch breaks.
        self.synced = False
        # False after a 404: the API is not served (``items`` is then empty).
        self.served = True
        # True while a LIST is under way, or about to be, that no failure
        # came before (the first, or one after a watch ended or expired),
        # or a watch is to resume from the copy once the target answers:
        # worth waiting for, where a collection that failed is in its
        # backoff and is not.
        self.listing = True
        self.lists = self.watches = self.bookmarks = self.expired = self.refusals = 0
        # Watches taken up again from the copy after the network broke one.
        self.resumes = 0
        # The newest resourceVersion the copy has taken in (its LIST's, then
        # each event's and bookmark's): a watch sends a collection's changes
        # in order, so the copy holds every write made at or before it.
        self.resource_version = ""
        self._retry: asyncio.Event | None = None  # only while a 404 waits: not one a watch
        self._listed_at = 0.0
        self._armed_at: float | None = None
        self._healthy_after = HEALTHY_WATCH_SECONDS

    def retry_now(self) -> None:
        """Try again at once a collection whose API was not served (a CRD changed)."""
        if self._retry is not None:
            self._retry.set()

    async def run(self) -> None:
        """LIST and WATCH until cancelled: every error is waited out, none ends the reflector."""
        failures = Attempts(WATCH_BACKOFF, rand=self._rand)
        rearms = Attempts(REARM_BACKOFF, rand=self._rand)
        refusals = Attempts(BUDGET_BACKOFF, rand=self._rand)
        outages = Attempts(WATCH_BACKOFF, rand=self._rand)
        settling = Attempts(CRD_STORAGE_WAIT)
        runs = (failures, rearms, refusals, outages)
        failing = refused = False
        # The copy outlived a watch the network broke: watched again from
        # its resourceVersion, not listed (a 410 then lists).
        resume = False
        while True:
            watching = False
            try:
                await self._link.up.wait()
                self.listing = not (failing or refused)
                if resume:
                    rv = self.resource_version
                else:
                    try:
                        rv = await self._list()
                    finally:
                        self.listing = False
                    settling.reset()
                    if failing or refused:
                        log.info("target of %s: watch of %s resumed", self._label, self.key)
                        failing = refused = False
                    self._changed(self.key, "LIST", None)
                resume, watching = False, True
                while True:
                    rv = await self._watch(rv)
                    if not self._ran_its_course(runs):
                        # Ended soon after it started, with whatever it sent
                        # (one bookmark, one event): re-armed at once, that is
                        # a loop of requests.
                        await self._sleep(rearms.fail())
            except OverBudget as err:
                # Dropped at once: a refused collection costs no memory while
                # it waits, and is not read again before the backoff is over.
                self._forget()
                self.synced = False
                self.refusals += 1
                self._ran_its_course(runs)
                if not refused:
                    log.warning("target of %s: watch of %s refused: %s", self._label, self.key, err)
                    refused = True
                    # The reconcile finds out by its own read, and says so.
                    self._changed(self.key, "REFUSED", None)
                await self._sleep(refusals.fail())
            except Unreadable as err:
                self.synced = False
                self.expired += 1
                self._ran_its_course(runs)
                log.warning(
                    "target of %s: watch of %s sent %s; listing again", self._label, self.key, err
                )
                if self._clock() - self._listed_at < 1.0:
                    await self._sleep(failures.fail())
            except Gone:
                # Compacted away while we were not looking: LIST again now.
                # A 410 right after a fresh LIST cannot repeat without a
                # server at fault; the backoff keeps that from spinning.
                self.synced = False
                self.expired += 1
                self._ran_its_course(runs)
                log.info(
                    "target of %s: watch of %s expired (410 Gone); listing again",
                    self._label,
                    self.key,
                )
                if self._clock() - self._listed_at < 1.0:
                    await self._sleep(failures.fail())
            except Refused as err:
                self.synced = False
                self._ran_its_course(runs)
                if err.code == 404:
                    # Not served (yet): try again when a CRD changes, or later.
                    self._forget()
                    self.served, self.synced = False, True
                    self._changed(self.key, "GONE", None)
                    self._retry = asyncio.Event()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._retry.wait(), failures.fail())
                    self._retry = None
                    continue
                if err.code == 429 and settling.count < CRD_STORAGE_TRIES:
                    # A CRD's storage still starting (after an install, or
                    # the server's own restart): a fraction of a second, and
                    # no news worth a log line.
                    await self._sleep(settling.fail())
                    continue
                if not failing:
                    log.warning(
                        "target of %s: watch of %s refused (%s); retrying with backoff",
                        self._label,
                        self.key,
                        err,
                    )
                    failing = True
                await self._sleep(failures.fail())
            except httpx2.TransportError as err:
                self.synced = False
                # client-go's reflector does the same: a watch stream broken
                # by a reset or a timeout ends as a watch does, and a watch
                # request refused a connection is sent again, from the last
                # resourceVersion (apimachinery watch/streamwatcher.go,
                # client-go tools/cache/reflector.go). Listing again instead
                # re-read every target's CRDs (6 MB each) after a blip, or
                # after a loaded shard's loop missed a watch's deadline.
                resume = watching and bool(self.resource_version)
                # A copy that is current again as soon as the target answers
                # is worth a reconcile's wait (a little: ``watches.current``),
                # rather than a read of the whole target meanwhile.
                self.listing = resume
                self._ran_its_course(runs)
                delay = outages.fail()
                if self._link.lost(err):
                    # The reconcile finds out and says the target is unreachable.
                    self._changed(self.key, "LOST", None)
                if outages.count > 1:
                    # Lost again before a watch stayed open: a server that
                    # answers the probe and drops the watches. The first
                    # loss waits for the probe alone, so an outage ends
                    # within a probe of the server answering.
                    await self._sleep(delay)
            except Exception as err:
                # Anything else the target made of an answer (a page over the
                # bound, a list that is no list, an object of another shape):
                # this collection waits and tries again, and only it.
                self._forget()
                self.synced = False
                self._ran_its_course(runs)
                if not failing:
                    log.warning(
                        "target of %s: watch of %s failed (%s); retrying with backoff",
                        self._label,
                        self.key,
                        describe_error(err),
                    )
                    failing = True
                    self._changed(self.key, "FAILED", None)
                await self._sleep(failures.fail())

    def _ran_its_course(self, runs: tuple[Attempts, ...]) -> bool:
        """Whether the last watch stayed open long enough to count as a good one (once).

        Only a watch that stayed open ends the runs of failures (``runs``
        start again): a LIST that succeeds does not, or a server that
        refuses every watch right after its LIST would be listed at the
        first delay forever. A method, not a closure in ``run``: that was a
        function and its cells kept for each watch of every target.
        """
        armed, self._armed_at = self._armed_at, None
        if armed is None or self._clock() - armed < self._healthy_after:
            return False
        for run in runs:
            run.reset()
        return True

    def release(self) -> None:
        """Drop the copy and give back what it held (the reflector is done with)."""
        self._forget()
        self.synced = False

    async def _list(self) -> str:
        # The copy is not read while a LIST replaces it (it is not synced):
        # dropped first, so a reflector never holds two of them.
        self._forget()
        try:
            found = await list_pages(
                self._http,
                self.key.api,
                namespace=self.key.namespace,
                labels=self.key.labels,
                fields=self.key.fields,
                accept=METADATA_LIST if self.key.metadata_only else "application/json",
                budget=self.budget,
                outline=None if self.outline is whole else self.outline,
                holdings=self.holdings,
                decode=self._decode,
            )
        except ApiStatusError as err:
            raise Gone() if err.status == 410 else Refused(err.status) from err
        self._replace(found)
        self.resource_version = found.resource_version
        self.served, self.synced = True, True
        if self.lists and self._label:
            RESTARTS[self._label] += 1
        self.lists += 1
        self._listed_at = self._clock()
        return found.resource_version

    async def _watch(self, rv: str) -> str:
        """One WATCH from ``rv``; returns the last resourceVersion seen when the server ends it."""
        # Sent rather than opened with ``http.stream``, whose context manager,
        # generator and arguments lived as long as the watch: for minutes,
        # for each watch of every target.
        try:
            response = await self._http.send(self._watch_request(rv), stream=True)
        finally:
            # A watch resumed from the copy is answered, or failed: no
            # longer worth a reconcile's wait (``listing``).
            self.listing = False
        try:
            if response.status_code == 410:
                raise Gone()
            if response.status_code >= 300:
                raise Refused(response.status_code)
            shed_headers(response)
            if not self.synced:
                self._resumed()
            async for line in Lines(watch_body(response), MAX_WATCH_LINE, Unreadable):
                if line.strip():
                    rv = self._apply(line, rv)
        finally:
            await response.aclose()
        return rv

    def _resumed(self) -> None:
        """A watch from the copy's resourceVersion was taken: the copy is current again.

        As current as after a LIST: what changed while nothing watched
        arrives next, as the watch's first events.
        """
        self.synced = True
        self.resumes += 1
        if self._label:
            # Broke and taken up again, as a relisted one is: a flaky link
            # shows in the metric whichever way the watch came back.
            RESTARTS[self._label] += 1
        log.debug("target of %s: watch of %s resumed from its copy", self._label, self.key)
        self._changed(self.key, "RESUMED", None)

    def _watch_request(self, rv: str) -> httpx2.Request:
        """The WATCH from ``rv``, noted as armed now."""
        seconds = int(self._watch_timeout * random.uniform(1.0, 2.0))
        params = {
            **self.key.params(),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": rv,
            "timeoutSeconds": str(seconds),
        }
        self._armed_at = self._clock()
        self._healthy_after = min(HEALTHY_WATCH_SECONDS, seconds / 2)
        self.watches += 1
        accept = METADATA_OBJECT if self.key.metadata_only else "application/json"
        return self._http.build_request(
            "GET",
            collection_path(self.key.api, self.key.namespace),
            params=params,
            # A read timeout past the server's own: a connection that went quiet
            # without closing (a lost network path) is given up, not waited on forever.
            timeout=httpx2.Timeout(10.0, read=seconds + 30.0),
            headers={"Accept": accept},
            # A watch's stream lives for minutes: bounded by its lines, not whole.
            extensions={BOUND: UNBOUNDED},
        )

    def _apply(self, line: bytes, rv: str) -> str:
        """One watch event's change to the copy; the resourceVersion it brings, else ``rv``."""
        try:
            event = self._decode(line, _EVENT_LIMITS)
        except UntrustedInputError as err:
            raise Unreadable(f"a line that is not an event ({err})") from None
        if not isinstance(event, dict) or not isinstance(event.get("object") or {}, dict):
            raise Unreadable("a line that is not an event (not an object)")
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            code = code if isinstance(code, int) and 100 <= code < 600 else 500
            raise Gone() if code == 410 else Refused(code)
        if kind not in _EVENT_TYPES:
            # A List or any other document answered to a watch: kept as
            # an object, it would be a body with no metadata to plan from.
            raise Unreadable("a line that is not an event (no known type)")
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise Unreadable("a line that is not an event (metadata not an object)")
        rv = str(metadata.get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            self.bookmarks += 1
            self.resource_version = rv
            return rv
        name = object_name_key(obj)
        if kind == "DELETED":
            self._drop(name)
        else:
            kept = self.outline(obj)
            self._keep(name, kept, len(line), self._weigh(line, kept))
        # Before the news: who it wakes reads the copy as of this event.
        self.resource_version = rv
        self._changed(self.key, str(kind), name)
        return rv


# What a watch event's type may be (ERROR is handled before).
_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
