"""A stack that stays blocked logs its failure once, not on every backed-off retry.

bench_fleet's operator logged about 6,100 lines in 8 minutes: kopf's
"Handler ... succeeded." for every watch event of every stack. Here one
operator process retries a blocked stack several times (``--resync 10``
caps the backoff at 10 s) and its own log is read: the log line is the
behaviour under test (an operator's log is read by people, and a line per
retry of a fleet buries everything else). What the hub is told is checked
beside it, by the operator's own count of status writes.
"""

from __future__ import annotations

import socket
from pathlib import Path

from lightkube import Client
from tests.integration.hubs import Harness, put_kubeconfig, with_server
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

NAMESPACE = "failure-log"
# A stack that never gets past its credentials fetches nothing.
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", Path("/"))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lines(h: Harness, text: str) -> list[str]:
    return [line for line in h.log.read_text().splitlines() if text in line]


def test_a_blocked_stack_logs_its_failure_once_per_change(
    hub: Client, hub_env: TestEnv, tmp_path: Path
) -> None:
    # The stack never reaches a target: the hub stands in for one.
    h = Harness(hub, hub_env, hub_env, NO_SUBSTRATE, tmp_path, NAMESPACE)
    try:
        h.create({})  # its kubeconfig Secret does not exist
        h.start("--resync", "10")
        h.wait_condition("Ready", "False", "SecretNotFound", deadline=60)
        first = h.reconciles()
        # Counted from the first retry on, past the write that told the failure.
        wait_for("a retry", lambda: h.reconciles() > first, deadline=120)
        writes = h.operator_counter("modelplane_status_writes_total")
        wait_for("three more retries", lambda: h.reconciles() >= first + 3, deadline=120)
        # The hub is told once as well: the retries change nothing in status.
        assert h.operator_counter("modelplane_status_writes_total") == writes

        missing = _lines(h, f"ServingStack {NAMESPACE}/stack: SecretNotFound")
        assert len(missing) == 1, h.log.read_text()[-3000:]
        assert " WARNING " in missing[0]
        # Nor one line per watch event of the stack (its status writes included).
        assert not _lines(h, "Handler 'wake_on_change' succeeded"), h.log.read_text()[-3000:]

        # A new failure is told, once as well.
        server = f"https://127.0.0.1:{_closed_port()}"
        put_kubeconfig(hub, NAMESPACE, with_server(hub_env.kubeconfig, server))
        h.wait_condition("Ready", "False", "TargetUnreachable", deadline=60)
        after = h.reconciles()
        wait_for("a retry after the new failure", lambda: h.reconciles() > after, deadline=120)
        writes = h.operator_counter("modelplane_status_writes_total")
        wait_for("two retries", lambda: h.reconciles() >= after + 2, deadline=120)
        assert h.operator_counter("modelplane_status_writes_total") == writes
        unreachable = _lines(h, f"ServingStack {NAMESPACE}/stack: TargetUnreachable")
        assert len(unreachable) == 1, h.log.read_text()[-3000:]
        assert len(_lines(h, f"ServingStack {NAMESPACE}/stack: SecretNotFound")) == 1
        assert "Traceback" not in h.log.read_text()
    finally:
        h.stop()
