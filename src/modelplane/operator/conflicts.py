"""The operator's side of the conflict scan: a release that would clash is not started.

Kept apart from the actions it guards: ``StackActions`` calls ``hold_back``
first thing in a release's install or upgrade, before its namespace, its
chart's CRDs or helm write anything. A conflict the spec does not adopt
raises ``ConflictsFound``, which the component's guard records as its
failure (an event naming each object and its owner, and Ready's message),
while the other components go on.
"""

from __future__ import annotations

from modelplane.actions.conflict_scan import ConflictsFound, scan_release
from modelplane.actions.helm import Helm
from modelplane.kube.client import Target
from modelplane.plan import Plan
from modelplane.plan.conflicts import Ours
from modelplane.plan.model import PlannedRelease, ReleaseAction

# What a rollback writes is the release's own last revision: nothing new to clash.
SCANNED = frozenset({ReleaseAction.INSTALL, ReleaseAction.REINSTALL, ReleaseAction.UPGRADE})


def ours(p: Plan) -> Ours:
    """Every release of the product the plan names, as (name, namespace)."""
    return frozenset((r.name, r.namespace) for r in p.releases)


async def hold_back(
    helm: Helm, target: Target, release: PlannedRelease, kubeconfig: str, product: Ours
) -> None:
    """Raise ``ConflictsFound`` when ``release`` would clash with what the target runs."""
    if release.action not in SCANNED:
        return
    found = await scan_release(helm, target.client, release, kubeconfig, product)
    if found:
        raise ConflictsFound(release, found)
