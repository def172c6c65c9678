"""A watch-fed copy of what ``observe`` reads on a target.

``WatchCache`` runs one ``kube.reflector.Reflector`` per collection the
direct observation lists (filtered the same way), all behind one ``Link``
per target, and answers the same ``Listed`` a direct read gives once every
reflector is current: a no-op resync then reads nothing but the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import httpx2
from lightkube import AsyncClient

from modelplane.catalog.configuration import CLUSTER_CA, NS
from modelplane.kube.answers import describe_error
from modelplane.kube.budget import Holdings, target_holdings
from modelplane.kube.client import (
    TargetClient,
    TargetError,
)
from modelplane.kube.discovery import APIS, Served, discover, served
from modelplane.kube.link import PROBE_TIMEOUT_SECONDS, Link
from modelplane.kube.plurals import NONE as NO_PLURALS
from modelplane.kube.plurals import Kind, Plurals, merged
from modelplane.kube.reflector import WATCH_TIMEOUT_SECONDS, Reflector, WatchKey
from modelplane.observe.crd_outline import crd_outline, crd_plurals, established
from modelplane.observe.crd_reads import decode_crds
from modelplane.observe.gpu_watch import kept_digest, kept_part, outline, part_of
from modelplane.observe.named_outline import named_outline
from modelplane.observe.own_outline import own_outline
from modelplane.observe.parts import Parts
from modelplane.observe.state import (
    CRD_API_VERSION,
    NODES,
    OURS,
    PODS,
    SECRETS,
    Listed,
    ReleaseCollection,
    ReleaseWatch,
    Wanted,
    api_of,
    pull_secret_selector,
    release_secret_selector,
)
from modelplane.observe.writes import Written, at_or_after, covers
from modelplane.untrusted import as_dict, load_json
from modelplane.wire import ApiRef

log = logging.getLogger("modelplane.operator.watch")

CRDS = ApiRef("apiextensions.k8s.io", "v1", "customresourcedefinitions")
CONFIGMAPS = ApiRef("", "v1", "configmaps")


def watch_keys(want: Wanted, plurals: Mapping[Kind, str]) -> frozenset[WatchKey]:
    """The collections to watch so that ``Listed`` for ``want`` can be answered from them.

    A kind is watched once ``plurals`` (discovery, or the CRDs) says what it
    is served as; until then it is not served, and there is nothing to watch.
    """
    keys = {
        # Every CRD, not only ours: its events tell when the served APIs change.
        WatchKey(CRDS),
    }
    keys |= {release_secrets_key(namespace) for namespace in want.release_namespaces}
    for api_version, kind, namespace in want.kinds:
        api = api_of(api_version, kind, plurals)
        if api is not None and api_version != CRD_API_VERSION:
            keys.add(own_key(api, namespace))
    keys |= {WatchKey(api) for api, _ in want.objects}
    if want.bundle_ca:
        keys.add(WatchKey(CONFIGMAPS, namespace=NS, fields=f"metadata.name={CLUSTER_CA}"))
    keys |= {pull_secret_key(name) for name in want.pull_secrets}
    for w in want.release_objects:
        keys.add(release_object_key(w))
        if w.pods is not None:
            keys.add(release_pods_key(w))
    if want.nodes:
        keys.add(NODES_KEY)
    keys |= gpu_keys(want)
    keys |= {release_collection_key(c) for c in want.release_collections}
    return frozenset(keys)


def release_collection_key(c: ReleaseCollection) -> WatchKey:
    """A release's other objects of one kind in one namespace: their metadata, by name here."""
    return WatchKey(c.api, namespace=c.namespace, metadata_only=True)


def followed(names: frozenset[str], item: dict[str, Any]) -> tuple[str, str] | None:
    """(name, resourceVersion) of an object of a release collection; None unless followed."""
    meta = as_dict(item.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or name not in names:
        return None
    return (name, str(meta.get("resourceVersion") or ""))


NODES_KEY = WatchKey(NODES)


def gpu_keys(want: Wanted) -> frozenset[WatchKey]:
    """The collections the GPU checks list, watched only to say when they changed."""
    return frozenset(
        WatchKey(listing.api, namespace=listing.namespace, fields=listing.field_selector)
        for listing in want.gpu_listings
    )


def own_key(api: ApiRef, namespace: str) -> WatchKey:
    """The product's own objects of one kind, by label, in the namespace it applies them in."""
    return WatchKey(api, namespace=namespace or None, labels=OURS)


def release_secrets_key(namespace: str) -> WatchKey:
    """Helm's Secrets of the catalog's releases in one release namespace, and nowhere else."""
    return WatchKey(SECRETS, namespace=namespace, labels=release_secret_selector(namespace))


def release_object_key(w: ReleaseWatch) -> WatchKey:
    return WatchKey(w.api, namespace=w.namespace, fields=w.fields)


def release_pods_key(w: ReleaseWatch) -> WatchKey:
    assert w.pods is not None
    return WatchKey(PODS, namespace=w.namespace, labels=w.pods)


def pull_secret_key(name: str) -> WatchKey:
    """The Secrets of one name in every namespace, metadata only: their presence, no data."""
    return WatchKey(SECRETS, fields=pull_secret_selector(name), metadata_only=True)


def _touched(items: dict[str, dict[str, Any]], name: str | None) -> Iterable[dict[str, Any]]:
    """The objects an event changed: the one it names (none, deleted), or all of them (None)."""
    if name is None:
        return items.values()
    return [items[name]] if name in items else []


def _order(key: WatchKey) -> tuple[str, str, str, str, bool]:
    # Keys on one API differ by selectors that may be None; order on text.
    return (key.api.key, key.namespace or "", key.labels or "", key.fields or "", key.metadata_only)


def _has_label(obj: dict[str, Any], name: str, value: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(name) == value)


# How long a reconcile waits for collections being listed (for the first
# time, or again after a watch ended or expired) before it reads the whole
# target instead: each LIST it waits for is one of the twenty a direct read
# makes, and is usually done first.
LIST_WAIT_SECONDS = 10.0
# How much longer, once that wait is over, a reconcile waits on the copies
# of a lost target for one probe of it and the watches it resumes.
PROBE_WAIT_SECONDS = PROBE_TIMEOUT_SECONDS + 2.0
# How often a wait looks again when no LIST came: one that failed says so
# only the first time.
_LIST_POLL_SECONDS = 0.25

# The changes a watch tells of one object. Only these may be dropped as
# changing nothing the stack reads: a LIST, and a collection lost, refused or
# failed, always wake it. The first watch to lose the target is the only one
# that says so, and it may be any collection, a followed one included.
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
# What a reflector tells that leaves its copy as it was: the target lost
# (``kube.link.Link``), and a watch resumed from the copy.
_COPY_KEPT = frozenset({"LOST", "RESUMED"})


class WatchCache:
    """The reflectors for one target and spec; answers ``Listed`` when all of them are current.

    The reflector of a kind the product applies starts once its plural is
    known: from one discovery when the watches start, from a CRD as soon as
    the CRD watch sees it Established, or from the discovery ``listed`` reads.
    """

    def __init__(
        self,
        http: httpx2.AsyncClient,
        want: Wanted,
        wake: Callable[[], None],
        *,
        label: str = "",
        watch_timeout: float = WATCH_TIMEOUT_SECONDS,
        holdings: Holdings | None = None,
    ) -> None:
        self.want = want
        self._http = http
        self._wake = wake
        self._label = label
        self._watch_timeout = watch_timeout
        self.link = Link(http, label)
        # What this target's reflectors hold together, within the shard's total.
        self.holdings: Holdings = holdings or target_holdings(label)
        # Replaced, never changed: what it holds is shared (``kube.plurals``).
        self.plurals: Plurals = NO_PLURALS
        self.reflectors: dict[WatchKey, Reflector] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._discovering: asyncio.Task[None] | None = None
        self._started = False
        self._gpu_keys = gpu_keys(want)
        self._signal_only = self._gpu_keys - watch_keys(
            dataclasses.replace(want, gpu_listings=()), {}
        )
        # The kinds a requirement names, read for nothing but their names.
        self._named_only = frozenset(WatchKey(api) for api, _ in want.objects) - watch_keys(
            dataclasses.replace(want, objects=frozenset()), {}
        )
        self._add_reflectors()
        # Set, and replaced, at every change a reflector tells: what a wait
        # for a relist wakes on.
        self._moved = asyncio.Event()
        # Bumped by every CRD event and every relist: the served APIs may
        # have changed, and discovery is read again before the cache answers.
        self.api_generation = 0
        # The discovery answer itself, not only its APIs: holding it keeps the
        # one answer every target shares (``kube.discovery.shared``, held
        # weakly) alive; held by no one, the next target's became another.
        self._served: Served | None = None
        self._apis_generation = -1
        # What of each GPU collection (and of the Nodes, for DaemonSet
        # placement) the checks read, as last seen: a Node's status changes
        # with every heartbeat, and must not wake the stack each time.
        # Kept object by object: an event costs the object it tells of.
        # Those watched only to tell of a change keep each part's digest alone.
        self._parts: dict[WatchKey, Parts] = {
            key: Parts(kept_part, digest=kept_digest)
            if key in self._signal_only
            else Parts(part_of(key.api.resource))
            for key in {NODES_KEY, *self._gpu_keys}
        }
        # Bumped whenever that changed: the reconciler reads the advisories'
        # facts again when it differs from the one they were read at.
        self.facts_generation = 0
        # Watched only to tell of a change: never what the copy answers
        # with, so one the target refuses (403) does not keep it from syncing.
        # The names followed in each release collection: a change to another
        # object of the kind (any ClusterRole of the cluster) wakes nothing.
        names: dict[WatchKey, frozenset[str]] = {}
        for c in want.release_collections:
            key = release_collection_key(c)
            names[key] = names.get(key, frozenset()) | c.names
        self._parts.update({key: Parts(partial(followed, n)) for key, n in names.items()})

    def _outline(self, key: WatchKey) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        """What of each object a collection's copy keeps: only what is read of it."""
        if key.api == CRDS:
            return crd_outline
        if key in self._signal_only:
            return partial(outline, key.api.resource)
        if key.labels == OURS:
            return own_outline
        if key in self._named_only:
            return named_outline
        return None

    def _add_reflectors(self) -> None:
        for key in sorted(watch_keys(self.want, self.plurals) - set(self.reflectors), key=_order):
            reflector = Reflector(
                self._http,
                key,
                self.link,
                self._on_change,
                label=self._label,
                watch_timeout=self._watch_timeout,
                outline=self._outline(key),
                holdings=self.holdings,
                # Only what the outline reads of a CRD is built (``crd_reads``).
                decode=decode_crds if key.api == CRDS else load_json,
            )
            self.reflectors[key] = reflector
            if self._started:
                self._tasks.append(asyncio.create_task(reflector.run()))

    def learn(self, plurals: Mapping[Kind, str]) -> None:
        """Note what kinds are served as; the kinds newly known are watched from now on."""
        self.plurals = merged(self.plurals, plurals)
        self._add_reflectors()

    def start(self) -> None:
        self._started = True
        self._tasks = [asyncio.create_task(r.run()) for r in self.reflectors.values()]
        # Until it is done, the watches of the kinds it finds served are not
        # there to be waited for.
        self._discovering = asyncio.create_task(self._discover())
        self._tasks.append(self._discovering)

    async def _discover(self) -> None:
        try:
            found = await discover(self._http)
        except (TargetError, httpx2.TransportError) as err:
            # The CRD watch and the next ``listed`` learn the plurals instead.
            log.debug("target of %s: discovery failed: %s", self._label, describe_error(err))
            return
        self.learn(found.plurals)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.link.close()
        # Given back to the shard's total: the copies go with the cache.
        for reflector in self.reflectors.values():
            reflector.release()

    def _on_change(self, key: WatchKey, kind: str, name: str | None = None) -> None:
        """One change a reflector tells: ``name`` is the key of the object an event is of.

        Costs that object (its part, its CRD's plurals), never the whole
        collection, but for a LIST or a copy lost (or no ``name``).
        """
        self._moved.set()
        self._moved = asyncio.Event()
        if kind in _COPY_KEPT:
            # Nothing in the copy changed: what changes meanwhile comes as
            # events of its own once the watch resumes from it. The facts
            # are not read again for it (a Node's watch lost on each target
            # of a shard read every target's cluster-wide facts).
            self._wake()
            return
        items = self.reflectors[key].items
        # The one object an event is of; None: the whole collection is read again.
        one = name if kind in _OBJECT_EVENTS else None
        parts = self._parts.get(key)
        if parts is not None:
            changed = parts.rebuild(items) if one is None else parts.update(one, items.get(one))
            if not changed and kind in _OBJECT_EVENTS:
                return
        if key == NODES_KEY or key in self._gpu_keys:
            # A LIST too: what changed while the watch was down has no event.
            self.facts_generation += 1
            log.debug("target of %s: %s changed (%s): facts read again", self._label, key, kind)
        if key.api == CRDS or kind == "LIST":
            self.api_generation += 1
            if key.api == CRDS:
                # Plurals are only ever learned: those of the CRD changed are all it adds.
                self.learn(crd_plurals(_touched(items, one)))
                for reflector in self.reflectors.values():
                    if not reflector.served:
                        reflector.retry_now()
        self._wake()

    def synced(self) -> bool:
        return all(r.synced for k, r in self.reflectors.items() if k not in self._signal_only)

    async def current(self, within: float) -> bool:
        """Whether every watch is current, waiting up to ``within`` s for those listing again.

        The watches list every collection when they start (after one
        discovery), and each one again when its watch ends or meets a 410: a
        reconcile that came meanwhile would list all twenty collections
        itself to spare the wait. A collection that failed is in its
        backoff, and is not waited for. Copies of a lost target are waited
        for ``within``, then for one probe asked for at once
        (``PROBE_WAIT_SECONDS``): the target may be back, unnoticed by a
        probe in its backoff.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        discovering = self._discovering
        if within > 0 and discovering is not None and not discovering.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(discovering), within)
        probed = within <= 0  # a read that does not wait asks for no probe either
        while not self.synced():
            pending = [
                r for k, r in self.reflectors.items() if not r.synced and k not in self._signal_only
            ]
            if not all(r.listing for r in pending):
                return False
            left = deadline - loop.time()
            if left <= 0:
                if probed or self.link.up.is_set():
                    return False
                # The copies wait for a lost target's probe, which may be
                # backing off well past this wait: one probe now, and the
                # copies its answer resumes are waited for.
                probed = True
                self.link.probe_now()
                deadline = loop.time() + PROBE_WAIT_SECONDS
                continue
            await self._moved_within(left)
        return True

    async def _moved_within(self, left: float) -> None:
        """Wait for the next change a reflector tells, or a poll's time (or ``left``)."""
        moved = self._moved
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, _LIST_POLL_SECONDS)):
                await moved.wait()

    def _holds(self, w: Written) -> bool | None:
        """Whether the copy holds ``w``: yes, not yet, or None: no watch ever will."""
        api = api_of(w.api_version, w.kind, self.plurals)
        watching = [
            r
            for k, r in self.reflectors.items()
            if k.api == api and k not in self._signal_only and covers(k, w)
        ]
        if not watching:
            return None
        for reflector in watching:
            obj = reflector.items.get(w.key) if reflector.synced else None
            if obj is None:
                continue
            # An outline that keeps no resourceVersion (a CRD's, shared by
            # every target) is as new as the copy that holds it.
            seen = as_dict(as_dict(obj).get("metadata")).get("resourceVersion")
            seen = seen if isinstance(seen, str) else reflector.resource_version
            if seen and at_or_after(seen, w.resource_version):
                return True
        return False

    async def shows(self, writes: Iterable[Written], within: float) -> bool:
        """Whether the copy holds every one of ``writes``, waiting up to ``within`` s for events.

        False at once if one of them is of a collection nothing here watches.
        """
        pending = list(writes)
        deadline = asyncio.get_running_loop().time() + within
        while True:
            held = [self._holds(w) for w in pending]
            if None in held:
                return False
            pending = [w for w, h in zip(pending, held, strict=True) if not h]
            left = deadline - asyncio.get_running_loop().time()
            if not pending or left <= 0:
                return not pending
            await self._moved_within(left)

    async def listed(self, client: AsyncClient, *, within: float = 0.0) -> Listed | None:
        """What ``read_listed`` would read, from the watches; None when they are not current.

        ``within``: how long to wait for collections being listed again.

        Costs no request, except discovery (two) after the served APIs may have changed.
        """
        if not await self.current(within):
            return None
        found = self._served
        if found is None or self._apis_generation != self.api_generation:
            generation = self.api_generation
            found = await served(client)
            self.learn(found.plurals)
            # Kept only once discovery shows every CRD the watch says is
            # served: discovery lags a new CRD by a moment, and a copy taken
            # in that moment would hide the API until the next CRD event.
            if self._consistent(found.apis):
                self._served, self._apis_generation = found, generation
        elif isinstance(client, TargetClient):
            # What an apply in this reconcile needs, without a discovery of its own.
            client.plurals = merged(client.plurals, self.plurals)
        return self._fill(found.apis)

    def _consistent(self, apis: APIS) -> bool:
        for crd in self.reflectors[WatchKey(CRDS)].items.values():
            spec, status = crd.get("spec") or {}, crd.get("status") or {}
            if not established(status):
                continue
            plural = (spec.get("names") or {}).get("plural", "")
            served_versions = apis.get(spec.get("group", ""), {}).get(plural, [])
            for version in spec.get("versions") or []:
                if version.get("served") and version.get("name") not in served_versions:
                    return False
        return True

    def _fill(self, apis: APIS) -> Listed | None:
        listed = Listed(apis=apis)

        def items(key: WatchKey) -> list[dict[str, Any]] | None:
            reflector = self.reflectors.get(key)
            if reflector is None:
                return None  # learned served this moment: its watch starts now
            if not (reflector.synced and reflector.served):
                # Discovery serves it but the watch has not listed it yet.
                reflector.retry_now()
                return None
            return [reflector.items[k] for k in sorted(reflector.items)]

        for api_version, kind, namespace in sorted(self.want.kinds):
            if api_version == CRD_API_VERSION:
                if not CRDS.served_in(apis):
                    continue
                found = items(WatchKey(CRDS))
                found = (
                    None if found is None else [o for o in found if _has_label(o, *OURS.split("="))]
                )
            else:
                api = api_of(api_version, kind, self.plurals)
                if api is None or not api.served_in(apis):
                    continue
                found = items(own_key(api, namespace))
            if found is None:
                return None
            listed.items.setdefault((api_version, kind), []).extend(found)
        for api, _ in sorted(self.want.objects, key=lambda o: (o[0].key, o[1])):
            if api.served_in(apis):
                found = items(WatchKey(api))
                if found is None:
                    return None
                listed.objects[api.key] = found
        for namespace in self.want.release_namespaces:
            secrets = items(release_secrets_key(namespace))
            if secrets is None:
                return None
            listed.release_secrets += secrets
        if self.want.bundle_ca:
            cms = items(WatchKey(CONFIGMAPS, namespace=NS, fields=f"metadata.name={CLUSTER_CA}"))
            if cms is None:
                return None
            listed.ca_configmap = cms[0] if cms else None
        for name in self.want.pull_secrets:
            found = items(pull_secret_key(name))
            if found is None:
                return None
            listed.pull_secrets[name] = found
        for w in self.want.release_objects:
            found = items(release_object_key(w))
            if found is None:
                return None
            listed.release_objects[w] = found
            if w.pods is not None:
                pods = items(release_pods_key(w))
                if pods is None:
                    return None
                listed.release_pods[w] = pods
        for c in self.want.release_collections:
            found = items(release_collection_key(c))
            if found is None:
                return None
            listed.release_collections[c] = found
        if self.want.nodes:
            nodes = items(NODES_KEY)
            if nodes is None:
                return None
            listed.nodes = nodes
        return listed
