"""Prometheus metrics of the operator, and its health probes.

``/metrics`` is served over HTTPS to callers the hub authorizes
(``metrics_auth``): it names every team's stacks. ``/healthz`` and
``/readyz`` are served on a port of their own, in plain HTTP and to anyone,
since the kubelet probes with no token and they tell nothing of any stack.
They are served here rather than by kopf's liveness endpoint: kopf serves
one path, answers only once startup is over, and cannot tell alive from
ready. Both are answered from the operator's event loop, so a loop that is
wedged fails liveness too.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from pydantic import BaseModel, ConfigDict

from modelplane.kube import reflector
from modelplane.operator.metrics_auth import Reviewer, verdict
from modelplane.operator.stack_metrics import StackSeriesCollector, key_of
from modelplane.operator.status import Outcome

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
TARGET_READS_WAITING = Gauge(
    "modelplane_target_reads_waiting",
    "Reconciles waiting for one of the --max-concurrent-target-reads slots.",
)
TARGETS_OPEN = Gauge(
    "modelplane_targets_open", "Connections to target clusters opened and not yet closed."
)
# ``operator.loop_lag``: how late the event loop woke a timer due every second.
EVENT_LOOP_LAG = Histogram(
    "modelplane_event_loop_lag_seconds",
    "How late the operator's event loop ran a timer due every second.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

HELM_ACTION_SECONDS = Histogram(
    "modelplane_helm_action_seconds",
    "Time one helm action on a target takes, by component, action and outcome.",
    ["component", "action", "outcome"],
    # Helm waits for workloads: seconds to the --helm-timeout's minutes.
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200),
)
# Per-stack series, by namespace and name; a stack's go with it (``SERIES.forget``).
SERIES = StackSeriesCollector(watch_restarts=lambda label: reflector.RESTARTS.get(label, 0))
REGISTRY.register(SERIES)


def record_reconcile(
    label: str, status: Mapping[str, Any], outcome: Outcome, *, succeeded: bool
) -> None:
    """The stack's series after one reconcile: ``status`` is what it wrote (or tried to)."""
    key = key_of(label)
    if key is None:
        return
    plan = outcome.plan

    def in_place(component: str) -> bool:
        # Its desired version is what runs only once nothing is left to do for it.
        return (
            plan is not None
            and component not in outcome.failures
            and component not in plan.components_with_work
        )

    gpus = plan.target.gpus if plan is not None and plan.target is not None else None
    SERIES.reconciled(key, status, succeeded=succeeded, in_place=in_place, gpus=gpus)


def record_helm_action(
    label: str, component: str, action: str, outcome: str, seconds: float
) -> None:
    HELM_ACTION_SECONDS.labels(component=component, action=action, outcome=outcome).observe(seconds)
    key = key_of(label)
    if key is not None:
        SERIES.helm_action(key, component, action, outcome)


def record_drift_corrected(label: str, component: str) -> None:
    key = key_of(label)
    if key is not None:
        SERIES.drift_corrected(key, component)


def forget_stack(label: str) -> None:
    """The stack left this operator (deleted, moved to another shard): its series go."""
    key = key_of(label)
    if key is not None:
        SERIES.forget(key)
    reflector.RESTARTS.pop(label, None)


DEFAULT_ADDRESS = "0.0.0.0"  # a Prometheus in another pod must reach it


class Readiness(BaseModel):
    """What ``/readyz`` answers: its status code follows ``ready``, its body is ``detail``.

    A standby is ready: it is what a rolling update waits for before it
    stops the leader, and what takes over when the leader goes. Were it not
    ready, a rollout of two replicas would never get past the first.
    """

    model_config = ConfigDict(frozen=True)

    ready: bool
    # "ok", "standby: ...", or what the operator waits for.
    detail: str


READY = Readiness(ready=True, detail="ok")


def probes_app(ready: Callable[[], Readiness]) -> web.Application:
    """``/healthz`` and ``/readyz``; ``ready`` is asked on every probe."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        now = ready()
        if now.ready:
            return web.Response(text=f"{now.detail}\n")
        return web.Response(status=503, text=f"not ready: {now.detail}\n")

    application = web.Application()
    application.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return application


def metrics_app(reviewer: Reviewer) -> web.Application:
    """``/metrics``, for a caller whose token ``reviewer`` finds allowed to get it."""

    async def metrics(request: web.Request) -> web.Response:
        answer = await verdict(request.headers.get("Authorization"), reviewer)
        if answer.status != 200:
            # A refusal says why, never who the token was.
            headers = {"WWW-Authenticate": "Bearer"} if answer.status == 401 else None
            return web.Response(status=answer.status, text=f"{answer.reason}\n", headers=headers)
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    application = web.Application()
    application.add_routes([web.get("/metrics", metrics)])
    return application


async def serve_probes(address: str, port: int, ready: Callable[[], Readiness]) -> web.AppRunner:
    """Serve the probes in plain HTTP on ``address:port``; the caller cleans the runner up."""
    runner = await _started(probes_app(ready), address, port, None)
    log.info("probes on http://%s:%d (/healthz, /readyz)", address, port)
    return runner


async def serve_metrics(
    address: str, port: int, reviewer: Reviewer, context: ssl.SSLContext
) -> web.AppRunner:
    """Serve ``/metrics`` over HTTPS on ``address:port``; the caller cleans the runner up."""
    runner = await _started(metrics_app(reviewer), address, port, context)
    log.info("metrics on https://%s:%d/metrics, for callers the hub authorizes", address, port)
    return runner


async def _started(
    application: web.Application, address: str, port: int, context: ssl.SSLContext | None
) -> web.AppRunner:
    runner = web.AppRunner(application, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port, ssl_context=context).start()
    return runner
