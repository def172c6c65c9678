"""The per-stack series, read from the running operator's ``/metrics``.

One stack installs its substrate on a real target; its series say Ready,
each condition, each component's state and versions, the target's GPUs, the
last success, the helm actions run and the release drift restored (none).
Deleted, the stack takes every series of its own with it.
"""

from __future__ import annotations

from typing import Any

from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import SS, Harness
from tests.waiting import wait_for

from modelplane.operator.handlers import SKIP_TEARDOWN_ANNOTATION

Sample = tuple[str, dict[str, str], float]


def scrape(harness: Harness) -> list[Sample]:
    response = harness.scrape()
    response.raise_for_status()
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    ]


def of_stack(samples: list[Sample], harness: Harness, name: str = "stack") -> list[Sample]:
    return [s for s in samples if s[1].get("namespace") == harness.ns and s[1].get("name") == name]


def one(samples: list[Sample], metric: str, **labels: str) -> float:
    found = [v for n, lbl, v in samples if n == metric and labels.items() <= lbl.items()]
    assert len(found) == 1, f"{metric}{labels}: {found}"
    return found[0]


def test_a_ready_stack_is_described_by_its_series_and_they_go_with_it(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=180)
    status = harness.status()

    def series() -> list[Sample] | None:
        mine = of_stack(scrape(harness), harness)
        ready = [v for n, _, v in mine if n == "modelplane_stack_ready"]
        return mine if ready == [1.0] else None

    mine = wait_for("the stack's series to say Ready", series, deadline=30)
    for c in status["conditions"]:
        assert one(mine, "modelplane_stack_condition", type=c["type"], status=c["status"]) == 1
    components: list[dict[str, Any]] = status["components"]
    for c in components:
        assert one(mine, "modelplane_component_state", component=c["name"], state=c["state"]) == 1
        # Ready: every component is in place, at the version it should be.
        version = dict(component=c["name"], installed=c["version"], desired=c["version"])
        assert one(mine, "modelplane_component_version_info", **version) == 1
    assert one(mine, "modelplane_stack_gpus") == status["target"]["gpus"]
    assert one(mine, "modelplane_stack_last_success_timestamp_seconds") > 0
    assert one(mine, "modelplane_stack_watch_restarts_total") >= 0
    installs = [
        lbl["component"]
        for n, lbl, v in mine
        if n == "modelplane_stack_helm_actions_total"
        and lbl["action"] == "install"
        and lbl["outcome"] == "succeeded"
        and v >= 1
    ]
    releases = harness.helm_releases()
    assert len(installs) == len(releases), (installs, sorted(releases))
    everyone = scrape(harness)
    timed = [
        v
        for n, lbl, v in everyone
        if n == "modelplane_helm_action_seconds_count" and lbl["outcome"] == "succeeded"
    ]
    assert sum(timed) >= len(releases)
    assert one(everyone, "modelplane_leader") == 1
    # The loop's own lag, timed every second since the operator started.
    assert one(everyone, "modelplane_event_loop_lag_seconds_count") >= 1

    # Each component's drift count is there from 0, so that a rule over a
    # window sees the first restore as an increase.
    drift = "modelplane_stack_release_drift_corrections_total"
    counts = {lbl["component"]: v for n, lbl, v in mine if n == drift}
    assert counts == {c["name"]: 0 for c in components}

    # Deleted without teardown, so that only the series are waited for.
    harness.hub.patch(
        SS,
        "stack",
        {"metadata": {"annotations": {SKIP_TEARDOWN_ANNOTATION: "true"}}},
        namespace=harness.ns,
        patch_type=PatchType.MERGE,
    )
    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        "the deleted stack's series to go",
        lambda: not of_stack(scrape(harness), harness),
        deadline=30,
    )
