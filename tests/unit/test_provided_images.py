"""Provided mode: a workload that pulls from past the mirror is a warning, never unmet."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.facts import ClusterFacts, ObservedWorkload
from modelplane.catalog.images import ImageRef
from modelplane.catalog.types import RequirementStatus, Severity
from modelplane.checks.checker import check_results, summarize
from modelplane.pins import Stack
from modelplane.plan.images import parse_rules
from modelplane.plan.observed import Observed
from modelplane.plan.provided_images import TITLE, in_mirror, mirror_finding, unmirrored
from modelplane.plan.sources import Sources

CERT_MANAGER = next(c for c in COMPONENTS if c.name == "cert-manager")
CONTROLLER = "quay.io/jetstack/cert-manager-controller:v1.20.2"
RULES = parse_rules(["quay.io=mirror.internal/quay", "ghcr.io/ai-dynamo=mirror.internal/dynamo"])


def _workload(image: str, name: str = "cert-manager") -> ObservedWorkload:
    return ObservedWorkload(
        kind="Deployment", namespace="cert-manager", name=name, images=[image], available=True
    )


@pytest.mark.parametrize(
    ("image", "moved"),
    [
        (CONTROLLER, "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2"),
        # Already in the mirror: the rule's target is where it comes from.
        ("mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2", None),
        # A registry no rule names: nothing to say.
        ("docker.io/jetstack/cert-manager-controller:v1.20.2", None),
        # A prefix at a path boundary only.
        ("ghcr.io/ai-dynamo-fork/grove:1", None),
        (
            "ghcr.io/ai-dynamo/grove/grove-operator:1",
            "mirror.internal/dynamo/grove/grove-operator:1",
        ),
        # Not a reference: no rule speaks of it.
        ("Not An Image", None),
    ],
)
def test_which_images_a_rule_would_move(image: str, moved: str | None) -> None:
    found = unmirrored(_workload(image), RULES)
    assert [m for _, m, _ in found] == ([moved] if moved else [])


def test_a_mirror_target_is_matched_at_a_path_boundary() -> None:
    rules = parse_rules(["*=mirror.internal/m"])
    assert in_mirror(ImageRef.parse("mirror.internal/m/a:1"), rules)
    assert not in_mirror(ImageRef.parse("mirror.internal/mx/a:1"), rules)


def _facts(*workloads: ObservedWorkload) -> ClusterFacts:
    return ClusterFacts(workloads=list(workloads))


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (_facts(_workload(CONTROLLER)), RequirementStatus.WARNING),
        (_facts(_workload(unmirrored(_workload(CONTROLLER), RULES)[0][1])), RequirementStatus.MET),
        (ClusterFacts(unobservable={"workloads": "403 Forbidden"}), RequirementStatus.UNKNOWN),
    ],
)
def test_the_finding(facts: ClusterFacts, status: RequirementStatus) -> None:
    found = mirror_finding(CERT_MANAGER, facts, RULES)
    assert found is not None and found[0] is status


def test_no_finding_without_rules_or_workloads() -> None:
    assert mirror_finding(CERT_MANAGER, _facts(_workload(CONTROLLER)), ()) is None
    assert mirror_finding(CERT_MANAGER, _facts(), RULES) is None


def test_a_hostile_image_is_shown_escaped_and_cut() -> None:
    image = "quay.io/jetstack/cert-manager-controller:v1\x1b[2J" + "a" * 2000
    workload = _workload("quay.io/jetstack/cert-manager-controller:v1")
    hostile = workload.model_copy(
        update={"name": "x\x1b]0;t\x07", "images": [image, *workload.images]}
    )
    found = mirror_finding(CERT_MANAGER, _facts(hostile), RULES)
    assert found is not None
    assert "\x1b" not in found[1] and "\x07" not in found[1] and len(found[1]) < 2000


def _observed(image: str) -> Observed:
    return Observed(cluster=_facts(_workload(image)))


def _mirror_results(results: list[Any]) -> list[Any]:
    return [r for r in results if r.requirement == TITLE]


def test_check_warns_as_advice_and_the_verdict_stays() -> None:
    plain = check_results(Stack.STANDARD, _observed(CONTROLLER))
    warned = check_results(Stack.STANDARD, _observed(CONTROLLER), Sources(image_mirrors=RULES))
    # Without rules there is nothing to say.
    assert _mirror_results(plain) == []
    (result,) = _mirror_results(warned)
    assert result.component == "cert-manager"
    assert result.status is RequirementStatus.WARNING and result.severity is Severity.ADVISORY
    assert "quay.io=mirror.internal/quay" in result.message
    assert "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2" in result.message
    before, after = summarize(plain), summarize(warned)
    assert after.unmet == before.unmet and after.warning == before.warning + 1
