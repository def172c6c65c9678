"""The reads a chart's crds/ apply decides on, shared by the reconcile and ``modelplane diff``."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from modelplane.actions.chart_crds import (
    CrdUpgradeRefused,
    applies_chart_crds,
    apply_chart_crds,
    read_chart_crd_state,
)
from modelplane.actions.helm import Helm
from modelplane.plan.model import PlannedRelease, ReleaseAction, ReleaseState

OURS = "leaderworkersets.leaderworkerset.x-k8s.io"
THEIRS = "applications.argoproj.io"


def _release(component: str = "leader-worker-set") -> PlannedRelease:
    return PlannedRelease(
        component=component,
        name="mp-lws",
        chart="lws",
        repository="https://example.invalid/charts",
        version="1.0.0",
        namespace="lws-system",
        values={},
        wait=True,
        depends_on=[],
        digest="d",
        state=ReleaseState.ABSENT,
        action=ReleaseAction.INSTALL,
    )


def _crd(name: str) -> dict[str, Any]:
    plural, _, group = name.partition(".")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "names": {"plural": plural},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }


class _Helm:
    def __init__(self, *names: str) -> None:
        self.text = yaml.safe_dump_all([_crd(n) for n in names])

    async def show_crds(self, release: PlannedRelease, kubeconfig: str) -> str:
        return self.text


class _Found:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def to_dict(self) -> dict[str, Any]:
        return self.body


class _Client:
    """A cluster that holds ``held`` and answers 404 for any other CRD; it notes each GET."""

    def __init__(self, *held: str) -> None:
        self.held = set(held)
        self.asked: list[str] = []

    async def get(self, _kind: object, name: str) -> _Found:
        self.asked.append(name)
        if name not in self.held:
            raise ApiError(status={"code": 404, "message": "not found"})
        return _Found(_crd(name))


def _read(helm: _Helm, client: _Client) -> Any:
    return asyncio.run(
        read_chart_crd_state(cast(Helm, helm), cast(AsyncClient, client), _release(), "")
    )


@pytest.mark.parametrize(
    ("component", "applies"),
    [
        ("leader-worker-set", True),  # Helm leaves its crds/ at their first version
        ("cert-manager", False),  # its CRDs are templates Helm upgrades
        ("gaie-crds", False),  # fetched manifests, no chart
    ],
)
def test_which_charts_crds_the_product_applies(component: str, applies: bool) -> None:
    assert applies_chart_crds(_release(component)) is applies


def test_the_reads_hold_the_cluster_copy_of_each_crd_that_exists() -> None:
    client = _Client(OURS)
    reads = _read(_Helm(OURS), client)
    assert [c["metadata"]["name"] for c in reads.desired] == [OURS]
    assert set(reads.live) == {OURS} and reads.foreign == []
    assert client.asked == [OURS]


def test_a_crd_of_another_group_is_refused_and_its_name_never_sent() -> None:
    client = _Client(OURS, THEIRS)
    reads = _read(_Helm(OURS, THEIRS), client)
    assert [c.name for c in reads.foreign] == [THEIRS]
    assert client.asked == [OURS]
    with pytest.raises(CrdUpgradeRefused, match=THEIRS):
        asyncio.run(
            apply_chart_crds(
                cast(Helm, _Helm(OURS, THEIRS)), cast(AsyncClient, client), _release(), ""
            )
        )
    assert THEIRS not in client.asked
