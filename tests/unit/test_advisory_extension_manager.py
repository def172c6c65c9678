"""Envoy Gateway's extensionManager must be wired exactly as the requirements page says.

The requirements page (000_3c48735b7dd4bba3.txt, envoy-gateway, "Not checked")
asks for the extensionManager "wired exactly as the values above".
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from modelplane.catalog import components as catalog
from modelplane.catalog.advisories import differences
from modelplane.checks.checker import check_results, provided_stack
from modelplane.pins import Stack
from modelplane.plan.model import RequirementResult, RequirementStatus
from modelplane.plan.observed import ClusterFacts, Observed, ObservedConfigMap

TITLE = "Envoy Gateway's extensionManager is wired to the AI Gateway"
POST = ["Translation", "Cluster", "Route"]
POOL = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}


def rendered() -> dict[str, Any]:
    """The EnvoyGateway document gateway-helm renders: chart defaults plus our values."""
    values = catalog.BY_NAME["envoy-gateway"].values(provided_stack(Stack.STANDARD).spec)
    doc: dict[str, Any] = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyGateway",
        "gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
        "provider": {"type": "Kubernetes"},
        "logging": {"level": {"default": "info"}},
    }
    return doc | copy.deepcopy(values["config"]["envoyGateway"])


def wiring(doc: dict[str, Any]) -> RequirementResult:
    cm = ObservedConfigMap(
        namespace="envoy-gateway-system",
        name="envoy-gateway-config",
        data={"envoy-gateway.yaml": yaml.safe_dump(doc)},
    )
    observed = Observed(cluster=ClusterFacts(config_maps=[cm]))
    (found,) = [r for r in check_results(Stack.STANDARD, observed) if r.requirement == TITLE]
    return found


def test_the_values_the_page_lists_pass() -> None:
    result = wiring(rendered())
    assert result.status is RequirementStatus.MET, result.message


def test_other_extension_apis_and_an_explicit_default_pass() -> None:
    doc = rendered()
    # The AI Gateway's own Envoy Gateway values enable EnvoyPatchPolicy too.
    doc["extensionApis"]["enableEnvoyPatchPolicy"] = True
    doc["extensionManager"]["failOpen"] = False
    result = wiring(doc)
    assert result.status is RequirementStatus.MET, result.message


def test_hooks_in_another_order_warn() -> None:
    doc = rendered()
    doc["extensionManager"]["hooks"]["xdsTranslator"]["post"] = list(reversed(POST))
    result = wiring(doc)
    assert result.status is RequirementStatus.WARNING
    assert (
        "extensionManager.hooks.xdsTranslator.post is in another order "
        '(expected ["Translation", "Cluster", "Route"], got ["Route", "Cluster", "Translation"])'
    ) in result.message


def test_an_extra_backend_resource_warns() -> None:
    doc = rendered()
    extra = {"group": "example.com", "kind": "Other", "version": "v1"}
    doc["extensionManager"]["backendResources"].append(extra)
    result = wiring(doc)
    assert result.status is RequirementStatus.WARNING
    assert (
        'extensionManager.backendResources has extra {"group": "example.com", "kind": "Other", '
        '"version": "v1"} (expected [{"group": "inference.networking.k8s.io", "kind": '
        '"InferencePool", "version": "v1"}], got [{"group": "inference.networking.k8s.io", '
        '"kind": "InferencePool", "version": "v1"}, {"group": "example.com", "kind": "Other", '
        '"version": "v1"}])'
    ) in result.message


def test_fail_open_warns() -> None:
    doc = rendered()
    doc["extensionManager"]["failOpen"] = True
    result = wiring(doc)
    assert result.status is RequirementStatus.WARNING
    assert "extensionManager.failOpen is true, not false (unset)" in result.message


def test_any_other_extension_manager_key_warns() -> None:
    doc = rendered()
    doc["extensionManager"]["resources"] = [{"group": "example.com", "kind": "X", "version": "v1"}]
    result = wiring(doc)
    assert result.status is RequirementStatus.WARNING
    assert 'extensionManager.resources is [{"group": "example.com"' in result.message
    assert "not unset" in result.message


def test_a_lacking_list_names_what_it_lacks_and_both_lists() -> None:
    doc = rendered()
    doc["extensionManager"]["hooks"]["xdsTranslator"]["post"] = ["Translation"]
    result = wiring(doc)
    assert (
        'extensionManager.hooks.xdsTranslator.post lacks "Cluster", "Route" '
        '(expected ["Translation", "Cluster", "Route"], got ["Translation"])'
    ) in result.message


def test_exact_compares_json_values_not_python_equality() -> None:
    # True == 1 in Python; in the wiring a port of true is not 1 and "1063" not 1063.
    assert differences({"a": {"p": 1063}}, {"a": {"p": "1063"}}, exact=frozenset({"a"})) == [
        'a.p is "1063", not 1063'
    ]
    assert differences({"a": [1]}, {"a": [True]}, exact=frozenset({"a"})) == [
        "a lacks 1 and has extra true (expected [1], got [true])"
    ]
    # Outside the exact paths a document may hold more.
    assert differences({"a": {"p": 1}}, {"a": {"p": 1, "q": 2}, "b": 3}) == []
    assert differences({"a": [1]}, {"a": [1, 1]}, exact=frozenset({"a"})) == [
        "a repeats items (expected [1], got [1, 1])"
    ]


def _wiring_text(text: str) -> RequirementResult:
    cm = ObservedConfigMap(
        namespace="tenant-a", name="envoy-gateway-config", data={"envoy-gateway.yaml": text}
    )
    observed = Observed(cluster=ClusterFacts(config_maps=[cm]))
    (found,) = [r for r in check_results(Stack.STANDARD, observed) if r.requirement == TITLE]
    return found


def test_a_tenant_date_that_is_no_date_is_a_warning_not_a_crash() -> None:
    # Seen live: a Provided stack's ReconcileError for as long as it stood.
    result = _wiring_text("a: 2001-13-01\n")
    assert result.status is RequirementStatus.WARNING
    assert "extensionManager" in result.message


def test_a_tenant_value_no_constructor_builds_is_a_warning_naming_the_configmap() -> None:
    result = _wiring_text("a: !!timestamp 'zz'\n")
    assert result.status is RequirementStatus.WARNING
    assert "ConfigMap tenant-a/envoy-gateway-config key envoy-gateway.yaml cannot be read" in (
        result.message
    )
    assert "zz" not in result.message
