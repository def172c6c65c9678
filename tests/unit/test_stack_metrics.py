"""The per-stack series: what they say, how far a target can stretch them, and that they go."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from modelplane.operator.stack_metrics import (
    LABEL_VALUE,
    MAX_COMPONENTS,
    MAX_CONDITIONS,
    StackSeriesCollector,
    key_of,
)

KEY = ("team-a", "west")
STATUS = {
    "conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "GPUsAvailable", "status": "Unknown"},
    ],
    "components": [
        {"name": "envoy-gateway", "version": "v1.5.0", "state": "Installed"},
        {"name": "lws", "version": "0.7.0", "state": "Failed"},
    ],
}


def samples(
    collector: StackSeriesCollector,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labels(**kv: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": KEY[0], "name": KEY[1], **kv}.items()))


def test_a_reconcile_renders_ready_conditions_components_and_gpus() -> None:
    series = StackSeriesCollector(clock=lambda: 1700000000.0, watch_restarts=lambda _: 3)
    series.reconciled(KEY, STATUS, succeeded=False, in_place=lambda c: c == "envoy-gateway", gpus=8)
    got = samples(series)
    assert got[("modelplane_stack_ready", labels())] == 0
    assert got[("modelplane_stack_condition", labels(type="GPUsAvailable", status="Unknown"))] == 1
    assert got[("modelplane_stack_condition", labels(type="GPUsAvailable", status="True"))] == 0
    assert got[("modelplane_component_state", labels(component="lws", state="Failed"))] == 1
    version = "modelplane_component_version_info"
    assert got[(version, labels(component="envoy-gateway", installed="v1.5.0", desired="v1.5.0"))]
    assert got[(version, labels(component="lws", installed="", desired="0.7.0"))] == 1
    assert got[("modelplane_stack_gpus", labels())] == 8
    assert got[("modelplane_stack_watch_restarts_total", labels())] == 3
    # Not one reconcile succeeded yet: no time of one.
    assert not any(n == "modelplane_stack_last_success_timestamp_seconds" for n, _ in got)


def test_success_time_and_helm_and_drift_counts() -> None:
    series = StackSeriesCollector(clock=lambda: 1700000000.0)
    ready = {**STATUS, "conditions": [{"type": "Ready", "status": "True"}]}
    series.reconciled(KEY, ready, succeeded=True, in_place=lambda _: True, gpus=None)
    for _ in range(2):
        series.helm_action(KEY, "lws", "install", "failed")
    series.drift_corrected(KEY, "lws")
    got = samples(series)
    assert got[("modelplane_stack_ready", labels())] == 1
    assert got[("modelplane_stack_last_success_timestamp_seconds", labels())] == 1700000000.0
    helm = labels(component="lws", action="install", outcome="failed")
    assert got[("modelplane_stack_helm_actions_total", helm)] == 2
    drift = labels(component="lws")
    assert got[("modelplane_stack_release_drift_corrections_total", drift)] == 1
    # No GPU count read yet: no series rather than a false 0.
    assert not any(n == "modelplane_stack_gpus" for n, _ in got)


def test_a_stack_that_goes_takes_every_series_with_it() -> None:
    series = StackSeriesCollector()
    other = ("team-b", "east")
    for key in (KEY, other):
        series.reconciled(key, STATUS, succeeded=True, in_place=lambda _: True, gpus=1)
        series.helm_action(key, "lws", "upgrade", "succeeded")
    series.forget(KEY)
    left = {dict(lbl)["namespace"] for _, lbl in samples(series)}
    assert left == {"team-b"}


def test_values_from_a_target_are_cut_and_counted() -> None:
    series = StackSeriesCollector()
    hostile = {
        "conditions": [{"type": f"T{i}", "status": "True"} for i in range(MAX_CONDITIONS * 4)],
        "components": [
            {"name": f"c{i}", "version": "v" * 10_000 + "\n", "state": "x" * 10_000}
            for i in range(MAX_COMPONENTS * 4)
        ],
    }
    series.reconciled(KEY, hostile, succeeded=True, in_place=lambda _: True, gpus=None)
    for i in range(10_000):
        series.helm_action(KEY, f"c{i}", "install", "failed")
    got = samples(series)
    conditions = {dict(lbl)["type"] for n, lbl in got if n == "modelplane_stack_condition"}
    assert len(conditions) == MAX_CONDITIONS
    states = [lbl for n, lbl in got if n == "modelplane_component_state"]
    assert len(states) == MAX_COMPONENTS
    assert all(len(v) <= LABEL_VALUE and "\n" not in v for _, lbl in got for _, v in lbl)
    helm = [lbl for n, lbl in got if n == "modelplane_stack_helm_actions_total"]
    assert 0 < len(helm) <= 256


def test_key_of_takes_only_a_stack_label() -> None:
    assert key_of("team-a/west") == KEY
    assert key_of("") is None
    assert key_of("west") is None
