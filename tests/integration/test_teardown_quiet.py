"""A teardown that cannot proceed backs off and says so once, not on every retry.

kopf logs each TemporaryError of a deletion handler at ERROR and posts it as
an Event on the hub; teardown used to raise one every 10 s for as long as it
was stuck: a hub write per retry, forever. Here a stack's kubeconfig Secret
is deleted before the stack, one operator process (``--resync 20`` caps the
backoff at 20 s) retries the teardown, and the hub's Events, kopf's progress
annotation (its retry count) and the operator's log are read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Secret
from tests.integration.hubs import (
    SS,
    TARGET_SECRET,
    Harness,
    put_kubeconfig,
)
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

NAMESPACE = "teardown-quiet"
# A Provided stack installs no chart and fetches no manifest.
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", Path("/"))
# kopf's progress record of the deletion handler (settings().persistence);
# matched loosely, as the handler's id was once kopf's default, its qualname.
PROGRESS = "modelplane.ai/"


def _retries(hub: Client) -> int | None:
    """How many times teardown has failed so far, or None once the stack is gone."""
    try:
        obj = hub.get(SS, "stack", namespace=NAMESPACE)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
    annotations = (obj.metadata.annotations or {}) if obj.metadata else {}
    progress = next(
        (v for k, v in annotations.items() if k.startswith(PROGRESS) and k.endswith("teardown")),
        None,
    )
    return int(json.loads(progress).get("retries") or 0) if progress else 0


def _events(hub: Client) -> list[Event]:
    return [
        e
        for e in hub.list(Event, namespace=NAMESPACE)
        if e.involvedObject.kind == "ServingStack" and e.involvedObject.name == "stack"
    ]


def test_a_stuck_teardown_backs_off_and_posts_one_warning(
    hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path
) -> None:
    h = Harness(hub, hub_env, target, NO_SUBSTRATE, tmp_path, NAMESPACE)
    try:
        put_kubeconfig(hub, NAMESPACE, target.kubeconfig)
        h.create({"components": "Provided"})
        h.start("--resync", "20")
        wait_for("a first reconcile", lambda: h.condition("Ready"), deadline=90)

        hub.delete(Secret, TARGET_SECRET, namespace=NAMESPACE)
        hub.delete(SS, "stack", namespace=NAMESPACE)
        # When each failed attempt is seen (polled: within a fraction of a second).
        seen: dict[int, float] = {}

        def third_failure() -> bool:
            retries = _retries(hub)
            assert retries is not None, "the stack went without its credentials"
            seen.setdefault(retries, time.monotonic())
            return retries >= 3

        wait_for("three failed teardowns", third_failure, deadline=120)
        assert {1, 2, 3} <= seen.keys(), seen
        first_gap, second_gap = seen[2] - seen[1], seen[3] - seen[2]
        # 10 s, then 20 s (each less up to 10% of jitter): twice as long, not
        # the same 10 s again.
        assert first_gap > 7.0, (first_gap, second_gap)
        assert second_gap > 1.4 * first_gap, (first_gap, second_gap)
        assert h.condition("Teardown").get("reason") == "SecretNotFound", h.status()

        events = _events(hub)
        blocked = [e for e in events if e.reason == "TeardownBlocked"]
        assert len(blocked) == 1, [(e.type, e.reason, e.message) for e in events]
        assert blocked[0].type == "Warning"
        assert "SecretNotFound" in (blocked[0].message or "")
        # kopf's own posts of its log lines (reason "Logging"), one per retry before.
        assert not [e for e in events if e.reason == "Logging"], [
            (e.type, e.message) for e in events
        ]
        log = h.log.read_text()
        told = [line for line in log.splitlines() if "teardown blocked: SecretNotFound" in line]
        assert len(told) == 1 and " WARNING " in told[0], log[-3000:]
        assert "failed temporarily" not in log, log[-3000:]

        # Credentials back: the next backed-off attempt finishes the teardown.
        put_kubeconfig(hub, NAMESPACE, target.kubeconfig)
        wait_for("the stack deleted", lambda: _retries(hub) is None, deadline=60)
        assert "Traceback" not in h.log.read_text()
    finally:
        h.stop()
