"""``crd_change``: whether a CRD may be brought up to date, decided before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.plan.crds import (
    CHART_CRDS_LABEL,
    ChartCrdsRefused,
    CrdAction,
    chart_crds,
    crd_change,
    no_longer_shipped,
)
from modelplane.wire import DIGEST_ANNOTATION, stamp

NAME = "widgets.example.com"


def _crd(*versions: str, stored: tuple[str, ...] = (), digest: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": "example.com",
            "versions": [
                {"name": v, "served": True, "storage": i == 0} for i, v in enumerate(versions)
            ],
        },
    }
    if digest is not None:
        body["metadata"]["annotations"] = {DIGEST_ANNOTATION: digest}
    if stored:
        body["status"] = {"storedVersions": list(stored)}
    return body


DESIRED = stamp(_crd("v1"))
OURS = DESIRED["metadata"]["annotations"][DIGEST_ANNOTATION]


@pytest.mark.parametrize(
    ("live", "action", "removed", "still_stored"),
    [
        pytest.param(None, CrdAction.CREATE, (), (), id="absent: create"),
        pytest.param(
            _crd("v1", stored=("v1",), digest=OURS),
            CrdAction.UNCHANGED,
            (),
            (),
            id="our digest: no write",
        ),
        pytest.param(
            _crd("v1", stored=("v1",)),
            CrdAction.UPDATE,
            (),
            (),
            id="no digest (a chart's crds/ left it): update",
        ),
        pytest.param(
            _crd("v1", stored=("v1",), digest="other"),
            CrdAction.UPDATE,
            (),
            (),
            id="an older digest: update",
        ),
        pytest.param(
            _crd("v1", "v1beta1", stored=("v1",)),
            CrdAction.UPDATE,
            ("v1beta1",),
            (),
            id="drops a version nothing is stored at: update, named",
        ),
        pytest.param(
            _crd("v1", "v1beta1", stored=("v1beta1", "v1")),
            CrdAction.REFUSE,
            ("v1beta1",),
            ("v1beta1",),
            id="drops a stored version: refuse",
        ),
        pytest.param(
            _crd("v1beta1", stored=("v1beta1",)),
            CrdAction.REFUSE,
            ("v1beta1",),
            ("v1beta1",),
            id="replaces the only stored version: refuse",
        ),
    ],
)
def test_crd_change(
    live: dict[str, Any] | None,
    action: CrdAction,
    removed: tuple[str, ...],
    still_stored: tuple[str, ...],
) -> None:
    change = crd_change(DESIRED, live)
    assert (change.action, change.removed, change.still_stored) == (action, removed, still_stored)
    assert change.writes == (action in (CrdAction.CREATE, CrdAction.UPDATE))


def test_a_refusal_names_the_crd_the_version_and_what_to_do() -> None:
    change = crd_change(DESIRED, _crd("v1beta1", "v1", stored=("v1beta1",)))
    assert NAME in change.message
    assert "v1beta1" in change.message
    assert "migrate the stored objects" in change.message
    assert "status.storedVersions" in change.message


def test_an_edit_of_the_desired_crd_changes_its_digest() -> None:
    edited = stamp(_crd("v1", "v2"))
    assert crd_change(edited, _crd("v1", stored=("v1",), digest=OURS)).action is CrdAction.UPDATE


def test_a_charts_crds_are_stamped_and_marked_as_the_releases() -> None:
    (out,) = chart_crds([None, _crd("v1")], "mp-lws")
    assert out["metadata"]["labels"][CHART_CRDS_LABEL] == "mp-lws"
    assert DIGEST_ANNOTATION in out["metadata"]["annotations"]
    # Stamped as crd_change expects: applied once, the same chart costs no write.
    assert crd_change(out, out).action is CrdAction.UNCHANGED


@pytest.mark.parametrize(
    "doc",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        {
            "apiVersion": "apiextensions.k8s.io/v1beta1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": NAME},
        },
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"},
        "a string",
    ],
    ids=["another kind", "an old API", "no name", "not an object"],
)
def test_anything_but_a_crd_in_crds_refuses_the_whole_set(doc: Any) -> None:
    with pytest.raises(ChartCrdsRefused, match="nothing of it is applied"):
        chart_crds([_crd("v1"), doc], "mp-lws")


def test_a_crd_no_longer_shipped_is_named_to_be_kept() -> None:
    applied = chart_crds([_crd("v1")], "mp-lws")
    assert no_longer_shipped(applied, [NAME, "gone.example.com"]) == ["gone.example.com"]
    assert no_longer_shipped(applied, [NAME]) == []
