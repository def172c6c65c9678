"""The chart's alert rules in a real Prometheus, scraping a real operator.

The PrometheusRule's group is taken from ``helm template`` (with a short
``for``), loaded into Debian's Prometheus, which scrapes the operator's
``/metrics`` on loopback. A stack whose target cannot be reached is not
Ready: its alert goes pending, then fires, within the rule's ``for`` plus a
scrape and an evaluation.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from tests.integration.hubs import Harness, free_port, with_server
from tests.monitoring import prometheus_tool, rule_file
from tests.waiting import wait_for

FOR_SECONDS = 20
SCRAPE_SECONDS = 2
# Shorter than a scrape, so that what the bound allows is almost all scrape.
EVALUATION_SECONDS = 1
JOB = "modelplane"
ALERT = "ModelplaneStackNotReady"


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alerts(self) -> list[dict[str, Any]]:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
        with httpx2.Client(trust_env=False) as http:
            response = http.get(f"{self.url}/api/v1/alerts", timeout=5)
        response.raise_for_status()
        alerts: list[dict[str, Any]] = response.json()["data"]["alerts"]
        return alerts

    def targets_up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
        with httpx2.Client(trust_env=False) as http:
            response = http.get(f"{self.url}/api/v1/targets", timeout=5)
        if response.status_code == 503:
            return False  # still starting: its API answers 503 until the TSDB is open
        response.raise_for_status()
        active = response.json()["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def start_prometheus(tmp: Path, metrics_port: int, token: str) -> Prometheus:
    binary = prometheus_tool("prometheus")
    tmp.mkdir(parents=True, exist_ok=True)
    # As the chart's ServiceMonitor scrapes: HTTPS to the operator's own
    # certificate, a bearer token from a file.
    (tmp / "token").write_text(token)
    rule_file(
        tmp / "helm-home",
        tmp / "rules.yml",
        f"prometheusRule.for.stackNotReady={FOR_SECONDS}s",
        f"prometheusRule.job={JOB}",
    )
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS}s",
            "evaluation_interval": f"{EVALUATION_SECONDS}s",
        },
        "rule_files": [str(tmp / "rules.yml")],
        "scrape_configs": [
            {
                "job_name": JOB,
                "scheme": "https",
                "tls_config": {"insecure_skip_verify": True},
                "authorization": {"credentials_file": str(tmp / "token")},
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return Prometheus(f"http://127.0.0.1:{port}", proc, log)


@pytest.fixture
def operator(harness: Harness) -> Harness:
    """The operator running, with no stack yet."""
    harness.start()
    return harness


def break_stack(harness: Harness) -> None:
    """A stack whose target answers on no port."""
    kubeconfig = with_server(harness.target_env.kubeconfig, f"https://127.0.0.1:{free_port()}")
    harness.put_secret({"kubeconfig": yaml.safe_dump(kubeconfig)})
    harness.create({})


@pytest.fixture
def prometheus(operator: Harness, tmp_path: Path) -> Iterator[Prometheus]:
    assert operator.metrics_port is not None
    prom = start_prometheus(tmp_path / "prometheus", operator.metrics_port, operator.hub_env.token)
    try:
        yield prom
    finally:
        prom.proc.terminate()
        try:
            prom.proc.wait(15)
        except subprocess.TimeoutExpired:
            prom.proc.kill()
            prom.proc.wait(5)


def not_ready(harness: Harness) -> bool:
    text = harness.scrape().text
    wanted = f'modelplane_stack_ready{{name="stack",namespace="{harness.ns}"}} 0.0'
    return wanted in text


def test_a_broken_stack_fires_its_alert_within_for_and_a_scrape(
    operator: Harness, prometheus: Prometheus
) -> None:
    # Scraped before the stack exists, so that the time measured is the rule's
    # and the scrape's, not Prometheus's start.
    wait_for(
        "Prometheus to scrape the operator",
        prometheus.targets_up,
        deadline=60,
        not_yet=(httpx2.TransportError,),
    )
    broken = operator
    break_stack(broken)
    broken.wait_condition("Ready", "False", "TargetUnreachable", deadline=60)
    wait_for(
        "the operator's /metrics to say the stack is not Ready",
        lambda: not_ready(broken),
        deadline=30,
        interval=0.2,
    )
    exported = time.monotonic()

    def state() -> str | None:
        for a in prometheus.alerts():
            labels = a["labels"]
            if labels.get("alertname") == ALERT and labels.get("namespace") == broken.ns:
                assert labels["name"] == "stack"
                return str(a["state"])
        return None

    seen: dict[str, float] = {}

    def fired() -> bool:
        now = state()
        if now is not None:
            seen.setdefault(now, time.monotonic())
        return now == "firing"

    deadline = FOR_SECONDS + 4 * SCRAPE_SECONDS + 30
    wait_for(
        f"{ALERT} to fire",
        fired,
        deadline=deadline,
        interval=0.25,
        detail=lambda: prometheus.log.read_text()[-2000:],
    )
    assert "pending" in seen, f"{ALERT} fired without going pending first: {seen}"
    pending_for = seen["firing"] - seen["pending"]
    took = seen["firing"] - exported
    print(
        f"pending after {seen['pending'] - exported:.1f}s, firing after {took:.1f}s "
        f"(pending for {pending_for:.1f}s)"
    )
    # Pending lasts the rule's for, give or take one evaluation and the polling.
    slack = EVALUATION_SECONDS + 0.5
    assert FOR_SECONDS - slack <= pending_for <= FOR_SECONDS + slack
    # The series reaches Prometheus within a scrape, the next evaluation
    # makes it pending, and it fires once pending for its for; half a second
    # covers this test's own polls.
    bound = FOR_SECONDS + SCRAPE_SECONDS + EVALUATION_SECONDS + 0.5
    assert took <= bound, f"fired {took:.1f}s after /metrics said so (at most {bound}s)"
