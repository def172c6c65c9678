"""Watches on a target that wake a ServingStack's reconcile, and feed its resyncs.

The things that matter arrive by themselves on the target: a CRD becomes
served after an install, the gateway controller assigns the Gateway an
address, trust-manager writes the CA ConfigMap, someone edits an object the
operator owns. Polling for them would either be slow or cost requests; a
watch costs one long request each. The same watches keep a copy of what
``observe`` reads (``observe.watches.WatchCache``), so a resync re-plans from it instead
of reading the target again.
"""

from __future__ import annotations

from collections.abc import Callable

from modelplane.kube.client import Target
from modelplane.kube.reflector import WATCH_TIMEOUT_SECONDS
from modelplane.observe.state import Wanted
from modelplane.observe.watches import WatchCache


class TargetWatcher:
    """Runs the watches for one target and spec until closed; calls ``wake`` on change.

    The watches use the ``Target`` they are given and leave it open: its
    owner (the stack's reconciler) shares it with the reconciles, and
    closes it after the watcher.
    """

    def __init__(
        self,
        target: Target,
        want: Wanted,
        wake: Callable[[], None],
        *,
        label: str = "",
        watch_timeout: float = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.target = target
        self.want = want
        # Each LIST wakes the stack too: the reconcile observed the target
        # before the watches were armed (or re-armed after an outage or a
        # 410), and a change made in between is folded into the LIST with
        # no event to follow it.
        self.cache = WatchCache(target.http, want, wake, label=label, watch_timeout=watch_timeout)

    def start(self) -> None:
        self.cache.start()

    async def close(self) -> None:
        await self.cache.close()
