"""``plan.diff``: what a reconcile would change, from the plan and what was read for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from modelplane.catalog.configuration import GATEWAY_NAME, NS, Hold
from modelplane.plan import plan
from modelplane.plan.diff import (
    DeployedRelease,
    Diff,
    ObjectChangeKind,
    Reads,
    ReleaseChangeKind,
    comparable,
    diff,
    unified,
)
from modelplane.plan.model import Plan
from modelplane.plan.observed import Observed, ObservedRelease

from .conftest import StackFactory, installed

GATEWAY = f"gateway.networking.k8s.io/v1/Gateway/{NS}/{GATEWAY_NAME}"
PROMETHEUS = "mp-kube-prometheus-stack"
SERVER = "https://target.example:6443"


def _converged(make_stack: StackFactory, serve: Callable[..., Observed], **spec: Any) -> Plan:
    """The plan of ``spec`` on a target where the default stack is fully installed."""
    first = plan(make_stack(), serve())
    return plan(make_stack(**spec), installed(first, serve()))


def _deployed(p: Plan, name: str, **fields: Any) -> DeployedRelease:
    release = next(r for r in p.releases if r.name == name)
    base = {
        "name": name,
        "namespace": release.namespace,
        "revision": 1,
        "chart_version": release.version,
        "values": release.values,
        "manifest": f"---\n# Source: x\nversion: {release.version}\n",
    }
    return DeployedRelease.model_validate({**base, **fields})


def test_a_converged_target_has_no_change(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    d = diff(_converged(make_stack, serve_everything), Reads(), SERVER)
    assert d.changes is False
    assert (d.releases, d.manifests, d.objects, d.drift) == ([], [], [], [])


def test_a_pin_change_is_an_upgrade_naming_both_versions_and_the_manifest_diff(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    before = plan(make_stack(), serve_everything())
    p = _converged(make_stack, serve_everything, versions={"prometheus": "84.5.0"})
    old = _deployed(before, PROMETHEUS)
    reads = Reads(
        deployed={PROMETHEUS: old},
        rendered={PROMETHEUS: "---\n# Source: x\nversion: 84.5.0\n"},
    )
    d = diff(p, reads, SERVER)
    assert d.changes is True
    [change] = d.releases
    assert change.release == PROMETHEUS
    assert change.change is ReleaseChangeKind.UPGRADE
    assert (change.old_version, change.new_version) == (old.chart_version, "84.5.0")
    assert change.old_version != "84.5.0"
    assert f"-version: {old.chart_version}\n" in change.manifest_diff
    assert "+version: 84.5.0\n" in change.manifest_diff
    assert change.values_diff == ""  # the pin alone changes no value


@pytest.mark.parametrize(
    ("deployed_values", "removed", "added"),
    [
        ({"a": 1}, ["-a: 1"], []),
        ({}, [], ["+"]),
        ({"x": {"nested": "old"}}, ["-x:", "-  nested: old"], []),
    ],
)
def test_the_values_diff_is_deployed_against_desired_as_sorted_yaml(
    make_stack: StackFactory,
    serve_everything: Callable[..., Observed],
    deployed_values: dict[str, Any],
    removed: list[str],
    added: list[str],
) -> None:
    first = plan(make_stack(), serve_everything())
    seen = installed(first, serve_everything())
    # The stored digest no longer matches: the release is out of sync.
    releases = dict(seen.releases)
    releases[PROMETHEUS] = releases[PROMETHEUS].model_copy(update={"digest": "stale"})
    p = plan(make_stack(), seen.model_copy(update={"releases": releases}))
    reads = Reads(deployed={PROMETHEUS: _deployed(p, PROMETHEUS, values=deployed_values)})
    [change] = diff(p, reads, SERVER).releases
    lines = change.values_diff.splitlines()
    assert lines[:2] == [
        f"--- a/monitoring/{PROMETHEUS} values",
        f"+++ b/monitoring/{PROMETHEUS} values",
    ]
    for line in removed:
        assert line in lines
    for prefix in added:
        assert any(line.startswith(prefix) and not line.startswith("+++") for line in lines)


def test_an_absent_release_is_an_install_from_nothing(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    p = plan(make_stack(), serve_everything())
    d = diff(p, Reads(rendered={"mp-cert-manager": "kind: ConfigMap\n"}), SERVER)
    by_name = {r.release: r for r in d.releases}
    cert_manager = by_name["mp-cert-manager"]
    assert cert_manager.change is ReleaseChangeKind.INSTALL and cert_manager.old_version is None
    assert "+kind: ConfigMap\n" in cert_manager.manifest_diff
    # One that waits for another is an install too, and says what it waits for.
    assert any(r.waiting_for for r in d.releases if r.change is ReleaseChangeKind.INSTALL)


def test_a_failed_first_install_is_a_reinstall_from_nothing(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    first = plan(make_stack(), serve_everything())
    seen = installed(first, serve_everything())
    releases = dict(seen.releases)
    releases[PROMETHEUS] = ObservedRelease(
        name=PROMETHEUS, namespace="monitoring", revision=1, status="failed"
    )
    p = plan(make_stack(), seen.model_copy(update={"releases": releases}))
    reads = Reads(deployed={PROMETHEUS: _deployed(p, PROMETHEUS, values={"old": True})})
    [change] = diff(p, reads, SERVER).releases
    assert change.change is ReleaseChangeKind.REINSTALL
    assert "-old: true" not in change.values_diff


def _live_gateway(p: Plan, **spec: Any) -> dict[str, Any]:
    body = next(o.object for o in p.objects if o.key == GATEWAY)
    live = {**body, "spec": {**body["spec"], **spec}}
    live["metadata"] = {
        **body["metadata"],
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "managedFields": [{"manager": "kubectl"}],
    }
    live["status"] = {"conditions": []}
    return live


@pytest.mark.parametrize(
    ("live", "change"),
    [(False, ObjectChangeKind.CREATE), (True, ObjectChangeKind.UPDATE)],
)
def test_an_object_to_apply_is_a_create_or_an_update_of_the_live_object(
    make_stack: StackFactory,
    serve_everything: Callable[..., Observed],
    live: bool,
    change: ObjectChangeKind,
) -> None:
    p = plan(make_stack(), serve_everything())
    body = next(o.object for o in p.objects if o.key == GATEWAY)
    reads = Reads(
        live={GATEWAY: _live_gateway(p, gatewayClassName="other")} if live else {},
        dry_run={GATEWAY: _live_gateway(p)},
    )
    [gateway] = [o for o in diff(p, reads, SERVER).objects if o.key == GATEWAY]
    assert gateway.change is change
    # The server's bookkeeping and status never show.
    for word in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "status:"):
        assert word not in gateway.diff
    if live:
        assert "-  gatewayClassName: other\n" in gateway.diff
        assert f"+  gatewayClassName: {body['spec']['gatewayClassName']}\n" in gateway.diff
    else:
        assert f"+  gatewayClassName: {body['spec']['gatewayClassName']}\n" in gateway.diff
        assert not [
            line
            for line in gateway.diff.splitlines()
            if line.startswith("-") and not line.startswith("---")
        ]


def test_without_a_dry_run_answer_the_body_to_apply_is_shown_with_the_problem(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    p = plan(make_stack(), serve_everything())
    reads = Reads(object_problems={GATEWAY: 'namespaces "modelplane-system" not found\x1b[2J'})
    [gateway] = [o for o in diff(p, reads, SERVER).objects if o.key == GATEWAY]
    assert gateway.change is ObjectChangeKind.CREATE
    assert "+kind: Gateway\n" in gateway.diff
    assert gateway.problem is not None and "\x1b" not in gateway.problem


def test_drift_is_reported_and_is_an_update(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    first = plan(make_stack(), serve_everything())
    seen = installed(first, serve_everything())
    # The operator owns nothing of the Gateway any more: every field it sets drifted.
    p = plan(make_stack(), seen.model_copy(update={"owned": {GATEWAY: {}}}))
    reads = Reads(live={GATEWAY: _live_gateway(p)}, dry_run={GATEWAY: _live_gateway(p)})
    d = diff(p, reads, SERVER)
    assert d.changes is True
    [drift] = d.drift
    assert drift.key == GATEWAY and "spec.gatewayClassName" in drift.fields
    [update] = d.objects
    assert update.change is ObjectChangeKind.UPDATE and update.drift == drift.fields


def test_held_objects_are_listed_with_why_and_change_nothing(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    # No API served: every object waits for its API.
    p = plan(make_stack(), Observed())
    d = diff(p, Reads(), SERVER)
    assert d.held
    assert {h.hold for h in d.held} <= set(Hold)
    assert all(h.reason for h in d.held)
    assert not {h.key for h in d.held} & {o.key for o in d.objects}


def test_values_from_the_target_are_made_printable_with_newlines_kept(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    p = plan(make_stack(), serve_everything())
    live = _live_gateway(p)
    live["metadata"] = {**live["metadata"], "labels": {"x": "\x1b]8;;evil\x07"}}
    reads = Reads(live={GATEWAY: live}, dry_run={GATEWAY: _live_gateway(p)})
    [gateway] = [o for o in diff(p, reads, SERVER).objects if o.key == GATEWAY]
    assert "\x1b" not in gateway.diff and "\x07" not in gateway.diff
    assert "\n" in gateway.diff


def test_unified_and_comparable() -> None:
    assert unified("a\n", "a\n", "x") == ""
    assert unified("a", "b", "x").endswith("+b\n")
    body = {"kind": "K", "metadata": {"name": "n", "uid": "u"}, "status": {}, "spec": {}}
    assert comparable(body) == {"kind": "K", "metadata": {"name": "n"}, "spec": {}}


def test_the_diff_round_trips_as_json() -> None:
    d = Diff(name="west", namespace="platform", server=SERVER)
    assert Diff.model_validate_json(d.model_dump_json()) == d


def _crd(name: str, digest: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": {"modelplane.ai/digest": digest}},
        "spec": spec,
    }


def test_manifests_to_apply_show_each_object_that_would_change(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    p = plan(make_stack(), serve_everything())
    [gaie] = [m for m in p.manifests if m.component == "gaie-crds"]
    same = _crd("same.x.io", "new")
    changed_live, changed_new = _crd("changed.x.io", "old"), _crd("changed.x.io", "new")
    created = _crd("created.x.io", "new")
    reads = Reads(
        manifest_objects={"gaie-crds": [same, changed_new, created]},
        live={
            "apiextensions.k8s.io/v1/CustomResourceDefinition/same.x.io": same,
            "apiextensions.k8s.io/v1/CustomResourceDefinition/changed.x.io": changed_live,
        },
        dry_run={
            "apiextensions.k8s.io/v1/CustomResourceDefinition/same.x.io": same,
            "apiextensions.k8s.io/v1/CustomResourceDefinition/changed.x.io": changed_new,
        },
    )
    by_component = {m.component: m for m in diff(p, reads, SERVER).manifests}
    change = by_component[gaie.component]
    assert [(o.object, o.change) for o in change.objects] == [
        ("CustomResourceDefinition changed.x.io", ObjectChangeKind.UPDATE),
        ("CustomResourceDefinition created.x.io", ObjectChangeKind.CREATE),
    ]
    assert "-    modelplane.ai/digest: old\n" in change.objects[0].diff
    assert change.problem is None
    refused = Reads(manifest_problems={gaie.component: "https://x lacks \x1b[2J y"})
    [failed] = diff(p, refused, SERVER).manifests
    assert failed.problem == "https://x lacks \\u001b[2J y"
