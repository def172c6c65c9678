"""observe.gpu_watch.outline: a GPU collection's copy keeps its objects' part digests alone.

The Nodes, ResourceSlices and the kubelet plugin's DaemonSets are watched
only to tell of a change of what the GPU checks read (``part_of``); their
copies once kept those parts (a GPU node's NFD labels, a slice's devices)
and are read by nothing but the comparison. Over the real objects (the
H200 profile's node and slice, the DRA driver chart's rendered DaemonSet)
and small in-repo ones, each change is judged from the outline as from the
whole object.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs
from tests.testenv.nodes import HardwareMissingError, h200, node, resource_slice

from modelplane.kube.collection_copy import object_name_key
from modelplane.observe.gpu_watch import (
    PART,
    fingerprint,
    kept_digest,
    kept_part,
    outline,
    part_of,
)
from modelplane.observe.parts import Parts, digest_of

Obj = dict[str, Any]


def _served(obj: Obj) -> Obj:
    """``obj`` as an API server answers it: with the metadata it adds."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(
        {
            "resourceVersion": "41",
            "uid": "u-1",
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}
            ],
        }
    )
    return obj


def _hardware() -> Any:
    try:
        return h200()
    except HardwareMissingError as err:
        pytest.skip(str(err))


def _real_node() -> Obj:
    obj = _served(node("gpu-0", gpu=_hardware()))
    obj["status"] = {
        "allocatable": {"cpu": "128", "memory": "2Ti", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t0"}],
        "images": [{"names": [f"registry.example/image-{i}"], "sizeBytes": i} for i in range(30)],
    }
    return obj


def _real_slice() -> Obj:
    return _served(resource_slice("gpu-0", _hardware()))


def _real_daemon_set() -> Obj:
    docs = yaml_docs(real_chart("dra-driver-nvidia-gpu", "0.4.1") / "rendered-standard.yaml")
    [obj] = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DaemonSet"]
    obj = _served(obj)
    obj["status"] = {"desiredNumberScheduled": 2, "numberAvailable": 2, "observedGeneration": 1}
    return obj


def _small_node() -> Obj:
    return {
        "metadata": {"name": "n", "labels": {"feature.node.kubernetes.io/x": "true"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8"}, "conditions": [{"lastHeartbeatTime": "t0"}]},
    }


def _small_slice() -> Obj:
    return {"metadata": {"name": "s"}, "spec": {"driver": "d", "devices": [{"name": "gpu-0"}]}}


def _small_daemon_set() -> Obj:
    return {
        "metadata": {"name": "plugin", "namespace": "dra"},
        "spec": {"template": {"spec": {"containers": [{"name": "p", "image": "i:1"}]}}},
        "status": {"numberAvailable": 1, "observedGeneration": 1},
    }


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    """A change that sets the field at ``path`` (dots; a number indexes a list)."""

    def change(obj: Obj) -> None:
        *parents, last = path.split(".")
        at: Any = obj
        for step in parents:
            at = at[int(step)] if isinstance(at, list) else at.setdefault(step, {})
        at[last] = value

    return change


_BUILDERS: dict[str, Callable[[], Obj]] = {
    "real node": _real_node,
    "real slice": _real_slice,
    "real daemonset": _real_daemon_set,
    "small node": _small_node,
    "small slice": _small_slice,
    "small daemonset": _small_daemon_set,
}
_RESOURCE = {"node": "nodes", "slice": "resourceslices", "daemonset": "daemonsets"}

# (object, a change, whether the GPU checks read what it changes)
CHANGES = [
    (built, *change)
    for kind in ("node", "slice", "daemonset")
    for built in (f"real {kind}", f"small {kind}")
    for change in {
        "node": [
            (_set("metadata.resourceVersion", "42"), False),
            (_set("status.conditions", [{"lastHeartbeatTime": "t1"}]), False),
            (_set("status.allocatable.cpu", "64"), False),
            (_set("metadata.labels.gpu-present", "true"), True),
            (_set("spec.taints", []), True),
            (_set("spec.unschedulable", True), True),
            (_set("status.allocatable.acme/gpu", "8"), True),
        ],
        "slice": [
            (_set("metadata.resourceVersion", "42"), False),
            (_set("metadata.generation", 2), False),
            (_set("spec.devices", []), True),
            (_set("spec.driver", "other.example.com"), True),
        ],
        "daemonset": [
            (_set("metadata.resourceVersion", "42"), False),
            (_set("status.observedGeneration", 9), False),
            (_set("status.numberAvailable", 0), True),
            (_set("spec.template.spec.nodeSelector", {"x": "y"}), True),
            (_set("spec.template.spec.containers", []), True),
        ],
    }[kind]
]


@pytest.mark.parametrize(("built", "change", "read"), CHANGES)
def test_a_change_is_judged_from_the_outline_as_from_the_object(
    built: str, change: Callable[[Obj], None], read: bool
) -> None:
    resource = _RESOURCE[built.split()[1]]
    before = _BUILDERS[built]()
    after = copy.deepcopy(before)
    change(after)
    # The reference: the whole collection compared before and after.
    whole = fingerprint(resource, [before]) != fingerprint(resource, [after])
    assert whole is read
    kept = Parts(kept_part, digest=kept_digest)
    kept.update("k", outline(resource, before))
    assert kept.update("k", outline(resource, after)) is whole


@pytest.mark.parametrize("built", sorted(_BUILDERS))
def test_an_outline_keeps_the_key_and_the_digest_of_what_is_read(built: str) -> None:
    resource = _RESOURCE[built.split()[1]]
    obj = _BUILDERS[built]()
    kept = outline(resource, obj)
    assert object_name_key(kept) == object_name_key(obj)
    assert digest_of(kept_part, [kept], kept_digest) == digest_of(part_of(resource), [obj])
    assert set(kept) == {"metadata", PART}
    assert set(kept["metadata"]) <= {"name", "namespace", "resourceVersion"}


def test_the_driver_namespace_every_target_shares_is_kept_once() -> None:
    one, other = _small_daemon_set(), _small_daemon_set()
    other["metadata"]["namespace"] = "".join(["d", "ra"])
    assert one["metadata"]["namespace"] is not other["metadata"]["namespace"]
    a, b = outline("daemonsets", one), outline("daemonsets", other)
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]


@pytest.mark.parametrize("garbage", [{}, {"metadata": "x"}, {"metadata": {"name": 3}}])
def test_an_outline_of_garbage_is_judged_not_an_error(garbage: Obj) -> None:
    for resource in _RESOURCE.values():
        kept = outline(resource, garbage)
        assert digest_of(kept_part, [kept], kept_digest) == digest_of(part_of(resource), [garbage])
