"""Advisories declare their facts and their rule; facts declare the LIST behind them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import components_of_stack
from modelplane.catalog.facts import (
    CONFIG_MAPS,
    DAEMON_SETS,
    DEPLOYMENTS,
    NODES,
    ClusterFacts,
    ConfigMapsNamed,
    CustomObjects,
    Fact,
    Listing,
    WorkloadsOfKind,
    assemble,
)
from modelplane.catalog.types import Component, Finding, RequirementStatus, Severity
from modelplane.checks.checker import provided_stack
from modelplane.observe.facts import needed_facts
from modelplane.pins import Stack
from modelplane.plan.findings import advisories
from modelplane.plan.model import RequirementResult
from modelplane.plan.observed import Observed
from modelplane.wire import ApiRef

PROMETHEUSES = ApiRef("monitoring.coreos.com", "v1", "prometheuses")


@dataclass(frozen=True)
class ConfigMapPresent:
    """A kind written only here: nothing else in the product knows about it."""

    name: str

    @property
    def title(self) -> str:
        return f"ConfigMap {self.name} exists"

    def needs(self) -> tuple[Fact, ...]:
        return (ConfigMapsNamed(self.name),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.config_maps is None:
            return RequirementStatus.UNKNOWN, "not observed"
        if any(cm.name == self.name for cm in facts.config_maps):
            return RequirementStatus.MET, "there"
        return RequirementStatus.WARNING, "missing"


def test_a_new_advisory_kind_is_one_class() -> None:
    component = Component(
        name="toy",
        summary="",
        namespace="",
        version="1",
        stacks=frozenset(Stack),
        order=0,
        advisories=(ConfigMapPresent("toy-config"),),
    )
    # What it reads comes from the class itself...
    assert needed_facts([component]) == [ConfigMapsNamed("toy-config")]
    assert ConfigMapsNamed("toy-config").listing == Listing(CONFIG_MAPS, name="toy-config")
    # ... and so does how the plan judges it.
    spec = provided_stack(Stack.STANDARD).spec
    facts = assemble(
        [(ConfigMapsNamed("toy-config"), [{"metadata": {"name": "toy-config", "namespace": "a"}}])],
        {},
    )
    (result,) = advisories([component], spec, Observed(cluster=facts))
    assert result == RequirementResult(
        component="toy",
        requirement="ConfigMap toy-config exists",
        status=RequirementStatus.MET,
        message="there",
        severity=Severity.ADVISORY,
    )


def test_a_check_of_either_stack_lists_each_kind_once() -> None:
    # One LIST per distinct listing the stack's advisories need, however many
    # advisories share it: every workload check reads Deployments, once per
    # namespace a component is observed in, and never across the cluster.
    for stack in Stack:
        components = components_of_stack(stack)
        listings = [f.listing for f in needed_facts(components)]
        assert len(listings) == len(set(listings)), stack
        assert set(listings) == {
            fact.within(namespace).listing
            for c in components
            for a in c.advisories
            for fact in a.needs()
            for namespace in c.observed_in
        }, stack
        assert listings.count(Listing(NODES)) == 1, stack
        assert Listing(DEPLOYMENTS) not in listings and Listing(DAEMON_SETS) not in listings
        namespaces = {n for c in components for n in c.observed_in}
        for listing in listings:
            if listing.api in (DEPLOYMENTS, DAEMON_SETS, CONFIG_MAPS):
                assert listing.namespace in namespaces, listing
        needing_deployments = [
            a
            for c in components
            for a in c.advisories
            if WorkloadsOfKind("Deployment") in a.needs()
        ]
        assert len(needing_deployments) > 1


def test_equal_needs_are_one_fact() -> None:
    # Every workload advisory asks for Deployments; they are read once per
    # namespace (Envoy Gateway's two workload advisories share one read).
    facts = needed_facts(components_of_stack(Stack.DYNAMO))
    assert facts.count(WorkloadsOfKind("Deployment", "envoy-gateway-system")) == 1
    assert WorkloadsOfKind("Deployment") not in facts
    assert len(facts) == len(set(facts))


def _deployment(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [{"image": "example/x:v1"}]}}},
    }


def test_a_key_half_observed_is_not_observed() -> None:
    read = [(WorkloadsOfKind("Deployment"), [_deployment("d")])]
    # DaemonSets could not be listed: "no DaemonSet runs X" would be a lie.
    facts = assemble(read, {"workloads": "403 daemonsets is forbidden"})
    assert facts.workloads is None
    assert facts.unobservable == {"workloads": "403 daemonsets is forbidden"}
    whole = assemble([*read, (WorkloadsOfKind("DaemonSet"), [])], {})
    assert whole.workloads is not None
    assert [(w.kind, w.name, w.images) for w in whole.workloads] == [
        ("Deployment", "d", ["example/x:v1"])
    ]


def test_an_empty_listing_is_observed_and_empty() -> None:
    facts = assemble([(ConfigMapsNamed("c"), []), (CustomObjects(PROMETHEUSES), [])], {})
    assert facts.config_maps == []
    assert facts.custom == {PROMETHEUSES.key: []}
    # What no advisory asked for stays unobserved rather than empty.
    assert facts.nodes is None


def test_unknown_workload_kind_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'StatefulSet'"):
        WorkloadsOfKind("StatefulSet")


def test_severity_is_a_closed_set() -> None:
    base = {"component": "c", "requirement": "r", "status": "warning", "message": "m"}
    loaded = RequirementResult.model_validate({**base, "severity": "advisory"})
    assert loaded.severity is Severity.ADVISORY
    assert RequirementResult.model_validate(base).severity is Severity.REQUIRED
    with pytest.raises(ValidationError, match="severity"):
        RequirementResult.model_validate({**base, "severity": "optional"})
