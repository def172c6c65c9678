"""Watches on a target that wake a ServingStack's reconcile within seconds.

The things that matter arrive by themselves on the target: a CRD becomes
served after an install, the gateway controller assigns the Gateway an
address, trust-manager writes the CA ConfigMap. Polling for them would
either be slow or cost requests; a watch costs one long request each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap

from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, GATEWAYS, NS
from modelplane.target.resources import resource

log = logging.getLogger("modelplane.operator.watch")


class TargetWatcher:
    """Runs the watches for one target until closed; calls ``wake`` on change."""

    def __init__(self, client: AsyncClient, wake: Callable[[], None]) -> None:
        self._client = client
        self._wake = wake
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        gateway = resource(GATEWAYS.group_version, "Gateway", True)
        self._spawn(
            "crds",
            lambda rv: self._client.watch(CustomResourceDefinition, resource_version=rv),
            CustomResourceDefinition,
            {},
        )
        self._spawn(
            "gateway",
            lambda rv: self._client.watch(
                gateway, namespace=NS, fields={"metadata.name": GATEWAY_NAME}, resource_version=rv
            ),
            gateway,
            {"namespace": NS, "fields": {"metadata.name": GATEWAY_NAME}},
        )
        self._spawn(
            "ca",
            lambda rv: self._client.watch(
                ConfigMap, namespace=NS, fields={"metadata.name": CLUSTER_CA}, resource_version=rv
            ),
            ConfigMap,
            {"namespace": NS, "fields": {"metadata.name": CLUSTER_CA}},
        )

    def _spawn(
        self, name: str, watch: Callable[[str | None], Any], res: Any, list_kwargs: dict[str, Any]
    ) -> None:
        self._tasks.append(asyncio.create_task(self._run(name, watch, res, list_kwargs)))

    async def _run(
        self, name: str, watch: Callable[[str | None], Any], res: Any, list_kwargs: dict[str, Any]
    ) -> None:
        delay = 1.0
        while True:
            try:
                # Start from the list's resourceVersion so that what exists
                # already does not count as a change.
                listing = self._client.list(res, **list_kwargs)
                async for _ in listing:
                    pass
                rv = getattr(listing, "resourceVersion", None)
                async for _event in watch(rv):
                    delay = 1.0
                    self._wake()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                # 404: the API (Gateway) is not served yet; the next CRD event
                # or resync brings it.
                log.debug("watch %s: %s", name, err.status.message)
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
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


WakeFn = Callable[[], Awaitable[None]]
