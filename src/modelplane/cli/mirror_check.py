"""The mirror preflight as ``modelplane diff`` runs it: what the mirror lacks of each change.

With ``--image-registry-mirror``, each release ``diff`` would install or
upgrade and each of the product's objects it would apply has its mirrored
images looked up, as the operator does before it acts
(``actions.mirror_lookup``, with the ``--image-pull-secret`` Secrets the
target holds). A missing image is what the operator would hold the change
for; a mirror that could not be asked is said, as ``--mirror-preflight=warn``
says it.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightkube import AsyncClient

from modelplane.actions.mirror_lookup import look_up
from modelplane.actions.registry import Registry
from modelplane.kube.address import IPNetwork
from modelplane.plan.diff import MirrorFinding
from modelplane.plan.mirror_images import (
    PreflightMode,
    object_lookups,
    pulling_namespaces,
    release_lookups,
    verdict,
)
from modelplane.plan.model import ObjectAction, Plan
from modelplane.plan.sources import Sources


async def mirror_findings(
    client: AsyncClient, p: Plan, sources: Sources, deny: tuple[IPNetwork, ...]
) -> list[MirrorFinding]:
    """What the mirror lacks of the plan's changes; none without mirror rules."""
    if not sources.image_mirrors:
        return []
    registry = Registry(deny=deny)
    secrets = tuple(sources.image_pull_secrets)
    out: list[MirrorFinding] = []

    async def ask(what: str, component: str, images: Sequence[str], spaces: list[str]) -> None:
        if not images:
            return
        lookups = await look_up(registry, images, client, secrets, spaces)
        said = verdict(lookups, PreflightMode.WARN, f"the change to {what}")
        if said.reason is not None:
            out.append(MirrorFinding(what=what, component=component, reason=said.reason,
                                     message=said.message, held=said.hold))  # fmt: skip

    for r in p.releases:
        spaces = pulling_namespaces([r.component], r.namespace)
        await ask(f"release {r.namespace}/{r.name}", r.component, release_lookups(r), spaces)
    for o in p.objects:
        if o.action is not ObjectAction.APPLY:
            continue
        images = object_lookups(o.object, p.images)
        components = sorted({u.component for u in p.images if u.mirrored in images})
        namespace = (o.object.get("metadata") or {}).get("namespace")
        await ask(o.shown, o.component, images, pulling_namespaces(components, namespace))
    return out
