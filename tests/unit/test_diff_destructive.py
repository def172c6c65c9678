"""``plan.diff`` names destructive changes before they happen: a CRD version removed, a field
the API server will not change in place, and a release uninstalled to be installed again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from modelplane.plan import plan
from modelplane.plan.crds import CHART_CRDS_LABEL, chart_crds
from modelplane.plan.diff import DeployedRelease, Reads, diff, immutable_changes
from modelplane.plan.model import Plan
from modelplane.plan.observed import Observed
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

from .conftest import StackFactory, installed

PROMETHEUS = "mp-kube-prometheus-stack"
SERVER = "https://target.example:6443"


def _deployment(selector: dict[str, str], name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": selector}, **spec},
    }


def _manifest(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(list(docs))


@pytest.mark.parametrize(
    ("before", "after", "named"),
    [
        pytest.param(
            _manifest(_deployment({"app": "a"})),
            _manifest(_deployment({"app": "a"}, replicas=3)),
            [],
            id="replicas change in place",
        ),
        pytest.param(
            _manifest(_deployment({"app": "a"})),
            _manifest(_deployment({"app": "b"})),
            ["Deployment ns/web: spec.selector"],
            id="a Deployment's selector",
        ),
        pytest.param(
            _manifest(
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": {"name": "db"},
                    "spec": {"serviceName": "db", "selector": {}},
                }
            ),
            _manifest(
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": {"name": "db"},
                    "spec": {"serviceName": "db-headless", "selector": {}},
                }
            ),
            ["StatefulSet ns/db: spec.serviceName"],
            id="a StatefulSet's serviceName",
        ),
        pytest.param(
            _manifest(_deployment({"app": "a"}, name="old")),
            _manifest(_deployment({"app": "b"}, name="new")),
            [],
            id="a renamed object is a new one",
        ),
        pytest.param("{not yaml", _manifest(_deployment({"app": "b"})), [], id="unreadable"),
    ],
)
def test_immutable_changes(before: str, after: str, named: list[str]) -> None:
    found = immutable_changes(before, after, "ns")
    assert [f.split(" would")[0] for f in found] == named
    assert all("helm upgrade would fail half-way" in f for f in found)


def _crd(
    *versions: str, stored: tuple[str, ...] = (), labels: dict[str, str] | None = None
) -> dict[str, Any]:
    # Live, as the product applied it for the release, unless ``labels`` says otherwise.
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "probes.monitoring.coreos.com",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, CHART_CRDS_LABEL: PROMETHEUS}
            if labels is None
            else labels,
        },
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"plural": "probes"},
            "versions": [{"name": v} for v in versions],
        },
    }
    if stored:
        body["status"] = {"storedVersions": list(stored)}
    return body


def _upgrade(make_stack: StackFactory, serve: Callable[..., Observed]) -> tuple[Plan, Plan]:
    before = plan(make_stack(), serve())
    return before, plan(make_stack(versions={"prometheus": "84.5.0"}), installed(before, serve()))


def _deployed(p: Plan, manifest: str = "") -> DeployedRelease:
    release = next(r for r in p.releases if r.name == PROMETHEUS)
    return DeployedRelease(
        name=PROMETHEUS,
        namespace=release.namespace,
        revision=1,
        chart_version=release.version,
        values=release.values,
        manifest=manifest,
    )


@pytest.mark.parametrize(
    ("live", "destructive", "written"),
    [
        pytest.param(
            _crd("v1", "v1alpha1", stored=("v1",)),
            ["no longer serves v1alpha1"],
            ["probes.monitoring.coreos.com (update)"],
            id="a version nothing stores",
        ),
        pytest.param(
            _crd("v1", "v1alpha1", stored=("v1alpha1", "v1")),
            ["still stores objects at v1alpha1"],
            [],
            id="a stored version",
        ),
        pytest.param(
            _crd("v1", stored=("v1",)),
            [],
            ["probes.monitoring.coreos.com (update)"],
            id="no version removed",
        ),
        pytest.param(
            _crd("v1", stored=("v1",), labels={}),
            ["exists and is not release mp-kube-prometheus-stack's"],
            [],
            id="another owner's CRD",
        ),
    ],
)
def test_a_crd_version_removed_by_an_upgrade_is_named(
    make_stack: StackFactory,
    serve_everything: Callable[..., Observed],
    live: dict[str, Any],
    destructive: list[str],
    written: list[str],
) -> None:
    before, p = _upgrade(make_stack, serve_everything)
    reads = Reads(
        deployed={PROMETHEUS: _deployed(before)},
        chart_crds={PROMETHEUS: chart_crds([_crd("v1")], PROMETHEUS)},
        live_crds={"probes.monitoring.coreos.com": live},
    )
    d = diff(p, reads, SERVER)
    [change] = d.releases
    assert change.crds == written
    assert len(change.destructive) == len(destructive)
    for found, want in zip(change.destructive, destructive, strict=True):
        assert want in found
    assert d.destructive is bool(destructive)


def test_an_upgrade_that_changes_a_selector_is_destructive(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    before, p = _upgrade(make_stack, serve_everything)
    reads = Reads(
        deployed={PROMETHEUS: _deployed(before, _manifest(_deployment({"app": "a"})))},
        rendered={PROMETHEUS: _manifest(_deployment({"app": "b"}))},
    )
    d = diff(p, reads, SERVER)
    [change] = d.releases
    assert d.destructive is True
    assert change.destructive[0].startswith("Deployment ")
    assert "spec.selector" in change.destructive[0]


def test_a_plain_upgrade_is_not_destructive(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    before, p = _upgrade(make_stack, serve_everything)
    manifest = _manifest(_deployment({"app": "a"}))
    reads = Reads(
        deployed={PROMETHEUS: _deployed(before, manifest)}, rendered={PROMETHEUS: manifest}
    )
    d = diff(p, reads, SERVER)
    assert d.changes is True
    assert d.destructive is False
