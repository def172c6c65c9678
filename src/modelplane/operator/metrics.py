"""Prometheus metrics of the operator."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

RECONCILES = Counter(
    "modelplane_reconciles_total", "Reconciles of ServingStacks, by result.", ["result"]
)
RECONCILE_SECONDS = Histogram("modelplane_reconcile_seconds", "Time one reconcile takes.")
STATUS_WRITES = Counter("modelplane_status_writes_total", "Status patches written to the hub.")


def serve(port: int) -> None:
    start_http_server(port, addr="127.0.0.1")
