"""A chart's release: the one state Helm's storage puts it in, and the step out of it.

As Flux's helm-controller does, a pure function names the state
(``release_state``) and another the one small action it takes
(``release_action``); ``planned_release`` adds the values, the images and
the wait for dependencies.
"""

from __future__ import annotations

from typing import Any

from modelplane.catalog.types import Component
from modelplane.plan.chart_values import readable
from modelplane.plan.images import image_values, merge
from modelplane.plan.model import PlannedRelease, ReleaseAction, ReleaseState
from modelplane.plan.observed import Observed, ObservedRelease
from modelplane.plan.sources import Sources
from modelplane.wire import digest

_LOCKED = {"pending-install", "pending-upgrade", "pending-rollback", "uninstalling"}


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


def planned_release(
    component: Component,
    version: str,
    spec: Any,
    observed: Observed,
    sources: Sources,
    ready: set[str],
    enabled: set[str],
) -> PlannedRelease:
    assert component.chart is not None
    # What the chart reads at this version; unknown (None) at a version the
    # catalog has no record of, and then nothing is refused.
    reads = component.chart.reads_at(version)
    images = image_values(
        component.name,
        component.images,
        version,
        sources.image_mirrors,
        sources.image_pull_secrets,
        reads,
    )
    fixed, refused = readable(component.values(spec), reads)
    values = merge(fixed, images.values)
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
    # Storage the operator did not write is no base for helm: an upgrade
    # would delete what it lists, an install would fail on it (release_trust).
    if any(t.release == component.release_name for t in observed.tampered_releases):
        action = ReleaseAction.NONE
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
        images=images.uses,
        refused=[*refused, *images.refused],
    )
