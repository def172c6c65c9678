"""What the plan finds on the target and in its pins: requirements, advisories, versions,
values a chart does not read, GPUs.

A requirement decides RequirementsMet; an advisory never does. Every
message built from what the target holds is made printable and cut here.
"""

from __future__ import annotations

from typing import Any

from modelplane.catalog.advisories import MAX_MESSAGE
from modelplane.catalog.types import Component, CRDServes, ObjectExists, Requirement
from modelplane.plan.capacity import GpuAvailability, gpu_findings, gpus_available
from modelplane.plan.chart_values import refused_message
from modelplane.plan.gateway import BUNDLE_TITLE, bundle_finding, not_programmed
from modelplane.plan.model import (
    CONFIGURATION,
    PlannedRelease,
    RequirementResult,
    RequirementStatus,
    Severity,
    VersionWarning,
)
from modelplane.plan.observed import Observed
from modelplane.plan.provided_images import TITLE as MIRROR_TITLE
from modelplane.plan.provided_images import mirror_finding
from modelplane.plan.sources import Sources
from modelplane.untrusted import printable


def gpus(
    components: list[Component], advisories: list[RequirementResult], observed: Observed
) -> GpuAvailability | None:
    """GPUsAvailable, in both modes, from the GPU advisories and the target's summary."""
    if observed.cluster is None:
        return None
    return gpus_available(gpu_findings(advisories, components), observed.target)


GATEWAY_TITLE = "the Gateway is accepted and programmed"


def served_advisories(managed: bool, observed: Observed) -> list[RequirementResult]:
    """What the controllers said of the product's Gateway and Bundle, as advisories.

    The Bundle's in both modes; the Gateway's in Provided mode only, where a
    provided controller is observed and reported: in Managed mode the
    product installed the controller, and Ready says it (``not_serving``).
    """
    out: list[RequirementResult] = []
    problem = not_programmed(observed.gateway_conditions)
    if not managed and observed.gateway_conditions:
        out.append(
            RequirementResult(
                component=CONFIGURATION,
                requirement=GATEWAY_TITLE,
                status=RequirementStatus.WARNING if problem else RequirementStatus.MET,
                message=printable(problem or "the Gateway is accepted and programmed", MAX_MESSAGE),
                severity=Severity.ADVISORY,
            )
        )
    synced = bundle_finding(observed.bundle_conditions)
    if synced is not None:
        out.append(
            RequirementResult(
                component=CONFIGURATION,
                requirement=BUNDLE_TITLE,
                status=RequirementStatus.MET if synced[0] else RequirementStatus.WARNING,
                message=printable(synced[1], MAX_MESSAGE),
                severity=Severity.ADVISORY,
            )
        )
    return out


def mirror_advisories(
    components: list[Component], managed: bool, observed: Observed, sources: Sources
) -> list[RequirementResult]:
    """Provided mode: warn of a provided workload that pulls from past the mirror."""
    if managed or observed.cluster is None or not sources.image_mirrors:
        return []
    results: list[RequirementResult] = []
    for component in components:
        if component.role != "substrate":
            continue
        found = mirror_finding(component, observed.cluster, sources.image_mirrors)
        if found is None:
            continue
        status, message = found
        results.append(
            RequirementResult(
                component=component.name,
                requirement=MIRROR_TITLE,
                status=status,
                message=printable(message, MAX_MESSAGE),
                severity=Severity.ADVISORY,
            )
        )
    return results


def refused_values(components: list[Component], releases: list[PlannedRelease]) -> dict[str, str]:
    """Component -> what the values its chart does not read, left unset, mean; plan order."""
    by_name = {c.name: c for c in components}
    out: dict[str, str] = {}
    for release in releases:
        if not release.refused:
            continue
        pull = by_name[release.component].images.pull_secrets
        out[release.component] = refused_message(
            release.chart, release.version, release.refused, pull.paths if pull else ()
        )
    return out


def version_warnings(components: list[Component], spec: Any) -> list[VersionWarning]:
    """Pins outside their component's supported range: accepted, never refused."""
    out: list[VersionWarning] = []
    for component in components:
        supported = component.supported
        if supported is None:
            continue
        version = component.version_for(spec)
        inside = supported.contains(version)
        if inside:
            continue
        pinned = f"{component.name} {version}"
        if component.version_field:
            pinned += f" (spec.{component.version_field})"
        what = (
            "is outside the supported range"
            if inside is False
            else "is not a version, so it cannot be held to the supported range"
        )
        out.append(
            VersionWarning(
                component=component.name,
                version=version,
                message=f"{pinned} {what}, {supported}: {supported.why}. Accepted, but untested.",
            )
        )
    return out


def advisories(
    components: list[Component], spec: Any, observed: Observed
) -> list[RequirementResult]:
    """The "not checked" entries, where the facts were gathered; never RequirementsMet."""
    if observed.cluster is None:
        return []
    results: list[RequirementResult] = []
    for component in components:
        for advisory in component.advisories:
            status, message = advisory.evaluate(component, spec, observed.cluster)
            # An advisory answering unmet would decide RequirementsMet.
            assert status is not RequirementStatus.UNMET, advisory.title
            results.append(
                RequirementResult(
                    component=component.name,
                    requirement=advisory.title,
                    status=status,
                    # Built from what the target holds: made printable and
                    # cut here, once for every kind of advisory.
                    message=printable(message, MAX_MESSAGE),
                    severity=Severity.ADVISORY,
                )
            )
    return results


def evaluate(component: str, requirement: Requirement, observed: Observed) -> RequirementResult:
    if isinstance(requirement, CRDServes):
        api = requirement.api
        if observed.serves(api):
            return RequirementResult(
                component=component,
                requirement=requirement.title,
                status=RequirementStatus.MET,
                message=f"CRD {requirement.crd} serves {requirement.version}",
            )
        others = observed.served_versions(api)
        if others:
            message = (
                f"CRD {requirement.crd} serves {', '.join(others)}, not {requirement.version}: "
                f"{requirement.fix}"
            )
        else:
            message = f"CRD {requirement.crd} is not served: {requirement.fix}"
        return RequirementResult(
            component=component,
            requirement=requirement.title,
            status=RequirementStatus.UNMET,
            message=message,
        )
    assert isinstance(requirement, ObjectExists)
    if observed.has_object(requirement.api, requirement.name):
        status, message = RequirementStatus.MET, f"{requirement.title} exists"
    elif not observed.serves(requirement.api):
        status = RequirementStatus.UNMET
        message = (
            f"{requirement.api.group_version} {requirement.api.resource} is not served, so "
            f"{requirement.kind} {requirement.name} cannot exist: {requirement.fix}"
        )
    else:
        status = RequirementStatus.UNMET
        message = f"{requirement.title} does not exist: {requirement.fix}"
    return RequirementResult(
        component=component, requirement=requirement.title, status=status, message=message
    )
