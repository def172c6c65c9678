"""Pins outside a component's supported range: accepted, and reported everywhere a person looks.

The ranges come from the ServingStack reference (001_acee9c81d3cd9507.txt):
versions.envoyGateway must be v1.8.x ("v1.9.x is out of range until the AI
Gateway release that pairs with it") and dynamo.grove v0.1.0-alpha.12-rc2 or
later (grove#753).
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from modelplane.api.models import ServingStack
from modelplane.catalog import components as catalog
from modelplane.catalog.advisories import ImageTag
from modelplane.catalog.types import VersionRange
from modelplane.catalog.versions import parse_version
from modelplane.checks.checker import check_results
from modelplane.cli.main import app
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.status import Outcome, desired_status
from modelplane.pins import Stack
from modelplane.plan import Observed, Plan, plan
from modelplane.plan.model import RequirementResult, RequirementStatus
from modelplane.plan.observed import ClusterFacts, ObservedWorkload

EG = "envoy-gateway"
EG_RANGE = catalog.BY_NAME["envoy-gateway"].supported
GROVE_RANGE = catalog.BY_NAME["grove"].supported


def stack(spec: dict[str, Any]) -> ServingStack:
    return ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": "west", "namespace": "platform", "generation": 2},
            "spec": {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}], **spec},
        }
    )


# ---- ordering versions --------------------------------------------------------------

ORDERED = [
    "v0.1.0-alpha.9",
    "v0.1.0-alpha.12-rc1",
    "v0.1.0-alpha.12-rc2",
    "v0.1.0-alpha.12-rc10",
    "v0.1.0-alpha.12",
    "v0.1.0-alpha.13-rc1",
    "v0.1.0-alpha.13",
    "v0.1.0-beta.1",
    "v0.1.0-rc.1",
    "v0.1.0",
    "v0.1.1",
    "v0.2.0",
    "v1.8.0-rc.1",
    "v1.8.0",
    "v1.8.4",
    "v1.8.10",
    "v1.9.0-rc.1",
    "v1.9.0",
    "v1.10.0",
]


def test_versions_order_as_the_release_tags_mean_them() -> None:
    shuffled = ORDERED[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=lambda v: parse_version(v)) == ORDERED
    for earlier, later in itertools.pairwise(ORDERED):
        a, b = parse_version(earlier), parse_version(later)
        assert a is not None and b is not None
        assert a < b, (earlier, later)


def test_leading_v_and_build_metadata_do_not_change_a_version() -> None:
    assert parse_version("v1.8.4") == parse_version("1.8.4") == parse_version("1.8.4+build.7")
    assert parse_version("v0.1.0-alpha.12-rc2") == parse_version("0.1.0-Alpha.12-RC2")


@pytest.mark.parametrize("text", ["latest", "main", "sha256:abc", "", "v1.x", "1.2.3.4"])
def test_what_is_not_a_version(text: str) -> None:
    assert parse_version(text) is None


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("v1.8.0", True),
        ("v1.8.4", True),
        ("1.8.99", True),
        ("v1.8.0-rc.1", False),  # before the v1.8 line
        ("v1.7.9", False),
        ("v1.9.0-rc.1", False),  # already the v1.9 line
        ("v1.9.0", False),
        ("v1.10.0", False),
        ("latest", None),
    ],
)
def test_envoy_gateway_range(version: str, inside: bool | None) -> None:
    assert EG_RANGE is not None
    assert EG_RANGE.contains(version) is inside


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("v0.1.0-alpha.12-rc1", False),
        ("v0.1.0-alpha.11", False),
        ("v0.1.0-alpha.12-rc2", True),
        ("0.1.0-alpha.12-rc2", True),
        ("v0.1.0-alpha.12", True),
        ("v0.1.0-alpha.13", True),
        ("v0.1.0", True),
    ],
)
def test_grove_range(version: str, inside: bool) -> None:
    assert GROVE_RANGE is not None
    assert GROVE_RANGE.contains(version) is inside


def test_every_catalog_default_is_within_its_own_range() -> None:
    ranged = [c for c in catalog.COMPONENTS if c.supported is not None]
    assert {c.name for c in ranged} >= {EG, "grove"}
    for c in ranged:
        assert c.supported is not None and c.supported.contains(c.version), c.name


def test_a_range_check_of_what_runs_needs_a_range() -> None:
    for c in catalog.COMPONENTS:
        for a in c.advisories:
            if isinstance(a, ImageTag) and not a.exact:
                assert c.supported is not None, c.name


def test_a_bound_that_is_not_a_version_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"VersionRange.below: 'v1.x' is not a version"):
        VersionRange("v1.8.0", "v1.x")


# ---- the plan: accepted, and said ---------------------------------------------------


def warnings_of(p: Plan) -> dict[str, str]:
    return {w.component: w.message for w in p.version_warnings}


def test_an_out_of_range_pin_is_installed_as_pinned_and_noted() -> None:
    p = plan(stack({"versions": {"envoyGateway": "v1.9.0"}}))
    (release,) = [r for r in p.releases if r.component == EG]
    assert release.version == "v1.9.0"
    message = warnings_of(p)[EG]
    assert message.startswith(
        "envoy-gateway v1.9.0 (spec.versions.envoyGateway) is outside the supported range, "
        "v1.8.0 or later and before v1.9.0: Envoy AI Gateway v1.1 is tested against"
    )
    assert message in p.notes
    (component,) = [c for c in p.components if c.name == EG]
    assert message in component.message


def test_pins_within_range_say_nothing() -> None:
    for spec in ({}, {"versions": {"envoyGateway": "v1.8.9"}}, {"stack": "Dynamo"}):
        p = plan(stack(spec))
        assert p.version_warnings == []
        assert not any("supported range" in n for n in p.notes)


def test_grove_before_rc2_is_noted_on_the_dynamo_stack_only() -> None:
    rc1 = {"dynamo": {"grove": "v0.1.0-alpha.12-rc1"}}
    message = warnings_of(plan(stack({"stack": "Dynamo", **rc1})))["grove"]
    assert "(spec.dynamo.grove) is outside the supported range" in message
    assert "grove#753" in message
    # The Standard stack ignores dynamo.* pins.
    assert plan(stack({"stack": "Standard", **rc1})).version_warnings == []


def test_render_prints_the_note(tmp_path: Path) -> None:
    path = tmp_path / "stack.yaml"
    body = stack({"versions": {"envoyGateway": "v1.9.0"}})
    path.write_text(yaml.safe_dump(body.model_dump(mode="json", by_alias=True, exclude_none=True)))
    text = CliRunner().invoke(app, ["render", "-f", str(path)])
    assert text.exit_code == 0, text.output
    flat = " ".join(text.stdout.split())
    notes = flat.split(" Notes ", 1)[1]
    assert "envoy-gateway v1.9.0 (spec.versions.envoyGateway) is outside" in notes
    doc = json.loads(CliRunner().invoke(app, ["render", "-f", str(path), "-o", "json"]).stdout)
    assert any(n.startswith("envoy-gateway v1.9.0") for n in doc["notes"])


# ---- the operator: status and events ------------------------------------------------


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_status_has_a_condition_and_the_component_message() -> None:
    p = plan(stack({"versions": {"envoyGateway": "v1.9.0"}}))
    status = desired_status(Outcome(plan=p), 2)
    c = _conditions(status)["VersionsSupported"]
    assert (c["status"], c["reason"], c["observedGeneration"]) == ("False", "OutOfRange", 2)
    assert c["message"] == warnings_of(p)[EG]
    (component,) = [x for x in status["components"] if x["name"] == EG]
    assert "outside the supported range" in component["message"]

    fine = _conditions(desired_status(Outcome(plan=plan(stack({}))), 2))["VersionsSupported"]
    assert (fine["status"], fine["reason"]) == ("True", "InRange")


def test_a_warning_event_once_per_change_not_per_resync() -> None:
    events: list[tuple[str, str, str]] = []
    warnings = StackReconciler(
        hub=None,  # type: ignore[arg-type]
        helm=None,  # type: ignore[arg-type]
        options=OperatorOptions(),
        emit=lambda *event: events.append(event),
    ).plan_warnings

    def report(p: Plan) -> None:
        warnings.report(p, lambda *event: events.append(event))

    v19 = plan(stack({"versions": {"envoyGateway": "v1.9.0"}}))
    for _ in range(3):  # three resyncs
        report(v19)
    assert events == [("Warning", "VersionOutOfRange", warnings_of(v19)[EG])]
    report(plan(stack({"versions": {"envoyGateway": "v1.9.1"}})))
    assert len(events) == 2 and "v1.9.1" in events[1][2]
    report(plan(stack({})))
    report(v19)  # back out of range: said again
    assert len(events) == 3 and "v1.9.0" in events[2][2]


# ---- modelplane check: what runs ----------------------------------------------------


def running(image: str) -> list[RequirementResult]:
    workload = ObservedWorkload(
        kind="Deployment", namespace="eg", name="envoy-gateway", images=[image], available=True
    )
    observed = Observed(cluster=ClusterFacts(workloads=[workload]))
    return check_results(Stack.STANDARD, observed)


def eg_version(results: list[RequirementResult]) -> RequirementResult:
    (found,) = [
        r
        for r in results
        if r.component == EG
        and r.requirement == "the Envoy Gateway controller runs a supported version"
    ]
    return found


@pytest.mark.parametrize(
    ("tag", "status"),
    [
        ("v1.8.4", RequirementStatus.MET),
        ("v1.8.0", RequirementStatus.MET),
        ("v1.9.0", RequirementStatus.WARNING),
        ("v1.9.0-rc.1", RequirementStatus.WARNING),
        ("v1.7.2", RequirementStatus.WARNING),
        ("latest", RequirementStatus.UNKNOWN),
    ],
)
def test_check_warns_when_the_running_envoy_gateway_is_out_of_range(
    tag: str, status: RequirementStatus
) -> None:
    result = eg_version(running(f"docker.io/envoyproxy/gateway:{tag}"))
    assert result.status is status, result.message
    if status is RequirementStatus.WARNING:
        assert result.message.startswith(
            f"Deployment eg/envoy-gateway runs docker.io/envoyproxy/gateway:{tag}, outside the "
            "supported range, v1.8.0 or later and before v1.9.0: Envoy AI Gateway v1.1"
        )


def test_check_of_grove_names_the_range_and_why() -> None:
    workload = ObservedWorkload(
        kind="Deployment",
        namespace="grove-system",
        name="grove-operator",
        images=["ghcr.io/ai-dynamo/grove/grove-operator:v0.1.0-alpha.12-rc1"],
    )
    results = check_results(Stack.DYNAMO, Observed(cluster=ClusterFacts(workloads=[workload])))
    (r,) = [r for r in results if r.requirement == "the Grove operator runs the pinned version"]
    assert r.status is RequirementStatus.WARNING
    assert "not v0.1.0-alpha.12-rc2, and outside the supported range" in r.message
    assert "grove#753" in r.message
