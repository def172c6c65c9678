"""The watch-fed cache answers only when every watch is current, with observe's conversion."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import replace
from typing import Any

import httpx2
import pytest

from modelplane.api.spec import ServingStackSpec
from modelplane.kube.discovery import PLURALS, Served, shared
from modelplane.kube.reflector import WatchKey
from modelplane.observe import watches
from modelplane.observe.state import (
    ReleaseCollection,
    ReleaseWatch,
    Wanted,
    to_observed,
    wanted,
)
from modelplane.observe.watches import (
    CRDS,
    NODES_KEY,
    WatchCache,
    crd_plurals,
    release_collection_key,
    watch_keys,
)
from modelplane.pins import ComponentsMode
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, ApiRef

from .conftest import CA_PEM

SPEC = ServingStackSpec.model_validate(
    {
        "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
        "gateway": {"hostname": "west.example.com"},
    }
)


def _gateway(address: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "inference-gateway",
            "namespace": "modelplane-system",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {DIGEST_ANNOTATION: "d1"},
        },
        "status": {"addresses": [{"type": "IPAddress", "value": address}]},
    }


# What discovery says the kinds these specs apply are served as.
SERVED: PLURALS = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Namespace"): "namespaces",
    ("v1", "Service"): "services",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("apps/v1", "Deployment"): "deployments",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("cert-manager.io/v1", "Certificate"): "certificates",
    ("cert-manager.io/v1", "Issuer"): "issuers",
    ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy"): "clienttrafficpolicies",
    ("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy"): "envoyproxies",
    ("gateway.networking.k8s.io/v1", "Gateway"): "gateways",
    ("gateway.networking.k8s.io/v1", "GatewayClass"): "gatewayclasses",
    ("trust.cert-manager.io/v1alpha1", "Bundle"): "bundles",
}


# Longer than any test runs: a wait this long ends only by what it waits for.
FOREVER = 3600.0
# How long a test may hang before it fails, never a measure of speed.
GUARD = 20.0


def polls_out_of_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy's waits look again only when a reflector tells a change, never by their poll."""
    monkeypatch.setattr(watches, "_LIST_POLL_SECONDS", FOREVER)


def _cache() -> WatchCache:
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)
    cache.learn(SERVED)
    return cache


def test_the_ca_configmap_is_watched_only_with_a_hostname() -> None:
    with_hostname = watch_keys(wanted(SPEC), SERVED)
    without = watch_keys(
        wanted(
            SPEC.model_copy(update={"gateway": SPEC.gateway.model_copy(update={"hostname": None})})
        ),
        SERVED,
    )
    # The private CA's kinds come with the hostname too; the CA ConfigMap
    # by its name only, as trust-manager writes it without our label.
    ca = [k for k in with_hostname - without if k.api.resource == "configmaps"]
    assert [k.fields for k in ca] == ["metadata.name=modelplane-cluster-ca"]
    assert WatchKey(CRDS) in without


def test_no_answer_until_every_watch_has_listed() -> None:
    async def run() -> None:
        cache = _cache()
        assert await cache.listed(None) is None  # type: ignore[arg-type]
        for reflector in cache.reflectors.values():
            reflector.synced = True
        gateways = next(k for k in cache.reflectors if k.api.resource == "gateways")
        cache.reflectors[gateways].items = {
            "modelplane-system/inference-gateway": _gateway("203.0.113.9")
        }
        apis = {
            "gateway.networking.k8s.io": {"gateways": ["v1"]},
            "": {"secrets": ["v1"], "configmaps": ["v1"]},
        }
        cache._served, cache._apis_generation = Served(apis), cache.api_generation
        listed = await cache.listed(None)  # type: ignore[arg-type]
        assert listed is not None
        assert to_observed(listed).gateway_addresses == ["203.0.113.9"]
        cache.reflectors[gateways].synced = False
        assert await cache.listed(None) is None  # type: ignore[arg-type]

    asyncio.run(run())


def test_a_crd_event_makes_the_served_apis_stale() -> None:
    cache = _cache()
    generation = cache.api_generation
    cache._on_change(WatchKey(CRDS), "MODIFIED")
    assert cache.api_generation == generation + 1
    secrets = next(k for k in cache.reflectors if k.api.resource == "secrets")
    cache._on_change(secrets, "MODIFIED")
    assert cache.api_generation == generation + 1


def test_a_stack_with_client_cas_watches_configmaps_twice() -> None:
    # Client CAs are a ConfigMap of ours (by label) and the CA ConfigMap is
    # watched by name: two keys on one API, which must still order, or the
    # watcher cannot start for any stack with a hostname and clientCAs.
    spec = ServingStackSpec.model_validate(
        {
            "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
            "gateway": {
                "hostname": "west.example.com",
                "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
            },
        }
    )
    keys = [k for k in watch_keys(wanted(spec), SERVED) if k.api.resource == "configmaps"]
    assert len(keys) == 2
    cache = WatchCache(httpx2.AsyncClient(), wanted(spec), lambda: None)
    cache.learn(SERVED)
    assert set(cache.reflectors) == watch_keys(wanted(spec), SERVED)


def test_a_kind_is_watched_once_its_plural_is_known_and_not_before() -> None:
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)
    assert not any(k.api.resource == "gateways" for k in cache.reflectors)
    cache.learn({("gateway.networking.k8s.io/v1", "Gateway"): "gateways"})
    gateways = [k for k in cache.reflectors if k.api.resource == "gateways"]
    assert [(k.api.group_version, k.labels) for k in gateways] == [
        ("gateway.networking.k8s.io/v1", f"{MANAGED_BY_LABEL}={MANAGED_BY}")
    ]


def _crd(served: bool, established: bool) -> dict[str, Any]:
    return {
        "spec": {
            "group": "gateway.networking.k8s.io",
            "names": {"kind": "Gateway", "plural": "gateways"},
            "versions": [{"name": "v1", "served": served}, {"name": "v1beta1", "served": False}],
        },
        "status": {
            "conditions": [{"type": "Established", "status": "True" if established else "False"}]
        },
    }


@pytest.mark.parametrize(
    ("served", "established", "expected"),
    [
        (True, True, {("gateway.networking.k8s.io/v1", "Gateway"): "gateways"}),
        (True, False, {}),  # not Established: nothing served yet
        (False, True, {}),  # no version served
    ],
)
def test_a_crd_says_what_its_kind_is_served_as(
    served: bool, established: bool, expected: PLURALS
) -> None:
    assert crd_plurals([_crd(served, established)]) == expected


def test_a_crd_event_starts_the_watch_of_the_kind_it_serves() -> None:
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)
    cache.reflectors[WatchKey(CRDS)].items = {
        "/gateways.gateway.networking.k8s.io": _crd(True, True)
    }
    cache._on_change(WatchKey(CRDS), "ADDED")
    assert any(k.api.resource == "gateways" for k in cache.reflectors)


def _release_want() -> tuple[Wanted, ReleaseWatch]:
    plugin = ReleaseWatch(ApiRef("apps", "v1", "daemonsets"), "dra", "plugin", "app=plugin")
    return replace(wanted(SPEC), release_objects=(plugin,)), plugin


def test_a_release_workload_is_watched_by_name_with_its_pods_and_the_nodes() -> None:
    want, _ = _release_want()
    keys = watch_keys(want, SERVED) - watch_keys(wanted(SPEC), SERVED)
    assert {(k.api.resource, k.namespace, k.labels, k.fields) for k in keys} == {
        ("daemonsets", "dra", None, "metadata.name=plugin"),
        ("pods", "dra", "app=plugin", None),
    }
    # The Nodes are watched for the GPU checks anyway, in either mode.
    assert NODES_KEY in watch_keys(wanted(SPEC), SERVED)


def test_a_node_heartbeat_does_not_wake_the_stack_a_new_taint_does() -> None:
    woken: list[int] = []
    want, _ = _release_want()
    cache = WatchCache(httpx2.AsyncClient(), want, lambda: woken.append(1))
    nodes = cache.reflectors[NODES_KEY]
    node: dict[str, Any] = {"metadata": {"name": "gpu-0", "labels": {"a": "b"}}, "spec": {}}
    nodes.items = {"gpu-0": node}
    cache._on_change(NODES_KEY, "LIST")
    assert len(woken) == 1
    nodes.items = {"gpu-0": {**node, "status": {"conditions": [{"type": "Ready"}]}}}
    cache._on_change(NODES_KEY, "MODIFIED")
    assert len(woken) == 1
    tainted = {**node, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
    nodes.items = {"gpu-0": tainted}
    cache._on_change(NODES_KEY, "MODIFIED")
    assert len(woken) == 2


def test_the_cache_answers_a_release_workload_with_its_pods() -> None:
    async def run() -> None:
        want, plugin = _release_want()
        cache = WatchCache(httpx2.AsyncClient(), want, lambda: None)
        cache.learn(SERVED)
        for reflector in cache.reflectors.values():
            reflector.synced = True
        pods = next(k for k in cache.reflectors if k.api.resource == "pods")
        cache.reflectors[pods].items = {"dra/p": {"metadata": {"name": "p"}}}
        cache._served = Served({"": {"secrets": ["v1"]}})
        cache._apis_generation = cache.api_generation
        listed = await cache.listed(None)  # type: ignore[arg-type]
        assert listed is not None
        assert listed.release_objects == {plugin: []}
        assert listed.release_pods == {plugin: [{"metadata": {"name": "p"}}]}
        assert listed.nodes == []

    asyncio.run(run())


def test_the_gpu_checks_listings_are_watched_and_their_changes_counted() -> None:
    woken: list[int] = []
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: woken.append(1))
    resources = {k.api.resource for k in cache.reflectors}
    assert {"nodes", "resourceslices", "daemonsets"} <= resources
    plugin = next(k for k in cache.reflectors if k.api.resource == "daemonsets")
    assert plugin.namespace, plugin
    body: dict[str, Any] = {"metadata": {"name": "p", "namespace": "dra"}, "spec": {}}
    # The copies hold what the watches keep of each object: its outline.
    kept = cache.reflectors[plugin].outline
    cache.reflectors[plugin].items = {"p": kept(body)}
    cache._on_change(plugin, "LIST")
    generation, wakes = cache.facts_generation, len(woken)
    # A status condition's heartbeat: nothing the checks read.
    cache.reflectors[plugin].items = {"p": kept({**body, "status": {"conditions": []}})}
    cache._on_change(plugin, "MODIFIED")
    assert (cache.facts_generation, len(woken)) == (generation, wakes)
    # A cordon is read: the facts are read again.
    nodes = cache.reflectors[NODES_KEY]
    node = {"metadata": {"name": "gpu-0"}, "spec": {}}
    nodes.items = {"gpu-0": nodes.outline(node)}
    cache._on_change(NODES_KEY, "LIST")
    generation, wakes = cache.facts_generation, len(woken)
    nodes.items = {"gpu-0": nodes.outline({**node, "spec": {"unschedulable": True}})}
    cache._on_change(NODES_KEY, "MODIFIED")
    assert (cache.facts_generation, len(woken)) == (generation + 1, wakes + 1)


def test_a_gpu_listing_the_target_refuses_does_not_keep_the_copy_from_answering() -> None:
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)
    for key, reflector in cache.reflectors.items():
        # Forbidden, say: never synced.
        reflector.synced = key.api.resource != "resourceslices"
    assert cache.synced()


@pytest.mark.parametrize("mode", list(ComponentsMode))
def test_the_gpu_path_is_watched_in_either_mode(mode: ComponentsMode) -> None:
    spec = SPEC.model_copy(update={"components": mode})
    keys = watch_keys(wanted(spec), SERVED)
    assert {NODES_KEY, WatchKey(ApiRef("resource.k8s.io", "v1", "resourceslices"))} <= keys


@pytest.mark.parametrize("kind", ["LOST", "RESUMED", "REFUSED", "FAILED", "GONE"])
@pytest.mark.parametrize("collection", ["release", "nodes", "gpu"])
def test_a_collection_lost_wakes_the_stack_whichever_collection_noticed(
    kind: str, collection: str
) -> None:
    # Only the first watch to lose the target tells of it: when that is one
    # whose objects are compared before waking, the loss must still wake the
    # reconcile, which then says the target is unreachable.
    woken: list[int] = []
    roles = ReleaseCollection(
        ApiRef("rbac.authorization.k8s.io", "v1", "clusterroles"), None, frozenset({"plugin"})
    )
    want = replace(_release_want()[0], release_collections=(roles,))
    cache = WatchCache(httpx2.AsyncClient(), want, lambda: woken.append(1))
    cache.learn(SERVED)
    keys = {
        "release": release_collection_key(roles),
        "nodes": NODES_KEY,
        "gpu": next(k for k in cache.reflectors if k.api.resource == "resourceslices"),
    }
    key = keys[collection]
    cache._on_change(key, "LIST")
    assert len(woken) == 1
    # The copy as it was: nothing in it changed.
    cache._on_change(key, "MODIFIED")
    assert len(woken) == 1
    cache._on_change(key, kind)
    assert len(woken) == 2


@pytest.mark.parametrize(
    ("kind", "reads_facts"), [("LOST", False), ("RESUMED", False), ("LIST", True)]
)
def test_a_node_watch_lost_and_resumed_does_not_read_the_facts_again(
    kind: str, reads_facts: bool
) -> None:
    # The copy outlives a lost watch and the watch resumes from it: what
    # changed meanwhile comes as events. A LIST may hide changes that none told.
    woken: list[int] = []
    cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: woken.append(1))
    cache._on_change(NODES_KEY, "LIST")
    generation, wakes = cache.facts_generation, len(woken)
    cache._on_change(NODES_KEY, kind)
    assert cache.facts_generation == generation + reads_facts
    assert len(woken) == wakes + 1


def _all_synced_but(cache: WatchCache, resource: str) -> Any:
    for reflector in cache.reflectors.values():
        reflector.synced = True
    key = next(k for k in cache.reflectors if k.api.resource == resource)
    reflector = cache.reflectors[key]
    reflector.synced = False
    return key, reflector


def test_a_collection_listed_again_is_waited_for_not_read_around(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polls_out_of_reach(monkeypatch)

    # A reconcile woken by one relist may find another collection mid-LIST:
    # it waits for that LIST rather than list all of them itself.
    async def run() -> None:
        cache = _cache()
        key, gateways = _all_synced_but(cache, "gateways")
        gateways.listing = True
        current = asyncio.create_task(cache.current(FOREVER))
        await asyncio.sleep(0)  # one turn of the loop: it finds the LIST under way, and waits
        assert not current.done()
        gateways.synced, gateways.listing = True, False
        cache._on_change(key, "LIST")
        # Woken by the LIST itself: with its poll and its bound out of reach,
        # nothing else could end the wait.
        async with asyncio.timeout(GUARD):
            assert await current

    asyncio.run(run())


def test_a_collection_in_its_backoff_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    polls_out_of_reach(monkeypatch)

    async def run() -> None:
        cache = _cache()
        _, gateways = _all_synced_but(cache, "gateways")
        gateways.listing = False  # failed: waiting out its backoff
        # Answered without a wait: one would last for ever (past the guard).
        async with asyncio.timeout(GUARD):
            assert not await cache.current(FOREVER)

    asyncio.run(run())


def test_a_relist_that_outlasts_the_wait_leaves_the_read_to_the_reconcile() -> None:
    async def run() -> None:
        cache = _cache()
        _, gateways = _all_synced_but(cache, "gateways")
        gateways.listing = True
        assert not await cache.current(0.3)
        assert await cache.listed(None, within=0.1) is None  # type: ignore[arg-type]

    asyncio.run(run())


def test_a_relist_that_outlasts_the_wait_asks_for_no_probe_of_a_target_that_answers() -> None:
    async def run() -> None:
        cache = _cache()
        link = cache.link = _Link(up=True)  # type: ignore[assignment]
        _, gateways = _all_synced_but(cache, "gateways")
        gateways.listing = True  # a slow LIST, the link up
        assert not await cache.current(0.1)
        assert link.asked == []

    asyncio.run(run())


class _Link:
    """A target's link as ``WatchCache.current`` reads it: up or not, and the probes asked for."""

    def __init__(self, *, up: bool) -> None:
        self.up = asyncio.Event()
        if up:
            self.up.set()
        self.asked: list[int] = []
        self.probed = asyncio.Event()

    def probe_now(self) -> None:
        self.asked.append(1)
        self.probed.set()


def _lost(cache: WatchCache, resource: str) -> tuple[WatchKey, Any, _Link]:
    """``cache`` with its target lost while ``resource``'s watch ran; its link."""
    key, reflector = _all_synced_but(cache, resource)
    reflector.listing = True  # its copy kept, worth a wait (kube.reflector)
    link = cache.link = _Link(up=False)  # type: ignore[assignment]
    return key, reflector, link


def test_copies_of_a_lost_target_wait_for_a_probe_asked_for_once_the_wait_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polls_out_of_reach(monkeypatch)

    # Issue 42: after a cut of 10 s the probe was in its backoff (its next
    # up to 15.75 s after the loss), so each reconcile woken by the cut read
    # its target whole.
    async def run() -> None:
        cache = _cache()
        key, gateways, link = _lost(cache, "gateways")
        current = asyncio.create_task(cache.current(0.01))
        async with asyncio.timeout(GUARD):
            await link.probed.wait()
        assert link.asked == [1] and not current.done()
        # The probe answered; the watch resumed from the copy.
        link.up.set()
        gateways.synced, gateways.listing = True, False
        cache._on_change(key, "RESUMED")
        # Woken by the resumed watch: the poll is out of reach.
        async with asyncio.timeout(GUARD):
            assert await current
        assert link.asked == [1]

    asyncio.run(run())


def test_copies_of_a_target_still_lost_after_the_probe_are_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watches, "PROBE_WAIT_SECONDS", 0.05)

    async def run() -> None:
        cache = _cache()
        _, _, link = _lost(cache, "gateways")
        async with asyncio.timeout(GUARD):
            assert not await cache.current(0.01)
        assert link.asked == [1]  # one probe, not one a poll

    asyncio.run(run())


def test_a_read_that_does_not_wait_asks_for_no_probe() -> None:
    async def run() -> None:
        cache = _cache()
        _, _, link = _lost(cache, "gateways")
        assert not await cache.current(0.0)
        assert link.asked == []

    asyncio.run(run())


def test_the_discovery_answer_listed_from_stays_the_shared_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kube.discovery.shared holds each answer weakly: a cache that kept
    # only its APIs let it go, and every target kept an answer of its own.
    apis = {"": {"secrets": ["v1"], "configmaps": ["v1"]}}

    async def discovered(_client: object) -> Served:
        return shared(Served({g: {r: list(v) for r, v in rs.items()} for g, rs in apis.items()}))

    monkeypatch.setattr("modelplane.observe.watches.served", discovered)

    async def run() -> None:
        one, two = _cache(), _cache()
        for cache in (one, two):
            for reflector in cache.reflectors.values():
                reflector.synced = True
            await cache.listed(None)  # type: ignore[arg-type]
            gc.collect()
        assert one._served is not None and one._served is two._served

    asyncio.run(run())
