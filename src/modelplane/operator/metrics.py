"""Prometheus metrics of the operator."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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


def serve(port: int) -> None:
    start_http_server(port, addr="127.0.0.1")
