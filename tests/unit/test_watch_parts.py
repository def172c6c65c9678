"""A watched collection's change is judged by the one object an event is of (issue 42).

Kept object by object, the judgement must be the one a comparison of the
whole collection before and after gives (``gpu_watch.fingerprint``), over
any sequence of events; and an event must read no other object.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import partial
from typing import Any

import httpx2
import pytest

from modelplane.api.spec import ServingStackSpec
from modelplane.kube.reflector import WatchKey
from modelplane.observe.gpu_watch import fingerprint, kept_digest, kept_part, outline, part_of
from modelplane.observe.parts import Parts, canonical, digest_of
from modelplane.observe.state import ReleaseCollection, wanted
from modelplane.observe.watches import (
    CRDS,
    NODES_KEY,
    WatchCache,
    followed,
    release_collection_key,
)
from modelplane.wire import ApiRef

SPEC = ServingStackSpec.model_validate(
    {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}]}
)
NFD = "feature.node.kubernetes.io"


class Untouchable(dict[str, Any]):
    """An object no event of another object may read."""

    def get(self, *_: Any) -> Any:
        raise AssertionError("an event read an object it is not of")

    def __getitem__(self, _: str) -> Any:
        raise AssertionError("an event read an object it is not of")


def _node(name: str, rv: int, *, labels: int = 0, taint: bool = False, beat: int = 0) -> Any:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(rv),
            "labels": {f"{NFD}/cpu-cpuid.F{i}": "true" for i in range(labels)},
        },
        "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]} if taint else {},
        "status": {
            "allocatable": {"cpu": "8", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "lastHeartbeatTime": f"2025-01-01T00:00:{beat:02}Z"}],
        },
    }


def _daemon_set(name: str, rv: int, *, labels: int = 0, taint: bool = False, beat: int = 0) -> Any:
    return {
        "metadata": {"name": name, "namespace": "dra", "resourceVersion": str(rv)},
        "spec": {"template": {"spec": {"nodeSelector": {"n": str(labels)} if taint else None}}},
        "status": {"numberAvailable": labels, "observedGeneration": beat},
    }


def _slice(name: str, rv: int, *, labels: int = 0, taint: bool = False, beat: int = 0) -> Any:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "generation": beat},
        "spec": {"devices": [{"name": f"gpu-{labels}"}], "driver": "d" if taint else "e"},
    }


BUILDERS = {"nodes": _node, "daemonsets": _daemon_set, "resourceslices": _slice}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("resource", sorted(BUILDERS))
def test_each_event_is_judged_as_the_whole_collection_would_be(seed: int, resource: str) -> None:
    # Random adds, changes of what is read, heartbeats and deletes (of
    # objects there and not there) over a few names, so that each happens.
    rand = random.Random(seed)
    build = BUILDERS[resource]
    items: dict[str, dict[str, Any]] = {}
    parts = Parts(part_of(resource))
    # As the cache judges them: from the digests the watch's copy keeps.
    kept = Parts(kept_part, digest=kept_digest)
    outcomes: set[bool] = set()
    for rv in range(200):
        key = rand.choice("abcde")
        before = fingerprint(resource, items.values())
        if rand.random() < 0.25:
            items.pop(key, None)
        else:
            labels, taint, beat = rand.randrange(3), rand.random() < 0.3, rand.randrange(60)
            items[key] = build(key, rv, labels=labels, taint=taint, beat=beat)
        changed = parts.update(key, items.get(key))
        assert changed == (fingerprint(resource, items.values()) != before)
        obj = items.get(key)
        assert kept.update(key, None if obj is None else outline(resource, obj)) is changed
        assert kept.digest == parts.digest
        outcomes.add(changed)
        assert parts.digest == digest_of(part_of(resource), items.values())
    assert outcomes == {True, False}
    assert parts.rebuild(items) is False
    assert parts.rebuild({}) is bool(items)


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ({"names": ["a"]}, {"names": ["a"], "beat": 1}, False),  # a heartbeat
        ({"names": ["a"]}, {"names": ["a", "b"]}, True),  # one added
        ({"names": ["a", "b"]}, {"names": ["a"]}, True),  # one gone
        ({"names": ["a"]}, {"names": ["a"], "labels": 1}, True),  # a label
        ({"names": ["a"]}, {"names": ["a"], "taint": True}, True),  # a taint
    ],
)
def test_a_rebuild_says_whether_the_collection_changed(
    before: dict[str, Any], after: dict[str, Any], changed: bool
) -> None:
    parts = Parts(part_of("nodes"))

    def nodes(names: list[str], **kw: Any) -> dict[str, dict[str, Any]]:
        return {n: _node(n, 1, **kw) for n in names}

    parts.rebuild(nodes(**before))
    assert parts.rebuild(nodes(**after)) is changed


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"b": 1, "a": {"y": 2, "x": 1}}, {"a": {"x": 1, "y": 2}, "b": 1}, True),  # key order
        ({"a": 1}, {"a": 1.0}, False),  # as repr tells them apart
        ({"a": 1}, {"a": True}, False),
        ({"a": "\ud800"}, {"a": "\ud800"}, True),  # what msgspec will not encode
        ({"a": "\ud800"}, {"a": "\ud801"}, False),
        ({"a": "\ud800"}, "{'a': '\\ud800'}", False),  # the repr is no JSON's
    ],
)
def test_a_part_is_compared_by_its_canonical_text(a: Any, b: Any, equal: bool) -> None:
    assert (canonical(a) == canonical(b)) is equal


def _cache(woken: list[str], want: Any = None) -> WatchCache:
    return WatchCache(httpx2.AsyncClient(), want or wanted(SPEC), lambda: woken.append("woken"))


def test_a_heartbeat_reads_its_node_alone_and_wakes_nothing() -> None:
    woken: list[str] = []
    cache = _cache(woken)
    nodes = cache.reflectors[NODES_KEY]
    # What the watch keeps of each Node: its outline.
    kept = nodes.outline
    nodes.items = {"/gpu-0": kept(_node("gpu-0", 1, labels=80)), "/gpu-1": kept(_node("gpu-1", 1))}
    cache._on_change(NODES_KEY, "LIST", None)
    generation, wakes = cache.facts_generation, len(woken)
    # Every other Node is out of reach: reading one fails the test.
    nodes.items["/gpu-1"] = Untouchable()
    nodes.items["/gpu-0"] = kept(_node("gpu-0", 2, labels=80, beat=10))
    cache._on_change(NODES_KEY, "MODIFIED", "/gpu-0")
    assert (cache.facts_generation, len(woken)) == (generation, wakes)
    nodes.items["/gpu-0"] = kept(_node("gpu-0", 3, labels=80, beat=20, taint=True))
    cache._on_change(NODES_KEY, "MODIFIED", "/gpu-0")
    assert (cache.facts_generation, len(woken)) == (generation + 1, wakes + 1)
    del nodes.items["/gpu-0"]
    cache._on_change(NODES_KEY, "DELETED", "/gpu-0")
    assert (cache.facts_generation, len(woken)) == (generation + 2, wakes + 2)


def test_an_event_of_an_object_not_followed_in_a_release_collection_wakes_nothing() -> None:
    roles = ReleaseCollection(
        ApiRef("rbac.authorization.k8s.io", "v1", "clusterroles"), None, frozenset({"ours"})
    )
    woken: list[str] = []
    cache = _cache(woken, replace(wanted(SPEC), release_collections=(roles,)))
    key = release_collection_key(roles)
    cache.learn({("rbac.authorization.k8s.io/v1", "ClusterRole"): "clusterroles"})
    reflector = cache.reflectors[key]
    ours = {"metadata": {"name": "ours", "resourceVersion": "1"}}
    reflector.items = {"/ours": ours, "/theirs": {"metadata": {"name": "theirs"}}}
    cache._on_change(key, "LIST", None)
    wakes = len(woken)
    reflector.items["/ours"] = Untouchable()
    reflector.items["/theirs"] = {"metadata": {"name": "theirs", "resourceVersion": "2"}}
    cache._on_change(key, "MODIFIED", "/theirs")
    assert len(woken) == wakes
    reflector.items["/ours"] = {"metadata": {"name": "ours", "resourceVersion": "3"}}
    reflector.items["/theirs"] = Untouchable()
    cache._on_change(key, "MODIFIED", "/ours")
    assert len(woken) == wakes + 1


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"metadata": {"name": "ours", "resourceVersion": "7"}}, ("ours", "7")),
        ({"metadata": {"name": "ours"}}, ("ours", "")),
        ({"metadata": {"name": "theirs", "resourceVersion": "7"}}, None),
        ({"metadata": "not an object"}, None),
        ({"metadata": {"name": ["ours"]}}, None),  # no name, and no hashable one
    ],
)
def test_a_release_collection_follows_its_names_by_resource_version(
    item: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert partial(followed, frozenset({"ours"}))(item) == expected


def _crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "versions": [{"name": "v1", "served": True}],
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


def test_a_crd_event_learns_the_plurals_of_that_crd_alone() -> None:
    cache = _cache([])
    crds = cache.reflectors[WatchKey(CRDS)]
    crds.items = {"/other.example.com": Untouchable()}
    crds.items["/gateways.gateway.networking.k8s.io"] = _crd(
        "gateway.networking.k8s.io", "Gateway", "gateways"
    )
    cache._on_change(WatchKey(CRDS), "ADDED", "/gateways.gateway.networking.k8s.io")
    assert cache.plurals[("gateway.networking.k8s.io/v1", "Gateway")] == "gateways"
    del crds.items["/gateways.gateway.networking.k8s.io"]
    generation = cache.api_generation
    cache._on_change(WatchKey(CRDS), "DELETED", "/gateways.gateway.networking.k8s.io")
    assert cache.api_generation == generation + 1
