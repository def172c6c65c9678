"""The mirror preflight, carried out before a release's helm run: are its images in the mirror?

With ``--image-registry-mirror``, each image a release is about to run is
looked up in the mirror (``actions.registry``) with the credentials of the
``--image-pull-secret`` Secrets, read from the target where the release's
pods would read them. What the answers mean is ``plan.mirror_images``'s: a
missing image raises, before anything is written, so the component's guard
(``ComponentFailures``) records it with its own reason and an event, backs
it off and goes on with the other components; an unreachable mirror does
so under ``--mirror-preflight=require``, and is said in an event and let
go under ``warn``.

One ``MirrorPreflight`` serves every stack of the process: its cache of
answers is what keeps a fleet's cost at about one lookup per image.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from modelplane.actions.claim import Emit
from modelplane.actions.mirror_lookup import look_up
from modelplane.actions.registry import Registry
from modelplane.kube.client import Target
from modelplane.operator.options import OperatorOptions
from modelplane.plan.mirror_images import (
    PreflightMode,
    Verdict,
    pulling_namespaces,
    raise_for,
    release_lookups,
    verdict,
)
from modelplane.plan.model import PlannedRelease
from modelplane.vocabulary import BlockedReason, EventReason

log = logging.getLogger("modelplane.operator")


@dataclass
class MirrorPreflight:
    """Looks a release's mirrored images up before it runs; shared by the stacks of a process."""

    mode: PreflightMode
    pull_secrets: tuple[str, ...]
    registry: Registry = field(default_factory=Registry)

    @classmethod
    def of(cls, options: OperatorOptions) -> MirrorPreflight | None:
        """The preflight the options ask for; None without mirror rules or with it off."""
        if not options.image_mirrors or options.mirror_preflight is PreflightMode.OFF:
            return None
        return cls(
            options.mirror_preflight,
            options.image_pull_secrets,
            Registry(deny=options.deny_target_cidrs),
        )

    async def check(self, release: PlannedRelease, target: Target, emit: Emit) -> None:
        """Raise when the release may not run for its images; say it when it runs unchecked."""
        namespaces = pulling_namespaces([release.component], release.namespace)
        await self.check_images(
            release_lookups(release), namespaces, target, emit,
            f"release {release.name}", "the release",
        )  # fmt: skip

    async def check_images(
        self,
        images: Sequence[str],
        namespaces: Sequence[str],
        target: Target,
        emit: Emit,
        name: str,
        what: str,
    ) -> None:
        """Raise when ``images`` hold what runs them; say it when it runs unchecked.

        ``name`` says what runs them in the event (``release x``), ``what`` in
        the verdict's message (``the release``).
        """
        if not images:
            return
        said = await self.judge(images, namespaces, target, what)
        raise_for(said)
        if said.reason is BlockedReason.MIRROR_UNREACHABLE:
            # --mirror-preflight=warn: installed unchecked, and said each time.
            message = f"{name}: {said.message}"
            emit("Warning", EventReason.MIRROR_UNREACHABLE, message)
            log.warning("%s", message)

    async def judge(
        self, images: Sequence[str], namespaces: Sequence[str], target: Target, what: str
    ) -> Verdict:
        """What the mirror's answers about ``images`` mean, for ``what`` (``the release``).

        With the pull Secrets' credentials as read in ``namespaces`` of the target.
        """
        lookups = await look_up(self.registry, images, target.client, self.pull_secrets, namespaces)
        return verdict(lookups, self.mode, what)
