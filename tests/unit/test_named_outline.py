"""observe.named_outline: the watches keep of a kind a requirement names what is read of it.

Kept whole, every target's DeviceClasses held their selectors and
managedFields, read by nothing: ``to_observed`` reads their names, the
requirement (``plan.findings.evaluate``) tests one, the copy keys them by
namespace and name and ``observe.writes`` compares the resourceVersion.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx2
import pytest
from tests.shared_fixtures import upstream_dir, yaml_docs

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import components_for
from modelplane.catalog.types import ObjectExists
from modelplane.kube.collection_copy import object_name_key
from modelplane.kube.reflector import WatchKey
from modelplane.observe.named_outline import named_outline
from modelplane.observe.state import Listed, to_observed, wanted
from modelplane.observe.watches import WatchCache
from modelplane.plan.findings import evaluate
from modelplane.wire import ApiRef

DEVICE_CLASSES = ApiRef("resource.k8s.io", "v1", "deviceclasses")
PROVIDED = ServingStackSpec.model_validate(
    {
        "components": "Provided",
        "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
    }
)
SERVED = {"resource.k8s.io": {"deviceclasses": ["v1"]}}


def _served(doc: dict[str, Any], rv: str = "7") -> dict[str, Any]:
    """``doc`` as an API server answers it: with the metadata the server adds."""
    obj = copy.deepcopy(doc)
    obj.setdefault("metadata", {}).update(
        {
            "resourceVersion": rv,
            "uid": "0b7c-uid",
            "generation": 1,
            "creationTimestamp": "2026-12-06T09:00:00Z",
            "managedFields": [
                {
                    "manager": "helm",
                    "operation": "Update",
                    "apiVersion": "resource.k8s.io/v1",
                    "time": "2026-12-06T09:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:selectors": {}, "f:extendedResourceName": {}}},
                }
            ],
        }
    )
    return obj


# Small, in the repository: what runs when ../shared is not there.
_SMALL = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com", "labels": {"app": "dra"}},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def _device_classes() -> list[Any]:
    """The real DRA driver's DeviceClasses (../shared), or one param that skips saying why."""
    folder = upstream_dir() / "nvidia-dra-driver-gpu"
    paths = sorted(folder.glob("deviceclass-*.yaml"))
    if not paths:
        reason = f"no upstream DeviceClasses in {folder} (../shared/fixtures)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="upstream-absent")]
    return [pytest.param(doc, id=path.stem) for path in paths for doc in yaml_docs(path) if doc]


OBJECTS = [pytest.param(_SMALL, id="in-repo"), *_device_classes()]


def _requirements() -> list[ObjectExists]:
    found = [
        r
        for c in components_for(PROVIDED)
        for r in c.requirements
        if isinstance(r, ObjectExists) and r.api == DEVICE_CLASSES
    ]
    assert found, "the Provided stack names a DeviceClass"
    return found


@pytest.mark.parametrize("doc", OBJECTS)
def test_an_outline_keeps_what_every_reader_reads(doc: dict[str, Any]) -> None:
    whole = _served(doc)
    kept = named_outline(whole)
    # The copy's key, and the resourceVersion a write is compared by.
    assert object_name_key(kept) == object_name_key(whole)
    assert kept["metadata"]["resourceVersion"] == whole["metadata"]["resourceVersion"]
    # What observe reads, and the requirement's verdict from it.
    seen = to_observed(Listed(apis=SERVED, objects={DEVICE_CLASSES.key: [whole]}))
    outlined = to_observed(Listed(apis=SERVED, objects={DEVICE_CLASSES.key: [kept]}))
    assert outlined == seen
    for requirement in _requirements():
        assert evaluate("c", requirement, outlined) == evaluate("c", requirement, seen)
    assert "spec" not in kept and "managedFields" not in kept["metadata"]
    assert len(json.dumps(kept)) * 3 < len(json.dumps(whole))


@pytest.mark.parametrize("doc", OBJECTS)
def test_a_requirement_unmet_by_the_whole_is_unmet_by_the_outline(doc: dict[str, Any]) -> None:
    renamed = _served(doc)
    renamed["metadata"]["name"] = "someone-elses.example.com"
    seen = to_observed(Listed(apis=SERVED, objects={DEVICE_CLASSES.key: [renamed]}))
    outlined = to_observed(
        Listed(apis=SERVED, objects={DEVICE_CLASSES.key: [named_outline(renamed)]})
    )
    for requirement in _requirements():
        verdict = evaluate("c", requirement, outlined)
        assert verdict == evaluate("c", requirement, seen)
        assert verdict.status == "unmet"


def test_the_name_every_target_shares_is_kept_once() -> None:
    # Two targets' answers: equal names, parsed apart.
    one, other = _served(_SMALL, "1"), _served(_SMALL, "2")
    other["metadata"]["name"] = "".join(["gpu.", "nvidia.com"])
    assert one["metadata"]["name"] is not other["metadata"]["name"]
    a, b = named_outline(one), named_outline(other)
    assert a["metadata"]["name"] is b["metadata"]["name"]


@pytest.mark.parametrize(
    "garbage",
    [{}, {"metadata": "x"}, {"metadata": {"name": 3}}, {"spec": []}],
)
def test_an_outline_of_garbage_is_an_outline_not_an_error(garbage: dict[str, Any]) -> None:
    assert object_name_key(named_outline(garbage)) == object_name_key(
        garbage if isinstance(garbage.get("metadata"), dict) else {}
    )


def test_a_provided_target_watches_its_device_classes_by_name_only() -> None:
    cache = WatchCache(httpx2.AsyncClient(), wanted(PROVIDED), lambda: None)
    reflector = cache.reflectors[WatchKey(DEVICE_CLASSES)]
    assert reflector.outline is named_outline
