"""A target's YAML that is slow to parse, or that no constructor builds, holds nothing up.

Against a real hub and target API server. A tenant may write a ConfigMap
named ``envoy-gateway-config`` in any namespace, and the Provided advisory
parses every one of them each reconcile. Parsing a MiB of YAML in the
pure-Python parser takes seconds; on the event loop it stalled the leader
Lease's renewal and ``/healthz`` (seen live: 8 of a minute's probes
failed). A date that is no date (``2001-13-01``) failed every reconcile.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx2
from lightkube.resources.core_v1 import ConfigMap, Namespace
from tests.integration.hubs import Harness, HarnessOptions
from tests.integration.test_hostile_target import _provided_substrate

HARNESS = HarnessOptions(prefix="hp", kubeconfig_secret=True)
TENANT = "tenant-slow"
WHERE = f"ConfigMap {TENANT}/envoy-gateway-config key envoy-gateway.yaml"
# A probe slower than this fails a kubelet's default timeoutSeconds (1).
PROBE_TIMEOUT = 1.0


def _cpu_seconds(h: Harness) -> float:
    """CPU time the operator process has used, user and system."""
    assert h.proc is not None
    fields = Path(f"/proc/{h.proc.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slow_yaml(size: int = 900 * 1024) -> str:
    """About ``size`` bytes of ordinary YAML: one mapping of many short keys, seconds to parse.

    It opens with a date that is no date, which PyYAML's own constructor
    raised on, failing the whole reconcile.
    """
    lines = ["a: 2001-13-01", "extensionManager:"]
    total, i = 0, 0
    while total < size:
        line = f"  k{i}: v{i}"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def test_a_slow_tenant_configmap_is_a_warning_and_healthz_answers_meanwhile(
    harness: Harness,
) -> None:
    text = slow_yaml()
    assert 850 * 1024 < len(text) < 1024 * 1024
    _provided_substrate(harness)
    harness.target.create(Namespace.from_dict({"metadata": {"name": TENANT}}))
    harness.target.create(
        ConfigMap.from_dict(
            {
                "metadata": {"name": "envoy-gateway-config", "namespace": TENANT},
                "data": {"envoy-gateway.yaml": text},
            }
        )
    )
    harness.create({"components": "Provided"})
    harness.start("--resync", "2")
    met = harness.wait_condition("RequirementsMet", "True", deadline=180)
    # Parsed and judged: the wiring is not what the spec asks, which is a
    # warning naming the ConfigMap, not a failed reconcile.
    assert WHERE in met["message"], met
    assert harness.condition("Ready").get("reason") != "ReconcileError"

    assert harness.metrics_port is not None
    busy = _cpu_seconds(harness)
    slowest, probes = 0.0, 0
    started = time.monotonic()
    with httpx2.Client(trust_env=False, timeout=30) as http:
        while time.monotonic() - started < 15:
            sent = time.monotonic()
            response = http.get(f"http://127.0.0.1:{harness.metrics_port}/healthz")
            slowest = max(slowest, time.monotonic() - sent)
            probes += 1
            assert response.status_code == 200
            time.sleep(0.1)
    busy = _cpu_seconds(harness) - busy
    # The operator worked while the probes ran (each resync parses the
    # whole ConfigMap again: 3 s of CPU on an idle core), and no probe
    # waited for it.
    assert busy >= 1.0, f"the operator used {busy:.1f} s of CPU"
    assert slowest < PROBE_TIMEOUT, f"the slowest of {probes} probes took {slowest:.2f} s"
    assert harness.proc is not None and harness.proc.poll() is None, "the operator died"
    log = harness.log.read_text()
    assert "ReconcileError" not in log
    assert "k4000: v4000" not in log
