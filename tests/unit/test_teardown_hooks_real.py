"""The real charts' hooks (their ``helm template`` at the pins) against catalog and teardown.

Each Standard chart's ``rendered-standard.yaml`` holds its hooks as Helm
would make them (``../shared/fixtures/charts/README.md``). Helm never
uninstalls a hook, so whatever of one its delete policy leaves stays on the
target after ``helm uninstall``: teardown must delete every such object that
the deletion of a namespace does not take along.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs

from modelplane.actions.apply import namespace_body
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.types import Component
from modelplane.pins import Stack
from modelplane.plan import Plan, plan
from modelplane.plan.teardown import DeleteHookObjects, FoundObject, ObjectRef, teardown_steps
from modelplane.wire import object_key

from .conftest import StackFactory, installed

STANDARD_CHARTS = [c for c in COMPONENTS if c.chart is not None and Stack.STANDARD in c.stacks]


@cache
def _hooks(chart: str, version: str) -> tuple[dict[str, Any], ...]:
    """Every hook document of the chart's real render at that version."""
    docs = yaml_docs(real_chart(chart, version) / "rendered-standard.yaml")
    return tuple(
        d
        for d in docs
        if isinstance(d, dict) and "helm.sh/hook" in (d["metadata"].get("annotations") or {})
    )


def _hooks_of(component: Component) -> tuple[dict[str, Any], ...]:
    assert component.chart is not None
    return _hooks(component.chart.chart, component.version)


def _listed(value: str | None) -> tuple[str, ...]:
    """An annotation's comma-separated list, as Helm splits it."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _survives_helm(doc: dict[str, Any]) -> bool:
    """Helm's own rule, read off the render: only these policies ever delete a hook object.

    None means before-hook-creation, which deletes it only before making
    it again; uninstall deletes no hook. Helm test hooks never run here.
    """
    annotations = doc["metadata"]["annotations"]
    events = set(_listed(annotations["helm.sh/hook"])) - {"test", "test-success"}
    policies = set(_listed(annotations.get("helm.sh/hook-delete-policy")))
    return bool(events) and not {"hook-succeeded", "hook-failed"} <= policies


def _ref(doc: dict[str, Any]) -> ObjectRef:
    return ObjectRef.of(doc)


@pytest.mark.parametrize("component", STANDARD_CHARTS, ids=lambda c: c.name)
def test_the_catalog_lists_every_hook_of_the_pinned_chart(component: Component) -> None:
    assert component.chart is not None
    rendered = {
        (
            d["apiVersion"],
            d["kind"],
            d["metadata"]["name"],
            d["metadata"].get("namespace"),
            _listed(d["metadata"]["annotations"]["helm.sh/hook"]),
            _listed(d["metadata"]["annotations"].get("helm.sh/hook-delete-policy")),
        )
        for d in _hooks_of(component)
    }
    listed = {
        (
            h.api_version,
            h.kind,
            h.name,
            component.namespace if h.namespaced else None,
            h.events,
            h.delete_policies,
        )
        for h in component.chart.hooks
    }
    assert listed == rendered
    assert len(component.chart.hooks) == len(rendered)


@pytest.mark.parametrize("component", STANDARD_CHARTS, ids=lambda c: c.name)
def test_every_hook_carries_the_marks_teardown_asks_for(component: Component) -> None:
    # What is_release_hook reads: the live object is made from this document.
    for doc in _hooks_of(component):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == component.release_name, doc["metadata"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", doc["metadata"]


def _every_hook_live(p: Plan) -> list[FoundObject]:
    """Every hook of the real renders on the target, marked as Helm made it."""
    return [
        FoundObject.of(_ref(doc), doc["metadata"])
        for component in STANDARD_CHARTS
        for doc in _hooks_of(component)
        if any(r.component == component.name for r in p.releases)
    ]


@pytest.mark.parametrize("namespaces_ours", [True, False], ids=["product-namespaces", "owners"])
def test_teardown_deletes_every_hook_object_helm_leaves(
    make_stack: StackFactory, namespaces_ours: bool
) -> None:
    p = plan(make_stack())
    observed = installed(p)
    if namespaces_ours:
        # The product made the release namespaces: the last step deletes
        # them, and what a namespaced hook left with them.
        made = {object_key(namespace_body(r.namespace)): "d" for r in p.releases}
        observed = observed.model_copy(update={"applied": observed.applied | made})
    steps = teardown_steps(p, observed, _every_hook_live(p))

    deleted = {
        (s.release, ref) for s in steps if isinstance(s, DeleteHookObjects) for ref in s.objects
    }
    namespaces_deleted = _namespaces_deleted(steps)
    left = {
        (component.release_name, _ref(doc))
        for component in STANDARD_CHARTS
        for doc in _hooks_of(component)
        if _survives_helm(doc) and _ref(doc).namespace not in namespaces_deleted
    }
    # The finding: gateway-helm's pre-install hooks have no delete policy.
    assert (
        "mp-gateway-helm",
        ObjectRef(
            api_version="admissionregistration.k8s.io/v1",
            kind="MutatingWebhookConfiguration",
            name="envoy-gateway-topology-injector.envoy-gateway-system",
        ),
    ) in left
    assert left <= deleted
    # Nothing else: every object deleted is one of a render's hooks.
    assert deleted <= {(c.release_name, _ref(doc)) for c in STANDARD_CHARTS for doc in _hooks_of(c)}


def _namespaces_deleted(steps: list[Any]) -> set[str]:
    return {
        ref.name
        for s in steps
        if not isinstance(s, DeleteHookObjects) and s.step == "delete"
        for ref in s.objects
        if ref.kind == "Namespace"
    }


def test_nothing_of_a_hook_goes_when_it_is_not_there(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    steps = teardown_steps(p, installed(p), [])
    assert not [s for s in steps if isinstance(s, DeleteHookObjects)]


def test_standard_has_charts_with_hooks() -> None:
    # Guards the parametrization: a catalog that lost its charts tests nothing.
    assert {c.name for c in STANDARD_CHARTS} >= {
        "cert-manager",
        "envoy-gateway",
        "kube-prometheus-stack",
        "node-feature-discovery",
    }
