"""The watches keep of each object only what is read of it, and read the same from that."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import replace
from typing import Any

import httpx2
import pytest

from modelplane.api.spec import ServingStackSpec
from modelplane.kube.interned import interned
from modelplane.kube.reflector import WatchKey
from modelplane.observe.crd_outline import crd_outline, crd_plurals
from modelplane.observe.gpu_watch import kept_digest, kept_part, outline, part_of
from modelplane.observe.own_outline import own_outline
from modelplane.observe.parts import digest_of
from modelplane.observe.state import Listed, ReleaseWatch, to_observed, wanted
from modelplane.observe.watches import CRDS, NODES_KEY, WatchCache
from modelplane.pins import ComponentsMode
from modelplane.untrusted import pick
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, ApiRef

PROVIDED = ServingStackSpec.model_validate(
    {
        "components": "Provided",
        "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
    }
)
MANAGED = PROVIDED.model_copy(update={"components": ComponentsMode.MANAGED})

# What a real API server adds to every object, and a kubectl apply to many.
_MANAGED_FIELDS = [
    {
        "manager": "kubectl",
        "operation": "Update",
        "fieldsType": "FieldsV1",
        "fieldsV1": {f"f:field{i}": {} for i in range(200)},
    }
]


def _schema(depth: int) -> dict[str, Any]:
    if depth == 0:
        return {"type": "string", "description": "a leaf " * 20}
    return {
        "type": "object",
        "properties": {f"p{i}": _schema(depth - 1) for i in range(4)},
        "description": "a node " * 20,
    }


def _crd(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "envoyproxies.gateway.envoyproxy.io",
            "resourceVersion": "42",
            "uid": "u",
            "labels": labels,
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 50_000 + "}",
                **annotations,
            },
            "managedFields": _MANAGED_FIELDS,
        },
        "spec": {
            "group": "gateway.envoyproxy.io",
            "names": {"kind": "EnvoyProxy", "plural": "envoyproxies", "listKind": "EnvoyProxyList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _schema(5)},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Age", "type": "date"}],
                },
                {"name": "v1alpha0", "served": False, "storage": False},
            ],
        },
        "status": {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "message": "the initial names"},
            ],
            "acceptedNames": {"kind": "EnvoyProxy", "plural": "envoyproxies"},
            "storedVersions": ["v1alpha1"],
        },
    }


def _size(obj: Any) -> int:
    return len(json.dumps(obj))


def test_a_crd_outline_serves_the_same_kinds_and_drops_the_schema() -> None:
    crd = _crd({}, {})
    kept = crd_outline(crd)
    assert (
        crd_plurals([kept])
        == crd_plurals([crd])
        == {("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy"): "envoyproxies"}
    )
    assert "schema" not in json.dumps(kept)
    assert "managedFields" not in kept["metadata"]
    assert "annotations" not in kept["metadata"]
    assert _size(kept) * 100 < _size(crd), (_size(kept), _size(crd))


def test_a_crd_outline_keeps_what_observe_reads_of_the_products_own() -> None:
    crd = _crd({MANAGED_BY_LABEL: MANAGED_BY}, {DIGEST_ANNOTATION: "d1"})
    key = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    whole = to_observed(Listed(apis={}, items={key: [crd]}))
    outlined = to_observed(Listed(apis={}, items={key: [crd_outline(crd)]}))
    assert list(whole.applied.values()) == ["d1"]
    assert outlined.applied == whole.applied
    assert crd_outline(crd)["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}


def test_a_crd_outline_of_garbage_is_an_outline_not_an_error() -> None:
    for garbage in ({}, {"metadata": "x", "spec": []}, {"spec": {"versions": "v1"}}):
        assert crd_plurals([crd_outline(garbage)]) == {}


def test_the_outlines_of_one_crd_on_two_targets_are_one_object() -> None:
    # Each target's resourceVersion differs; the outline keeps none of it.
    one, other = _crd({"app": "a"}, {}), _crd({"app": "a"}, {})
    other["metadata"]["resourceVersion"] = "7"
    a, b = crd_outline(one), crd_outline(other)
    assert a is b
    assert "resourceVersion" not in a["metadata"]
    assert crd_plurals([a]) == crd_plurals([one])


def test_a_crd_changed_on_one_target_is_outlined_apart_from_the_others() -> None:
    changed = _crd({}, {})
    changed["spec"]["versions"][1]["served"] = True
    a, b = crd_outline(_crd({}, {})), crd_outline(changed)
    assert a["spec"] is not b["spec"]
    assert len(crd_plurals([b])) == 2 and len(crd_plurals([a])) == 1


@pytest.mark.parametrize(
    ("part", "same"),
    [
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}),
        ({"names": {"kind": "K"}}, {"names": {"kind": "K"}}),
    ],
)
def test_equal_parts_are_kept_once_in_any_key_order(
    part: dict[str, Any], same: dict[str, Any]
) -> None:
    assert interned(dict(part)) is interned(dict(same))


def test_an_interned_part_goes_when_no_copy_holds_it() -> None:
    kept = interned({"only": "here"})
    ref = weakref.ref(kept)
    del kept
    gc.collect()
    assert ref() is None


def test_a_part_that_is_no_json_is_not_interned() -> None:
    part = {"x": object()}
    assert interned(part) is part


def _node() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "gpu-0",
            "resourceVersion": "7",
            "labels": {"nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": _MANAGED_FIELDS,
        },
        "spec": {
            "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
            "unschedulable": True,
            "podCIDR": "10.0.0.0/24",
        },
        "status": {
            "allocatable": {"cpu": "128", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "now"}],
            "images": [
                {"names": [f"registry.example/image-{i}"], "sizeBytes": i} for i in range(50)
            ],
        },
    }


_NFD_GPU = {
    "key": "feature.node.kubernetes.io/pci-0302_10de.present",
    "operator": "In",
    "values": ["true"],
}


def _daemon_set() -> dict[str, Any]:
    return {
        "metadata": {"name": "plugin", "namespace": "dra", "managedFields": _MANAGED_FIELDS},
        "spec": {
            "template": {
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": [_NFD_GPU]}]
                            },
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 1, "preference": {"matchExpressions": [_NFD_GPU]}}
                            ],
                        },
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
                    },
                    "containers": [
                        {"name": "plugin", "image": "nvcr.io/plugin:1", "args": ["-v"] * 50},
                        "not a container",
                    ],
                    "volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(20)],
                }
            }
        },
        "status": {"desiredNumberScheduled": 2, "numberAvailable": 1, "observedGeneration": 3},
    }


def _slice() -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-0-slice", "managedFields": _MANAGED_FIELDS},
        "spec": {"driver": "gpu.nvidia.com", "devices": [{"name": f"gpu-{i}"} for i in range(8)]},
    }


def _judged(resource: str, obj: dict[str, Any]) -> int:
    """What the cache judges a watched GPU object by, from what its copy keeps of it."""
    return digest_of(kept_part, [outline(resource, obj)], kept_digest)


def test_a_gpu_outline_is_judged_as_the_object_is_and_holds_less() -> None:
    for resource, obj in (
        ("nodes", _node()),
        ("daemonsets", _daemon_set()),
        ("resourceslices", _slice()),
    ):
        kept = outline(resource, obj)
        assert _judged(resource, obj) == digest_of(part_of(resource), [obj]), resource
        identity = pick(obj["metadata"], ("name", "namespace", "resourceVersion"))
        assert kept["metadata"] == identity, resource
        assert _size(kept) * 2 < _size(obj), (resource, _size(kept), _size(obj))


def test_a_gpu_outline_tells_the_changes_the_checks_read() -> None:
    node = _node()
    uncordoned = {**node, "spec": {**node["spec"], "unschedulable": False}}
    assert _judged("nodes", node) != _judged("nodes", uncordoned)
    beat = {**node, "status": {**node["status"], "conditions": []}}
    assert _judged("nodes", node) == _judged("nodes", beat)
    ds = _daemon_set()
    available = {**ds, "status": {**ds["status"], "numberAvailable": 2}}
    assert _judged("daemonsets", ds) != _judged("daemonsets", available)
    # Where the kubelet plugin may run (catalog.placement) is read too.
    pod = ds["spec"]["template"]["spec"]
    for changed in (
        {**pod, "nodeSelector": {}},
        {**pod, "affinity": {"nodeAffinity": {}}},
        {**pod, "tolerations": []},
    ):
        moved = {**ds, "spec": {"template": {"spec": changed}}}
        assert _judged("daemonsets", ds) != _judged("daemonsets", moved), changed
    # Not the preferred affinity, which places nothing.
    preferred = {
        **pod["affinity"]["nodeAffinity"],
        "preferredDuringSchedulingIgnoredDuringExecution": [],
    }
    unpreferred = {**pod, "affinity": {**pod["affinity"], "nodeAffinity": preferred}}
    same = {**ds, "spec": {"template": {"spec": unpreferred}}}
    assert _judged("daemonsets", ds) == _judged("daemonsets", same)


def _cache(spec: ServingStackSpec, *releases: ReleaseWatch) -> WatchCache:
    want = replace(wanted(spec), release_objects=releases)
    return WatchCache(httpx2.AsyncClient(), want, lambda: None)


def test_the_crd_gpu_and_own_watches_keep_outlines() -> None:
    cache = _cache(PROVIDED)
    node = _node()
    assert cache.reflectors[WatchKey(CRDS)].outline(_crd({}, {})) == crd_outline(_crd({}, {}))
    assert cache.reflectors[NODES_KEY].outline(node) == outline("nodes", node)
    cache.learn({("gateway.networking.k8s.io/v1", "Gateway"): "gateways"})
    kept = [r for k, r in cache.reflectors.items() if k.api.resource == "gateways"]
    assert kept and all(r.outline(node) == own_outline(node) for r in kept)


def test_a_provided_target_keeps_no_collection_whole() -> None:
    cache = _cache(PROVIDED)
    # Every kind the product applies served, as discovery would say.
    cache.learn({(v, k): k.lower() + "s" for v, k, _ in cache.want.kinds})
    node = _node()
    assert len(cache.reflectors) > len(cache.want.kinds)
    assert [k for k, r in cache.reflectors.items() if r.outline(node) is node] == []


def test_the_nodes_stay_whole_where_a_release_daemonset_is_placed_on_them() -> None:
    plugin = ReleaseWatch(ApiRef("apps", "v1", "daemonsets"), "dra", "plugin", "app=plugin")
    cache = _cache(MANAGED, plugin)
    node = _node()
    assert cache.reflectors[NODES_KEY].outline(node) is node


def test_a_provided_stack_reads_no_release_secrets_a_managed_one_does() -> None:
    assert wanted(PROVIDED).release_namespaces == ()
    assert not any(k.api.resource == "secrets" and k.labels for k in _cache(PROVIDED).reflectors)
    assert wanted(MANAGED).release_namespaces
    assert any(k.api.resource == "secrets" and k.labels for k in _cache(MANAGED).reflectors)
