"""Prometheus metrics of the operator, and its health probes on the same port.

``/healthz`` and ``/readyz`` are served here, beside ``/metrics``, rather than
by kopf's liveness endpoint: kopf serves one path, answers only once startup
is over, and cannot tell alive from ready. Both are answered from the
operator's event loop, so a loop that is wedged fails liveness too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

log = logging.getLogger("modelplane.operator")

RECONCILES = Counter(
    "modelplane_reconciles_total", "Reconciles of ServingStacks, by result.", ["result"]
)
RECONCILE_SECONDS = Histogram("modelplane_reconcile_seconds", "Time one reconcile takes.")
STATUS_WRITES = Counter("modelplane_status_writes_total", "Status patches written to the hub.")
TRACKED = Gauge(
    "modelplane_tracked_stacks",
    "ServingStacks the operator keeps state for, by kind of state (wakers, generations).",
    ["what"],
)
TARGETS_OPEN = Gauge(
    "modelplane_targets_open", "Connections to target clusters opened and not yet closed."
)

DEFAULT_ADDRESS = "0.0.0.0"  # a Prometheus in another pod must reach it


def app(ready: Callable[[], str | None]) -> web.Application:
    """``/metrics``, ``/healthz`` and ``/readyz``.

    ``ready`` returns None when the operator is ready, else what it waits for.
    """

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        waiting = ready()
        if waiting is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"not ready: {waiting}\n")

    application = web.Application()
    application.add_routes(
        [
            web.get("/metrics", metrics),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
        ]
    )
    return application


async def serve(address: str, port: int, ready: Callable[[], str | None]) -> web.AppRunner:
    """Start serving on ``address:port``; the caller cleans the runner up."""
    runner = web.AppRunner(app(ready), handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)", address, port)
    return runner
