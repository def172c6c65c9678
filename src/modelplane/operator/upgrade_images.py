"""Before a stack's upgrade takes its rollout turn: does the mirror hold the images it would run?

The release preflight (operator.mirror_preflight) asks before each helm
run; for an upgrade that is too late: the stack has its slot, its first
release fails, and its failure pauses the rollout at that cluster. So a
stack about to be let go (``Rollout.needs_mirror``) plans its spec offline
at its desired versions, and asks the mirror about the images of the
components its upgrade moves, with the pull Secrets as its target holds
them. What the answer does to the turn is ``plan.rollout.with_mirror``'s.
One stack's say changes only when its message does: an event then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from modelplane.actions.claim import Emit
from modelplane.api.models import ServingStack
from modelplane.kube.answers import describe_error
from modelplane.kube.client import Target
from modelplane.kube.errors import ErrorKind, classify
from modelplane.operator.announced import Announced
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.rollout import Canaries, MirrorAnswer, Rollout, member_of
from modelplane.operator.stack_text import without_status
from modelplane.plan import plan
from modelplane.plan.mirror_images import Verdict, pulling_namespaces, upgrade_lookups
from modelplane.plan.sources import Sources
from modelplane.vocabulary import BlockedReason, EventReason

log = logging.getLogger("modelplane.operator")

# A hold's event, by the mirror verdict's reason.
_EVENTS = {
    BlockedReason.IMAGE_NOT_IN_MIRROR: EventReason.IMAGE_NOT_IN_MIRROR,
    BlockedReason.MIRROR_UNREACHABLE: EventReason.MIRROR_UNREACHABLE,
}


def images_of_upgrade(
    body: Mapping[str, Any], rollout: Rollout, sources: Sources
) -> tuple[str, ...]:
    """The mirrored images the stack's upgrade would run, planned offline at its pins."""
    stack = ServingStack.model_validate(without_status(dict(body)))
    upgrading = {name for name, _ in member_of(body, rollout.policy).wants}
    return upgrade_lookups(plan(stack, None, sources).images, upgrading)


@dataclass
class UpgradeImages:
    """One stack's asking of the mirror before its upgrade's turn; kept by its daemon."""

    mirror: MirrorPreflight
    sources: Sources
    emit: Emit
    label: str = ""
    # What was last said of it: a hold is said once, and again when it changes.
    said: Announced = field(default_factory=Announced)

    async def ask(
        self,
        rollout: Rollout,
        body: Mapping[str, Any],
        now: datetime,
        canaries: Canaries | None,
        connect: Callable[[], Awaitable[Target]],
    ) -> MirrorAnswer | None:
        """The mirror's say on the upgrade's images, when its turn needs it; else None."""
        if not rollout.needs_mirror(body, now, canaries):
            return None
        try:
            # In a worker thread, as the reconciler plans: a spec's ConfigMaps may be large.
            images = await asyncio.to_thread(images_of_upgrade, body, rollout, self.sources)
        except ValidationError:
            return MirrorAnswer()  # Ready says what is wrong with the spec
        if not images:
            return MirrorAnswer()
        try:
            target = await connect()
            namespaces = pulling_namespaces(
                sorted({u for u, _ in member_of(body, rollout.policy).wants})
            )
            said = await self.mirror.judge(images, namespaces, target, "the upgrade")
        except Exception as err:  # the turn waits, saying why; never a crashed daemon
            if classify(err).kind is ErrorKind.UNEXPECTED:
                log.exception("ServingStack %s: the upgrade's images not looked up", self.label)
            return MirrorAnswer(error=describe_error(err))
        self._report(said)
        return MirrorAnswer(said)

    def _report(self, said: Verdict) -> None:
        """A Warning event when what holds the upgrade (or lets it go unchecked) changes."""
        if said.reason is None:
            self.said.new(())
            return
        message = f"before the upgrade's turn: {said.message}"
        for new in self.said.new((message,)):
            self.emit("Warning", _EVENTS[said.reason], new)
            log.warning("ServingStack %s: %s", self.label, new)
