"""A teardown that cannot proceed backs off and says so once, not on every retry.

kopf logs each TemporaryError of a deletion handler at ERROR and posts it as
an Event on the hub; teardown used to raise one every 10 s for as long as it
was stuck: a hub write per retry, forever. And an error the teardown handler
did not name (helm failing to uninstall) took kopf's generic path: a
traceback and a retry every 2 s, with no condition to say why. Here one
operator process (``--resync 20`` caps the backoff at 20 s) retries a stuck
teardown, and the hub's Events, the stack's Teardown condition and kopf's
progress annotation (its retry count) are read.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Secret
from tests.integration import substrate as substrate_module
from tests.integration.hubs import (
    SS,
    TARGET_SECRET,
    Harness,
    put_kubeconfig,
)
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for

NAMESPACE = "teardown-quiet"
# A Provided stack installs no chart and fetches no manifest.
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", Path("/"))
# kopf's progress record of the deletion handler (settings().persistence);
# matched loosely, as the handler's id was once kopf's default, its qualname.
PROGRESS = "modelplane.ai/"
RETRIES = 3
# The resync period caps the blocked-retry backoff (plan.decisions, whose
# table tests pin its growth down): at 10 s every retry comes after about
# 10 s, so three failures and the recovery take about 30 s, not 50.
RESYNC = "10"


def _retries(hub: Client, namespace: str) -> int | None:
    """How many times teardown has failed so far, or None once the stack is gone."""
    try:
        obj = hub.get(SS, "stack", namespace=namespace)
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


def _events(hub: Client, namespace: str) -> list[Event]:
    return [
        e
        for e in hub.list(Event, namespace=namespace)
        if e.involvedObject.kind == "ServingStack" and e.involvedObject.name == "stack"
    ]


def _failed_at_least(hub: Client, namespace: str, count: int) -> bool:
    retries = _retries(hub, namespace)
    assert retries is not None, "the stack went before its teardown could finish"
    return retries >= count


def _told_once(events: list[Event], reason: str) -> None:
    """One TeardownBlocked Warning naming ``reason``, and no kopf post of its own log lines."""
    shown = [(e.type, e.reason, e.message) for e in events]
    blocked = [e for e in events if e.reason == "TeardownBlocked"]
    assert len(blocked) == 1, shown
    assert blocked[0].type == "Warning"
    assert reason in (blocked[0].message or ""), shown
    # kopf's own posts of its log lines (reason "Logging"), one per retry before.
    assert not [e for e in events if e.reason == "Logging"], shown


def test_a_stuck_teardown_backs_off_and_posts_one_warning(
    hub: Client, hub_env: TestEnv, target: TestEnv, tmp_path: Path
) -> None:
    h = Harness(hub, hub_env, target, NO_SUBSTRATE, tmp_path, NAMESPACE)
    try:
        put_kubeconfig(hub, NAMESPACE, target.kubeconfig)
        h.create({"components": "Provided"})
        h.start("--resync", RESYNC)
        wait_for("a first reconcile", lambda: h.condition("Ready"), deadline=90)

        hub.delete(Secret, TARGET_SECRET, namespace=NAMESPACE)
        hub.delete(SS, "stack", namespace=NAMESPACE)
        wait_for(
            f"{RETRIES} failed teardowns",
            lambda: _failed_at_least(hub, NAMESPACE, RETRIES),
            deadline=120,
        )
        assert h.condition("Teardown").get("reason") == "SecretNotFound", h.status()
        _told_once(_events(hub, NAMESPACE), "SecretNotFound")

        # Credentials back: the next backed-off attempt finishes the teardown.
        put_kubeconfig(hub, NAMESPACE, target.kubeconfig)
        wait_for("the stack deleted", lambda: _retries(hub, NAMESPACE) is None, deadline=60)
    finally:
        h.stop()


def _failing_helm(tmp_path: Path, fail_while: Path) -> Path:
    """A helm that refuses ``uninstall`` while ``fail_while`` exists, and is the real one else."""
    script = tmp_path / "helm"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = uninstall ] && [ -e "{fail_while}" ]; then\n'
        '  echo "Error: uninstall: the test refuses to uninstall $2" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec "{find_binaries()["helm"]}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_failing_uninstall_is_a_blocked_teardown_not_a_crash(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_while = tmp_path / "refuse-uninstall"
    helm = _failing_helm(tmp_path, fail_while)
    # The operator process finds helm through the harness's find_binaries.
    binaries = {**find_binaries(), "helm": helm}
    monkeypatch.setattr(substrate_module, "find_binaries", lambda: binaries)
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})
    harness.start("--resync", RESYNC)
    harness.wait_condition("Ready", "True", deadline=180)
    assert harness.helm_releases()

    fail_while.touch()
    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        f"{RETRIES} failed teardowns",
        lambda: _failed_at_least(harness.hub, harness.ns, RETRIES),
        deadline=180,
    )
    teardown = harness.condition("Teardown")
    assert teardown.get("reason") == "HelmFailed", harness.status()
    assert "the test refuses to uninstall" in teardown.get("message", ""), teardown
    _told_once(_events(harness.hub, harness.ns), "HelmFailed")

    # helm works again: the next backed-off attempt uninstalls and finishes.
    fail_while.unlink()
    wait_for("the stack deleted", lambda: _retries(harness.hub, harness.ns) is None, deadline=120)
    assert harness.helm_releases() == {}
