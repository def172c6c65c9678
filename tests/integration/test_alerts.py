"""The chart's alert rules in a real Prometheus, scraping a real operator.

The PrometheusRule's group is taken from ``helm template`` (with a short
``for``), loaded into Debian's Prometheus, which scrapes the operator's
``/metrics`` on loopback. A stack whose target cannot be reached is not
Ready: its alert goes pending, then fires, and the rule Prometheus holds
says the chart's ``for``. How soon after the scrape it fires is
Prometheus's own scheduling (its scrape and evaluation intervals, set
here), and no test of ours times it.
"""

from __future__ import annotations

import subprocess
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
# Shorter than a scrape: the rule sees each scrape.
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

    def rule_for(self, alert: str) -> float:
        """The ``for`` of the loaded alerting rule ``alert``, in seconds, as Prometheus holds it."""
        with httpx2.Client(trust_env=False) as http:
            response = http.get(f"{self.url}/api/v1/rules", params={"type": "alert"}, timeout=5)
        response.raise_for_status()
        rules = [
            rule
            for group in response.json()["data"]["groups"]
            for rule in group["rules"]
            if rule["name"] == alert
        ]
        assert len(rules) == 1, rules
        return float(rules[0]["duration"])

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


def test_a_broken_stack_goes_pending_for_its_rules_for_then_fires(
    operator: Harness, prometheus: Prometheus
) -> None:
    # Scraped before the stack breaks, so that Prometheus sees the stack
    # Ready first and the alert's course is the rule's.
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

    def state() -> str | None:
        for a in prometheus.alerts():
            labels = a["labels"]
            if labels.get("alertname") == ALERT and labels.get("namespace") == broken.ns:
                assert labels["name"] == "stack"
                return str(a["state"])
        return None

    seen: list[str] = []

    def fired() -> bool:
        now = state()
        if now is not None and now not in seen:
            seen.append(now)
        return now == "firing"

    deadline = FOR_SECONDS + 4 * SCRAPE_SECONDS + 30
    wait_for(
        f"{ALERT} to fire",
        fired,
        deadline=deadline,
        interval=0.25,
        detail=lambda: prometheus.log.read_text()[-2000:],
    )
    # Pending first, for the rule's for: polled four times a second, a
    # pending of FOR_SECONDS is seen (a rule with no for fires at once).
    assert seen == ["pending", "firing"], f"{ALERT} went {seen}"
    assert prometheus.rule_for(ALERT) == FOR_SECONDS
