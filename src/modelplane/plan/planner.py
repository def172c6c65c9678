"""``plan(stack, observed) -> Plan``: pure, no I/O and no clock.

Almost every rule of the product lives here or in the catalog; the operator,
the checker and ``render`` only call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelplane.api.models import ServingStack
from modelplane.api.spec import client_ca_warnings
from modelplane.catalog.advisories import MAX_MESSAGE
from modelplane.catalog.components import components_for
from modelplane.catalog.configuration import (
    ConfigObject,
    Hold,
    client_ca_objects,
    configuration_for,
    https_listener_withheld,
)
from modelplane.catalog.types import Component, CRDServes, ObjectExists, Requirement
from modelplane.pins import ComponentsMode
from modelplane.plan import pull_secrets
from modelplane.plan.capacity import GpuAvailability, gpu_findings, gpus_available
from modelplane.plan.drift import drifted_fields
from modelplane.plan.gateway import (
    BUNDLE_TITLE,
    GATEWAY_NOT_PROGRAMMED,
    bundle_finding,
    not_programmed,
    published_address,
    published_ca,
)
from modelplane.plan.images import (
    ImageUse,
    MirrorRule,
    image_values,
    merge,
    product_images,
    takes_pull_secrets,
)
from modelplane.plan.model import (
    ComponentPlan,
    GatewayReport,
    NotServing,
    ObjectAction,
    Plan,
    PlannedManifests,
    PlannedObject,
    PlannedRelease,
    ReleaseAction,
    ReleaseState,
    RequirementResult,
    RequirementStatus,
    Severity,
    VersionWarning,
    work_left,
)
from modelplane.plan.observed import Observed, ObservedRelease
from modelplane.plan.provided_images import TITLE as MIRROR_TITLE
from modelplane.plan.provided_images import mirror_finding
from modelplane.plan.release_health import DriftMode, ReleaseReport, release_report
from modelplane.untrusted import printable
from modelplane.wire import DIGEST_ANNOTATION, digest, object_key, stamp

CONFIGURATION = "configuration"

_LOCKED = {"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"}


@dataclass(frozen=True)
class Sources:
    """Where charts and manifests come from; mirrors for air-gapped installs."""

    chart_repository: str | None = None  # one repository for every chart
    chart_repository_for: dict[str, str] = field(default_factory=dict)  # component -> URL
    manifests_base_url_for: dict[str, str] = field(default_factory=dict)  # component -> base
    # Where images are pulled from instead, and the Secrets pods pull with.
    image_mirrors: tuple[MirrorRule, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # --release-drift: what is done about a release's objects changed by hand.
    release_drift: DriftMode = DriftMode.CORRECT

    def repository(self, component: Component) -> str:
        assert component.chart is not None
        return self.chart_repository_for.get(
            component.name, self.chart_repository or component.chart.repository
        )


def plan(
    stack: ServingStack,
    observed: Observed | None = None,
    sources: Sources | None = None,
    held: Mapping[str, str] | None = None,
) -> Plan:
    """The plan for ``stack`` on what was observed.

    ``held`` names, per component, the installed version to plan at instead
    of the desired one: a stack whose upgrade waits for the rollout
    (plan.rollout) is reconciled, drift and health included, at what it runs.
    """
    observed = observed or Observed()
    sources = sources or Sources()
    held = held or {}
    spec = stack.spec

    def version_of(component: Component) -> str:
        return held.get(component.name) or component.version_for(spec)

    managed = spec.components is ComponentsMode.MANAGED
    components = components_for(spec)
    enabled = {c.name for c in components}

    # The cluster's requirements: the product's own configuration (the
    # ModelExpress CRDs) is applied, not required, so it is not among them.
    requirements = [
        _evaluate(component.name, requirement, observed)
        for component in components
        if component.role == "substrate"
        for requirement in component.requirements
    ]
    unmet_by_component = {
        r.component for r in requirements if r.status is not RequirementStatus.MET
    }

    releases: list[PlannedRelease] = []
    manifests: list[PlannedManifests] = []
    objects: list[PlannedObject] = []
    ready: set[str] = set()  # components whose install is done, for dependents
    for component in components:
        if component.role == "substrate" and not managed:
            continue
        version = version_of(component)
        if component.kind == "chart":
            release = _release(component, version, spec, observed, sources, ready, enabled)
            releases.append(release)
            if release.state is ReleaseState.IN_SYNC:
                ready.add(component.name)
        elif component.kind == "manifests":
            planned = _manifests(component, version, observed, sources, managed)
            manifests.append(planned)
            if planned.action is ObjectAction.NONE:
                ready.add(component.name)
        else:
            assert component.objects is not None
            planned_objects = [
                _object(ConfigObject(body), component.name, observed)
                for body in component.objects(spec)
            ]
            objects += planned_objects
            if all(o.action is ObjectAction.NONE for o in planned_objects):
                ready.add(component.name)

    # The product's own objects are applied in both modes, so their images
    # move with the rules whether or not the substrate is managed.
    product, product_uses = product_images(
        ((c.name, c.images, version_of(c)) for c in components),
        sources.image_mirrors,
        sources.image_pull_secrets,
    )
    objects += [_object(o, CONFIGURATION, observed) for o in configuration_for(spec, product)]
    work = work_left(releases, manifests, objects)
    missing = _missing_pull_secrets(components, releases, objects, product_uses, observed, sources)
    missing_by_component: dict[str, list[pull_secrets.MissingPullSecret]] = {}
    for m in missing:
        missing_by_component.setdefault(m.component, []).append(m)
    busy = {w.component for w in work}

    version_warnings = _version_warnings(components, spec)
    out_of_range = {w.component: w.message for w in version_warnings}
    component_plans = [
        _component_plan(
            c,
            releases,
            manifests,
            requirements,
            managed,
            c.name in unmet_by_component,
            c.name in busy,
            spec_version=c.version_for(spec),
            held_at=held.get(c.name),
            warning=out_of_range.get(c.name),
            pull=(
                pull_secrets.component_message(missing_by_component[c.name])
                if c.name in missing_by_component
                else None
            ),
        )
        for c in components
    ]
    report = _release_report(releases, observed, sources) if managed else ReleaseReport()
    component_plans = [with_health(c, report) for c in component_plans]
    advisories = (
        _advisories(components, spec, observed)
        + _mirror_advisories(components, managed, observed, sources)
        + _served_advisories(managed, observed)
    )
    gateway_problem = not_programmed(observed.gateway_conditions)
    bundle = observed.bundle_ca_certificate if spec.gateway.hostname else None
    ca_certificate, ca_problem = published_ca(bundle) if bundle else (None, None)
    return Plan(
        name=stack.metadata.name,
        namespace=stack.metadata.namespace,
        stack=str(spec.stack),
        mode=str(spec.components),
        components=component_plans,
        releases=releases,
        manifests=manifests,
        objects=objects,
        requirements=requirements + advisories,
        notes=_notes(stack) + [w.message for w in version_warnings],
        gateway=GatewayReport(
            address=published_address(observed.gateway_addresses),
            ca_certificate=ca_certificate,
            ca_problem=ca_problem,
        ),
        work=work,
        version_warnings=version_warnings,
        client_ca_warnings=client_ca_warnings(spec),
        image_mirrors=[str(rule) for rule in sources.image_mirrors],
        images=[use for release in releases for use in release.images] + product_uses,
        image_pull_secrets=list(sources.image_pull_secrets),
        missing_pull_secrets=missing,
        target=observed.target,
        gpus=_gpus(components, advisories, observed),
        # Provided mode reports it as an advisory instead (_served_advisories).
        not_serving=(
            NotServing(reason=GATEWAY_NOT_PROGRAMMED, message=gateway_problem)
            if managed and gateway_problem is not None
            else None
        ),
        health=report.health,
        release_drift=report.drift,
    )


def _gpus(
    components: list[Component], advisories: list[RequirementResult], observed: Observed
) -> GpuAvailability | None:
    """GPUsAvailable, in both modes, from the GPU advisories and the target's summary."""
    if observed.cluster is None:
        return None
    return gpus_available(gpu_findings(advisories, components), observed.target)


GATEWAY_TITLE = "the Gateway is accepted and programmed"


def _served_advisories(managed: bool, observed: Observed) -> list[RequirementResult]:
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


def _release_report(
    releases: list[PlannedRelease], observed: Observed, sources: Sources
) -> ReleaseReport:
    """Health and drift of the releases that are in sync; one being installed is not judged."""
    if observed.observed_at is None:
        return ReleaseReport()
    in_sync = {r.name for r in releases if r.state is ReleaseState.IN_SYNC}
    workloads = [w for w in observed.release_workloads if w.release in in_sync]
    unjudged = [u for u in observed.unjudged_releases if u.release in in_sync]
    refused = [r for r in observed.refused_revisions if r.release in in_sync]
    return release_report(
        workloads,
        observed.nodes,
        observed.observed_at,
        sources.release_drift,
        unjudged=unjudged,
        refused=refused,
    )


def with_health(c: ComponentPlan, report: ReleaseReport) -> ComponentPlan:
    """A component with no work left is as healthy as its workloads, and names its drift."""
    health = next((h for h in report.health if h.component == c.name), None)
    drift = [d.message for d in report.drift if d.component == c.name]
    drift += [u.message for u in report.unjudged if u.component == c.name]
    if c.state != "Ready" or (drift == [] and (health is None or health.state == "Healthy")):
        return c
    state = str(health.state) if health is not None and health.state != "Healthy" else c.state
    words = [health.message] if health is not None and state != c.state else []
    message = "; ".join(m for m in (*words, *drift, c.message) if m)
    return c.model_copy(update={"state": state, "message": message})


def _missing_pull_secrets(
    components: list[Component],
    releases: list[PlannedRelease],
    objects: list[PlannedObject],
    product_uses: list[ImageUse],
    observed: Observed,
    sources: Sources,
) -> list[pull_secrets.MissingPullSecret]:
    """The pull Secrets the planned pods name that the target was seen to lack."""
    if not sources.image_pull_secrets:
        return []
    # A chart's pods are the product's only where it installs the chart; the
    # product's own components are applied in both modes.
    installed = {r.component for r in releases}
    uses: dict[str, list[ImageUse]] = {}
    for use in [u for r in releases for u in r.images] + product_uses:
        uses.setdefault(use.component, []).append(use)
    wanted = pull_secrets.needed(
        [
            c
            for c in components
            if (c.name in installed or c.role == "config")
            and takes_pull_secrets(uses.get(c.name, []), sources.image_mirrors)
        ],
        # Held ones too: an object waiting for its API runs its pods once it is served.
        [(o.component, o.object) for o in objects],
    )
    return pull_secrets.missing(wanted, sources.image_pull_secrets, observed.pull_secrets)


def _mirror_advisories(
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


def _version_warnings(components: list[Component], spec: Any) -> list[VersionWarning]:
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


def _advisories(
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


def _evaluate(component: str, requirement: Requirement, observed: Observed) -> RequirementResult:
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


def release_state(desired_digest: str, observed: ObservedRelease | None) -> ReleaseState:
    """Name the one state a release is in, from Helm's storage and the desired digest."""
    # An uninstalled release whose history was kept is as good as absent.
    if observed is None or observed.status == "uninstalled":
        return ReleaseState.ABSENT
    if observed.status in _LOCKED:
        return ReleaseState.LOCKED
    if observed.status == "failed":
        return ReleaseState.FAILED
    if observed.status == "deployed" and observed.digest == desired_digest:
        return ReleaseState.IN_SYNC
    return ReleaseState.OUT_OF_SYNC


def release_action(state: ReleaseState, observed: ObservedRelease | None) -> ReleaseAction:
    """The one small step that moves a release out of its state."""
    if state is ReleaseState.ABSENT:
        return ReleaseAction.INSTALL
    if state is ReleaseState.IN_SYNC:
        return ReleaseAction.NONE
    if state is ReleaseState.OUT_OF_SYNC:
        return ReleaseAction.UPGRADE
    assert observed is not None
    # A first revision that never deployed has nothing to roll back to.
    if observed.revision <= 1:
        return ReleaseAction.REINSTALL
    return ReleaseAction.ROLLBACK if state is ReleaseState.LOCKED else ReleaseAction.UPGRADE


def _release(
    component: Component,
    version: str,
    spec: Any,
    observed: Observed,
    sources: Sources,
    ready: set[str],
    enabled: set[str],
) -> PlannedRelease:
    assert component.chart is not None
    overlay, images = image_values(
        component.name,
        component.images,
        version,
        sources.image_mirrors,
        sources.image_pull_secrets,
    )
    values = merge(component.values(spec), overlay)
    desired = digest({"chart": component.chart.chart, "version": version, "values": values})
    seen = observed.releases.get(component.release_name)
    state = release_state(desired, seen)
    action = release_action(state, seen)
    waiting = [d for d in component.depends_on if d in enabled and d not in ready]
    # A first install waits for its dependencies, and so does an upgrade: a
    # stack moves from one tested combination to the next in dependency
    # order, since a dependent's new version may need its dependency's. A
    # failed or locked release is recovered at once, whatever its
    # dependencies do.
    if waiting and state in (ReleaseState.ABSENT, ReleaseState.OUT_OF_SYNC):
        action = ReleaseAction.WAIT
    return PlannedRelease(
        component=component.name,
        name=component.release_name,
        chart=component.chart.chart,
        repository=sources.repository(component),
        version=version,
        namespace=component.namespace,
        values=values,
        wait=component.wait,
        depends_on=[d for d in component.depends_on if d in enabled],
        digest=desired,
        state=state,
        action=action,
        waiting_for=waiting if action is ReleaseAction.WAIT else [],
        images=images,
    )


def manifests_digest(url: str) -> str:
    return digest({"url": url})


def _manifests(
    component: Component, version: str, observed: Observed, sources: Sources, managed: bool
) -> PlannedManifests:
    assert component.manifests is not None
    url = component.manifests.url(version, sources.manifests_base_url_for.get(component.name))
    want = manifests_digest(url)
    crds = [r.crd for r in component.requirements if isinstance(r, CRDServes)]
    applied = all(observed.applied.get(object_key(crd_stub(name))) == want for name in crds)
    return PlannedManifests(
        component=component.name,
        url=url,
        version=version,
        digest=want,
        crds=crds,
        action=ObjectAction.NONE if applied else ObjectAction.APPLY,
        teardown=component.role == "config" or managed,
    )


def crd_stub(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
    }


def _object(config: ConfigObject, component: str, observed: Observed) -> PlannedObject:
    body = stamp(config.body)
    key = object_key(body)
    missing = [str(api) for api in config.needs if not observed.serves(api)]
    hold, reason = config.hold, config.hold_reason
    if hold is None and missing:
        hold, reason = Hold.WAITING_FOR_API, f"waits for the target to serve {', '.join(missing)}"
    drift: list[str] = []
    if hold is not None:
        action = ObjectAction.HOLD
    elif observed.applied.get(key) != body["metadata"]["annotations"][DIGEST_ANNOTATION]:
        action = ObjectAction.APPLY
    else:
        # The digest says the source is unchanged; ownership says whether
        # someone changed the live object since (see plan.drift).
        owned = observed.owned.get(key)
        drift = drifted_fields(body, owned) if owned is not None else []
        action = ObjectAction.APPLY if drift else ObjectAction.NONE
    return PlannedObject(
        key=key,
        component=component,
        object=body,
        needs=[str(api) for api in config.needs],
        action=action,
        hold=hold,
        hold_reason=reason,
        teardown_wave=config.teardown_wave,
        drift=drift,
    )


def _component_plan(
    component: Component,
    releases: list[PlannedRelease],
    manifests: list[PlannedManifests],
    requirements: list[RequirementResult],
    managed: bool,
    unmet: bool,
    has_work: bool,
    spec_version: str,
    held_at: str | None = None,
    warning: str | None = None,
    pull: str | None = None,
) -> ComponentPlan:
    provided = component.role == "substrate" and not managed
    state, message = "Ready", ""
    if provided:
        state = "Unmet" if unmet else "Met"
        message = "; ".join(
            r.message
            for r in requirements
            if r.component == component.name and r.status is not RequirementStatus.MET
        )
    elif has_work:
        state, message = _work_state(component, releases, manifests)
    return ComponentPlan(
        name=component.name,
        # Provided applies to the substrate only; the product's own
        # components are always managed by it.
        mode=str(ComponentsMode.PROVIDED if provided else ComponentsMode.MANAGED),
        kind=component.kind,
        version=spec_version,
        held_at=held_at,
        namespace=component.namespace,
        chart=component.chart.chart if component.chart else None,
        # The repository the release really comes from (a mirror, if one is set).
        repository=next(
            (r.repository for r in releases if r.component == component.name),
            component.chart.repository if component.chart else None,
        ),
        state=state,
        message="; ".join(m for m in (message, warning, pull) if m),
    )


def _work_state(
    component: Component, releases: list[PlannedRelease], manifests: list[PlannedManifests]
) -> tuple[str, str]:
    """How a component with work left (see ``work_left``) says what it is."""
    if component.kind == "chart":
        release = next(r for r in releases if r.component == component.name)
        if release.action is ReleaseAction.WAIT:
            return "Waiting", f"waits for {', '.join(release.waiting_for)}"
        return "Pending", f"{release.action} ({release.state})"
    if component.kind == "manifests":
        planned = next(m for m in manifests if m.component == component.name)
        return "Pending", f"apply {planned.url}"
    return "Pending", "apply objects"


def _notes(stack: ServingStack) -> list[str]:
    spec = stack.spec
    notes: list[str] = []
    if not spec.gateway.hostname:
        notes.append(
            "No gateway.hostname: the gateway serves plain HTTP and carries no fleet traffic, "
            "since an InferenceGateway addresses a cluster by name."
        )
    withheld = https_listener_withheld(spec)
    if withheld:
        notes.append(f"Held back: {withheld}.")
    for obj in client_ca_objects(spec):
        if obj.hold_reason and obj.hold_reason != withheld:
            notes.append(f"Held back: {obj.hold_reason}.")
    # Accepted and applied, but worth a look before a client is refused.
    notes += client_ca_warnings(spec)
    if spec.components is ComponentsMode.PROVIDED:
        notes.append(
            "Provided mode: no substrate is installed or removed; the requirements below are "
            "checked on the target instead."
        )
    identity = spec.cloud_identity
    if identity is not None:
        kubeconfig = spec.kubeconfig_secret
        where = f"{identity.namespace}/{identity.name}" if identity.namespace else identity.name
        notes.append(
            f"Authenticates to the target as the {identity.type} identity in Secret {where} "
            f"(key {identity.key}); the kubeconfig in Secret {kubeconfig.name} gives only the "
            "server and CA, and its own credentials are never used."
        )
    return notes
