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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from modelplane.actions.claim import Emit
from modelplane.actions.registry import Credentials, Registry, config_of, credentials_for
from modelplane.catalog.components import BY_NAME
from modelplane.kube.client import Target
from modelplane.operator.options import OperatorOptions
from modelplane.plan.mirror_images import (
    PreflightMode,
    Verdict,
    raise_for,
    release_lookups,
    verdict,
)
from modelplane.plan.model import PlannedRelease
from modelplane.plan.pull_secrets import component_namespaces
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
        images = release_lookups(release)
        if not images:
            return
        namespaces = pulling_namespaces([release.component], release.namespace)
        said = await self.judge(images, namespaces, target, "the release")
        raise_for(said)
        if said.reason is BlockedReason.MIRROR_UNREACHABLE:
            # --mirror-preflight=warn: installed unchecked, and said each time.
            message = f"release {release.name}: {said.message}"
            emit("Warning", EventReason.MIRROR_UNREACHABLE, message)
            log.warning("%s", message)

    async def judge(
        self, images: Sequence[str], namespaces: Sequence[str], target: Target, what: str
    ) -> Verdict:
        """What the mirror's answers about ``images`` mean, for ``what`` (``the release``).

        With the pull Secrets' credentials as read in ``namespaces`` of the target.
        """
        configs = await self._configs(target, namespaces)
        lookups = await self.registry.lookup_all(images, lambda r, n: _first(configs, r, n))
        return verdict(lookups, self.mode, what)

    async def _configs(self, target: Target, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """The pull Secrets' configs, from the namespaces the pods that pull read them in.

        A Secret that is not there (or not readable) gives nothing: the
        lookup goes without credentials, and a mirror that wants some says
        so. Only the configs are kept, for this check; never logged.
        """
        out: list[dict[str, Any]] = []
        for namespace in namespaces:
            for name in self.pull_secrets:
                config = await _read_config(target, name, namespace)
                if config is not None:
                    out.append(config)
        return out


def pulling_namespaces(components: Iterable[str], namespace: str | None = None) -> list[str]:
    """Where the pods of ``components`` read their pull Secrets: ``namespace`` first."""
    spaces = [namespace] if namespace else []
    for name in components:
        component = BY_NAME.get(name)
        if component is not None:
            spaces += [ns for ns in component_namespaces(component) if ns not in spaces]
    return spaces


def _first(configs: list[dict[str, Any]], registry: str, name: str) -> Credentials | None:
    for config in configs:
        found = credentials_for(config, registry, name)
        if found is not None:
            return found
    return None


async def _read_config(target: Target, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        secret = await target.client.get(Secret, name, namespace=namespace)
    except ApiError as err:
        if err.status.code not in (403, 404):
            raise
        return None
    return config_of(secret.data or {})
