"""Watches on a target that wake a ServingStack's reconcile within seconds.

The things that matter arrive by themselves on the target: a CRD becomes
served after an install, the gateway controller assigns the Gateway an
address, trust-manager writes the CA ConfigMap. Polling for them would
either be slow or cost requests; a watch costs one long request each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap

from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, GATEWAYS, NS
from modelplane.target.connect import Target
from modelplane.target.resources import resource
from modelplane.wire import SETTLE_DELAY, is_settling

log = logging.getLogger("modelplane.operator.watch")


class TargetWatcher:
    """Runs the watches for one target until closed; calls ``wake`` on change.

    The watcher owns the ``Target`` it is given: ``close`` stops the watches
    and closes the target's connections.
    """

    def __init__(self, target: Target, wake: Callable[[], None]) -> None:
        self._target = target
        self._client = target.client
        self._wake = wake
        self._tasks: list[asyncio.Task[None]] = []
        # Set on every CRD event: a watch whose API is not served yet waits
        # for it instead of polling.
        self._crds_changed = asyncio.Event()

    def start(self) -> None:
        only_ours = {"namespace": NS}
        self._spawn("crds", CustomResourceDefinition, {})
        self._spawn(
            "gateway",
            resource(GATEWAYS.group_version, "Gateway", True),
            {**only_ours, "fields": {"metadata.name": GATEWAY_NAME}},
        )
        self._spawn("ca", ConfigMap, {**only_ours, "fields": {"metadata.name": CLUSTER_CA}})

    def _spawn(self, name: str, res: Any, selector: dict[str, Any]) -> None:
        self._tasks.append(asyncio.create_task(self._run(name, res, selector)))

    async def _run(self, name: str, res: Any, selector: dict[str, Any]) -> None:
        delay = 1.0
        while True:
            self._crds_changed.clear()
            try:
                # Start from the list's resourceVersion so that what exists
                # already does not count as a change.
                listing = self._client.list(res, **selector)
                async for _ in listing:
                    pass
                rv = getattr(listing, "resourceVersion", None)
                # The reconcile observed the target before this LIST (the
                # watches are armed after it, and re-armed after a 404, an
                # error or a 410): a change made in between is folded into
                # the listing and no event follows it. One wake per LIST makes
                # a reconcile look again instead of leaving it to the resync.
                self._wake()
                async for _event in self._client.watch(res, resource_version=rv, **selector):
                    delay = 1.0
                    if name == "crds":
                        self._crds_changed.set()
                    self._wake()
            except asyncio.CancelledError:
                raise
            except (ApiError, httpx2.HTTPStatusError) as err:
                code = err.status.code if isinstance(err, ApiError) else err.response.status_code
                log.debug("watch %s: HTTP %s", name, code)
                if isinstance(err, ApiError) and is_settling(err):
                    # A new CRD's storage is still starting: seconds, not minutes.
                    await asyncio.sleep(SETTLE_DELAY)
                    continue
                if code == 404:
                    # The API (the Gateway's) is not served yet: try again when
                    # a CRD changes (or after half a minute), not on a short timer.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._crds_changed.wait(), 30.0)
                    delay = 1.0
                    continue
            except Exception as err:  # the target may be unreachable for a while
                log.debug("watch %s: %s", name, type(err).__name__)
                # A broken watch may mean the target went away: let the
                # reconcile find out and say so, rather than wait for resync.
                self._wake()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        try:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._tasks.clear()
            await self._target.close()
