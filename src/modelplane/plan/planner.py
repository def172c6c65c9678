"""``plan(stack, observed) -> Plan``: pure, no I/O and no clock.

Almost every rule of the product lives here, in the modules it calls
(``plan.releases``, ``plan.applied``, ``plan.findings``) or in the catalog;
the operator, the checker and ``render`` only call it.
"""

from __future__ import annotations

from collections.abc import Mapping

from modelplane.api.models import ServingStack
from modelplane.api.spec import client_ca_warnings
from modelplane.catalog.components import components_for
from modelplane.catalog.configuration import (
    ConfigObject,
    client_ca_objects,
    configuration_for,
    https_listener_withheld,
)
from modelplane.catalog.types import Component
from modelplane.pins import ComponentsMode
from modelplane.plan import findings, pull_secrets
from modelplane.plan.applied import planned_manifests, planned_object
from modelplane.plan.gateway import (
    GATEWAY_NOT_PROGRAMMED,
    not_programmed,
    published_address,
    published_ca,
)
from modelplane.plan.images import ImageUse, product_images, takes_pull_secrets
from modelplane.plan.model import (
    CONFIGURATION,
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
    Work,
    work_left,
)
from modelplane.plan.node_agents import agent_daemon_sets, roll_work
from modelplane.plan.observed import Observed
from modelplane.plan.release_health import ReleaseReport, release_report
from modelplane.plan.releases import planned_release
from modelplane.plan.sources import Sources


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
        findings.evaluate(component.name, requirement, observed)
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
            release = planned_release(component, version, spec, observed, sources, ready, enabled)
            releases.append(release)
            if release.state is ReleaseState.IN_SYNC:
                ready.add(component.name)
        elif component.kind == "manifests":
            planned = planned_manifests(component, version, observed, sources, managed)
            manifests.append(planned)
            if planned.action is ObjectAction.NONE:
                ready.add(component.name)
        else:
            assert component.objects is not None
            planned_objects = [
                planned_object(ConfigObject(body), component.name, observed)
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
    objects += [
        planned_object(o, CONFIGURATION, observed) for o in configuration_for(spec, product)
    ]
    work = work_left(releases, manifests, objects)
    if managed:
        # A node agent upgraded is not done until every node runs it.
        in_sync = {r.name for r in releases if r.state is ReleaseState.IN_SYNC}
        seen = agent_daemon_sets(components, in_sync, observed.release_workloads)
        work += roll_work(seen)
    missing = _missing_pull_secrets(components, releases, objects, product_uses, observed, sources)
    missing_by_component: dict[str, list[pull_secrets.MissingPullSecret]] = {}
    for m in missing:
        missing_by_component.setdefault(m.component, []).append(m)
    busy = {w.component for w in work}

    version_warnings = findings.version_warnings(components, spec)
    out_of_range = {w.component: w.message for w in version_warnings}
    # Values a chart does not read are left unset (plan.chart_values): the
    # notes and the component's message say what that means.
    refused = findings.refused_values(components, releases)
    component_plans = [
        _component_plan(
            c,
            releases,
            manifests,
            requirements,
            managed,
            c.name in unmet_by_component,
            c.name in busy,
            work,
            spec_version=c.version_for(spec),
            held_at=held.get(c.name),
            warning=out_of_range.get(c.name),
            refused=refused.get(c.name),
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
        findings.advisories(components, spec, observed)
        + findings.mirror_advisories(components, managed, observed, sources)
        + findings.served_advisories(managed, observed)
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
        notes=_notes(stack)
        + [w.message for w in version_warnings]
        + [f"{message}." for message in refused.values()],
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
        gpus=findings.gpus(components, advisories, observed),
        # Provided mode reports it as an advisory instead (findings.served_advisories).
        not_serving=(
            NotServing(reason=GATEWAY_NOT_PROGRAMMED, message=gateway_problem)
            if managed and gateway_problem is not None
            else None
        ),
        health=report.health,
        release_drift=report.drift,
    )


def _release_report(
    releases: list[PlannedRelease], observed: Observed, sources: Sources
) -> ReleaseReport:
    """Health and drift of the releases that are in sync; one being installed is not judged.

    A release whose storage is not the operator's is Degraded by that alone,
    whatever its state: nothing of it was read (plan.release_trust).
    """
    tampered = [t.health() for t in observed.tampered_releases]
    if observed.observed_at is None:
        return ReleaseReport(health=tampered)
    in_sync = {r.name for r in releases if r.state is ReleaseState.IN_SYNC}
    workloads = [w for w in observed.release_workloads if w.release in in_sync]
    unjudged = [u for u in observed.unjudged_releases if u.release in in_sync]
    refused = [r for r in observed.refused_revisions if r.release in in_sync]
    report = release_report(
        workloads,
        observed.nodes,
        observed.observed_at,
        sources.release_drift,
        unjudged=unjudged,
        refused=refused,
        objects=[o for o in observed.release_objects if o.release in in_sync],
    )
    return report.model_copy(update={"health": [*report.health, *tampered]})


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
    refused = {r.component: r.refused for r in releases}
    uses: dict[str, list[ImageUse]] = {}
    for use in [u for r in releases for u in r.images] + product_uses:
        uses.setdefault(use.component, []).append(use)
    wanted = pull_secrets.needed(
        [
            c
            for c in components
            if (c.name in installed or c.role == "config")
            and takes_pull_secrets(uses.get(c.name, []), sources.image_mirrors)
            # A chart that reads none of its pull-secret paths names no Secret.
            and not pull_secrets.pulls_without(c.images.pull_secrets, refused.get(c.name, []))
        ],
        # Held ones too: an object waiting for its API runs its pods once it is served.
        [(o.component, o.object) for o in objects],
    )
    return pull_secrets.missing(wanted, sources.image_pull_secrets, observed.pull_secrets)


def _component_plan(
    component: Component,
    releases: list[PlannedRelease],
    manifests: list[PlannedManifests],
    requirements: list[RequirementResult],
    managed: bool,
    unmet: bool,
    has_work: bool,
    work: list[Work],
    spec_version: str,
    held_at: str | None = None,
    warning: str | None = None,
    refused: str | None = None,
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
        state, message = _work_state(component, releases, manifests, work)
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
        message="; ".join(m for m in (message, warning, refused, pull) if m),
    )


def _work_state(
    component: Component,
    releases: list[PlannedRelease],
    manifests: list[PlannedManifests],
    work: list[Work],
) -> tuple[str, str]:
    """How a component with work left (see ``work_left``) says what it is."""
    if component.kind == "chart":
        release = next(r for r in releases if r.component == component.name)
        if release.action is ReleaseAction.WAIT:
            return "Waiting", f"waits for {', '.join(release.waiting_for)}"
        roll = next((w for w in work if w.component == component.name and w.roll), None)
        if release.action is ReleaseAction.NONE and roll is not None:
            return "Rolling", roll.what
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
