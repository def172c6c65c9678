"""The operator's side of the conflict scan: a release or objects that would clash are not written.

Kept apart from the actions it guards: ``StackActions`` calls ``hold_back``
first thing in a release's install or upgrade, before its namespace, its
chart's CRDs or helm write anything, and ``hold_back_objects`` before a
component's objects are applied (a GatewayClass of the spec's name that
another controller holds). A conflict the spec does not adopt raises
``ConflictsFound``, which the component's guard records as its failure (an
event naming each object and its owner, and Ready's message), while the
other components go on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from modelplane.actions.conflict_scan import (
    ConflictsFound,
    gateway_class_conflicts,
    scan_release,
)
from modelplane.actions.helm import Helm
from modelplane.api.status_limits import LOG_MESSAGE
from modelplane.kube.client import Target
from modelplane.plan import Plan
from modelplane.plan.conflicts import Conflict, Ours, adoption, taken_over
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.untrusted import printable

# What a rollback writes is the release's own last revision: nothing new to clash.
SCANNED = frozenset({ReleaseAction.INSTALL, ReleaseAction.REINSTALL, ReleaseAction.UPGRADE})


def ours(p: Plan) -> Ours:
    """Every release of the product the plan names, as (name, namespace)."""
    return frozenset((r.name, r.namespace) for r in p.releases)


async def hold_back(
    helm: Helm,
    target: Target,
    release: PlannedRelease,
    kubeconfig: str,
    product: Ours,
    adopt: Collection[str] = (),
) -> list[Conflict]:
    """Raise ``ConflictsFound`` when ``release`` would clash with what the target runs.

    Returns what ``adopt`` (``spec.adopt``) takes over instead: objects of
    the release that exist and belong to no release of the product, which
    helm then takes with ``--take-ownership``. Anything else still holds
    the release back.
    """
    if release.action not in SCANNED:
        return []
    found = await scan_release(helm, target.client, release, kubeconfig, product)
    adopted, held = adoption(found, adopt)
    if held:
        raise ConflictsFound(f"release {release.name}", held)
    return adopted


def adopted_message(release: PlannedRelease, adopted: Sequence[Conflict]) -> str:
    """The ``Adopted`` event's words: each object taken over, and from whom."""
    count = f"{len(adopted)} object{'s' if len(adopted) != 1 else ''}"
    return printable(
        f"release {release.name} took over {count} (spec.adopt) {taken_over(adopted)}",
        LOG_MESSAGE,
    )


async def hold_back_objects(
    target: Target, component: str, bodies: Sequence[Mapping[str, Any]]
) -> None:
    """Raise ``ConflictsFound`` when ``component``'s objects would clash with what the target runs.

    A GatewayClass is read only when the plan applies one: once the
    product's own is in place, the plan has nothing of it to apply.
    """
    found = await gateway_class_conflicts(target.client, component, bodies)
    if found:
        raise ConflictsFound(f"the objects of {component}", found)
