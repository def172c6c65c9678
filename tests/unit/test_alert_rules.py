"""The chart's alert rules and dashboard, rendered by helm; the rules run by promtool.

Each alert is fed series shaped as the operator exports them and must fire
exactly when its condition has held for its ``for``, for the series of the
operator's job only.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY
from tests.monitoring import DASHBOARD, prometheus_tool, render, rule_file

from modelplane.operator import metrics  # noqa: F401 - registers the operator's families
from modelplane.operator.stack_metrics import StackSeriesCollector

JOB = "mp-modelplane-metrics"
STACK = {"job": JOB, "namespace": "team-a", "name": "west"}


def series(metric: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in {"job": JOB, **labels}.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def alert(labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }


NOT_READY = {
    "interval": "1m",
    "input_series": [
        series("modelplane_stack_ready", "0x20", namespace="team-a", name="west"),
        series("modelplane_stack_ready", "1x20", namespace="team-a", name="east"),
        # Another job's series of the same name are not the operator's.
        {"series": 'modelplane_stack_ready{job="other",namespace="x",name="y"}', "values": "0x20"},
    ],
    "alert_rule_test": [
        {"eval_time": "14m", "alertname": "ModelplaneStackNotReady", "exp_alerts": []},
        {
            "eval_time": "16m",
            "alertname": "ModelplaneStackNotReady",
            "exp_alerts": [
                alert(
                    {**STACK, "severity": "warning"},
                    "ServingStack team-a/west is not Ready",
                    "ServingStack team-a/west has not been Ready for 15m; its Ready condition "
                    "says why (kubectl get servingstack -n team-a west -o yaml).",
                )
            ],
        },
    ],
}
GPUS = {
    "interval": "1m",
    "input_series": [
        series(
            "modelplane_stack_condition",
            "1x20",
            namespace="team-a",
            name="west",
            type="GPUsAvailable",
            status="False",
        ),
        series(
            "modelplane_stack_condition",
            "0x20",
            namespace="team-a",
            name="east",
            type="GPUsAvailable",
            status="False",
        ),
    ],
    "alert_rule_test": [
        {"eval_time": "14m", "alertname": "ModelplaneGPUsUnavailable", "exp_alerts": []},
        {
            "eval_time": "16m",
            "alertname": "ModelplaneGPUsUnavailable",
            "exp_alerts": [
                alert(
                    {**STACK, "type": "GPUsAvailable", "status": "False", "severity": "warning"},
                    "The target of ServingStack team-a/west offers no GPUs",
                    "GPUsAvailable has been False on ServingStack team-a/west for 15m: the "
                    "target's GPU nodes publish no devices a model can be scheduled on.",
                )
            ],
        },
    ],
}
DRIFT = {
    "interval": "5m",
    "input_series": [
        # Restored at 10, 15 and 20 minutes: three times within the hour.
        series(
            "modelplane_stack_release_drift_corrections_total",
            "0 0 1 2 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3",
            namespace="team-a",
            name="west",
            component="lws",
        ),
        # Once: a hand edit taken back, nothing to page on.
        series(
            "modelplane_stack_release_drift_corrections_total",
            "0 1 1 1 1 1 1 1",
            namespace="team-a",
            name="east",
            component="lws",
        ),
    ],
    "alert_rule_test": [
        {"eval_time": "15m", "alertname": "ModelplaneReleaseDriftRepeated", "exp_alerts": []},
        {
            "eval_time": "20m",
            "alertname": "ModelplaneReleaseDriftRepeated",
            "exp_alerts": [
                alert(
                    {**STACK, "component": "lws", "severity": "warning"},
                    "Release drift on team-a/west (lws) keeps coming back",
                    "The operator restored lws's workloads of ServingStack team-a/west 3 times "
                    "in 1h: something on the target (a person, another controller) keeps "
                    "deleting or editing them.",
                )
            ],
        },
        # An hour after the last correction, the window holds none.
        {"eval_time": "125m", "alertname": "ModelplaneReleaseDriftRepeated", "exp_alerts": []},
    ],
}
NO_LEADER = {
    "interval": "1m",
    "input_series": [
        series("modelplane_leader", "1 1 0x20", instance="a"),
        series("modelplane_leader", "0x22", instance="b"),
    ],
    "alert_rule_test": [
        {"eval_time": "6m", "alertname": "ModelplaneNoLeader", "exp_alerts": []},
        {
            "eval_time": "8m",
            "alertname": "ModelplaneNoLeader",
            "exp_alerts": [
                alert(
                    {"severity": "critical"},
                    "No modelplane replica leads; no ServingStack is reconciled",
                    "Every replica of the operator reports that it stands by, for 5m: none "
                    "holds the leader Lease, so no ServingStack is reconciled. The replicas' "
                    "logs and /readyz say why.",
                )
            ],
        },
    ],
}
NOT_REPORTING = {
    "interval": "1m",
    "input_series": [
        series("up", "1 1 0x20", instance="a"),
        # Another job's target answering says nothing of the operator.
        {"series": 'up{job="other",instance="c"}', "values": "1x22"},
    ],
    "alert_rule_test": [
        {"eval_time": "6m", "alertname": "ModelplaneOperatorNotReporting", "exp_alerts": []},
        {
            "eval_time": "8m",
            "alertname": "ModelplaneOperatorNotReporting",
            "exp_alerts": [
                alert(
                    {"severity": "critical"},
                    "The modelplane operator is not reporting",
                    "No replica of the operator has answered a scrape of /metrics for 5m "
                    f'(job="{JOB}"): nothing said about any ServingStack can be trusted '
                    "meanwhile.",
                )
            ],
        },
    ],
}


def test_every_alert_fires_after_its_for_and_only_for_the_operator(tmp_path: Path) -> None:
    promtool = prometheus_tool("promtool")
    rule_file(tmp_path / "home", tmp_path / "rules.yml")
    tests = [NOT_READY, GPUS, DRIFT, NO_LEADER, NOT_REPORTING]
    spec = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec))
    proc = subprocess.run(
        [str(promtool), "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rules_load_and_take_for_job_and_labels_from_values(tmp_path: Path) -> None:
    promtool = prometheus_tool("promtool")
    groups = rule_file(
        tmp_path / "home",
        tmp_path / "rules.yml",
        "prometheusRule.for.stackNotReady=30s",
        "prometheusRule.job=modelplane",
        "prometheusRule.alertLabels.team=serving",
    )
    check = subprocess.run(
        [str(promtool), "check", "rules", str(tmp_path / "rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    rules = {r["alert"]: r for g in groups["groups"] for r in g["rules"]}
    assert set(rules) == {
        "ModelplaneStackNotReady",
        "ModelplaneGPUsUnavailable",
        "ModelplaneReleaseDriftRepeated",
        "ModelplaneNoLeader",
        "ModelplaneOperatorNotReporting",
    }
    assert rules["ModelplaneStackNotReady"]["for"] == "30s"
    assert all('job="modelplane"' in r["expr"] for r in rules.values())
    assert all(r["labels"]["team"] == "serving" for r in rules.values())


def test_neither_rules_nor_dashboard_without_their_values(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for show_only in ("templates/prometheusrule.yaml", DASHBOARD):
        proc_docs = _render_or_none(home, show_only)
        assert proc_docs == [], show_only


def _render_or_none(home: Path, show_only: str) -> list[dict[str, Any]]:
    try:
        return render(home, show_only)
    except AssertionError as err:
        # helm says a template rendered nothing; that is what is asserted.
        assert "could not find template" in str(err), err
        return []


def test_the_dashboard_is_a_configmap_the_grafana_sidecar_takes(tmp_path: Path) -> None:
    (cm,) = render(tmp_path / "home", DASHBOARD, "dashboard.enabled=true")
    assert cm["kind"] == "ConfigMap"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = cm["data"].values()
    dashboard = json.loads(text)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    # Every series a panel reads is one the operator exports.
    stacks = StackSeriesCollector()
    status = {"conditions": [{"type": "Ready", "status": "True"}], "components": [{"name": "c"}]}
    stacks.reconciled(("a", "b"), status, succeeded=True, in_place=lambda _: True, gpus=1)
    stacks.helm_action(("a", "b"), "c", "install", "succeeded")
    # A labelled family with no child yet has no sample: named by its type's suffixes.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    exported = {
        f"{family.name}{suffix}"
        for collector in (REGISTRY, stacks)
        for family in collector.collect()
        for suffix in suffixes.get(family.type, ("",))
    }
    named = {m for e in exprs for m in re.findall(r"\bmodelplane_[a-z_]+", e)}
    assert named <= exported, named - exported
