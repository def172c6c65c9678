"""Settling drift that ownership alone cannot: would a restore change the live object?

``plan.release_health.drift_candidates`` names the fields a release's
manifest sets that neither Helm nor the operator owns. Most are hand edits;
some the API server never stored: zero values its typed objects omit (a
chart's ``hostNetwork: false``, ``value: ""``) and fields of a disabled
feature gate. Only the API server knows which, so for each object with
candidates it is asked, by a dry run of the restore
(``actions.restore.restore_changes``), and its answer set on the object as
``apply_changes`` for the plan.

An answer holds while the live object and the manifest do: it is kept per
object, manifest digest and live resourceVersion, for the objects of the
latest round only. At most ``MAX_PER_ROUND`` objects are asked a round
(each is two requests); one not asked yet keeps ``apply_changes`` None
and is judged by ownership, as before, until it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from modelplane.actions.restore import restore_changes
from modelplane.kube.answers import describe_error
from modelplane.kube.client import TargetError
from modelplane.kube.resources import KindNotServed
from modelplane.plan.release_health import ReleaseObject, ReleaseWorkload, drift_candidates
from modelplane.wire import digest

log = logging.getLogger("modelplane.operator")

# Objects asked a round. The catalog's real charts give about six (their
# zero-valued fields), asked once each and kept.
MAX_PER_ROUND = 32

Item = TypeVar("Item", ReleaseWorkload, ReleaseObject)
_Key = tuple[str, str, str]


def _candidates(item: ReleaseWorkload | ReleaseObject) -> bool:
    if item.owned is None:
        return False
    if isinstance(item, ReleaseWorkload):
        if item.live is None:
            return False
        return bool(drift_candidates(item.desired, item.owned, autoscaled=item.autoscaled))
    if not item.present or item.data_owned_elsewhere:
        return False
    return bool(drift_candidates(item.desired, item.owned))


def _shown(item: ReleaseWorkload | ReleaseObject) -> str:
    return item.manifest.key.shown if isinstance(item, ReleaseWorkload) else item.shown


@dataclass
class DryRuns:
    """The target's answers, per object, to "would a restore change you?"."""

    known: dict[_Key, bool] = field(default_factory=dict)

    async def settle(
        self,
        client: AsyncClient,
        workloads: Sequence[ReleaseWorkload],
        objects: Sequence[ReleaseObject],
    ) -> tuple[list[ReleaseWorkload], list[ReleaseObject]]:
        """``workloads`` and ``objects``, each with drift candidates given ``apply_changes``."""
        kept: dict[_Key, bool] = {}
        budget = [MAX_PER_ROUND]
        settled_workloads = [await self._settle(client, w, kept, budget) for w in workloads]
        settled_objects = [await self._settle(client, o, kept, budget) for o in objects]
        self.known = kept
        return settled_workloads, settled_objects

    async def _settle(
        self, client: AsyncClient, item: Item, kept: dict[_Key, bool], budget: list[int]
    ) -> Item:
        if not _candidates(item):
            return item
        key = (_shown(item), digest(item.desired), item.version)
        answer = self.known.get(key)
        if answer is None and budget[0] > 0:
            budget[0] -= 1
            answer = await _ask(client, item)
        if answer is None:
            return item
        kept[key] = answer
        return item.model_copy(update={"apply_changes": answer})


async def _ask(client: AsyncClient, item: ReleaseWorkload | ReleaseObject) -> bool | None:
    """The target's answer; None when it gave none (the object gone, the dry run refused)."""
    try:
        return await restore_changes(client, item.desired)
    except (ApiError, TargetError, KindNotServed, httpx2.HTTPError) as err:
        # A webhook that refuses dry runs, a kind no longer served: drift is
        # then judged by ownership alone, as it was before this was asked.
        log.info("no dry run of %s: %s", _shown(item), describe_error(err))
        return None
