"""A fleet's upgrade, staged: a canary first, one stack at a time, paused by a failure.

Three stacks on three targets of their own, one operator run with
``--max-concurrent-upgrades 1`` and a canary selector. A watcher reads the
stacks' statuses throughout, so what is asserted is what ``kubectl get ss``
showed at each moment, and helm's own history on each target says in
which order the releases really moved.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client
from lightkube.types import PatchType
from tests.integration.hubs import (
    SS,
    Harness,
    namespace_for,
    private_env,
    put_kubeconfig,
    put_stack,
)
from tests.integration.hubs import stack_body as _stack_body
from tests.integration.substrate import EXTRA_VERSIONS, Substrate
from tests.testenv import TestEnv, find_binaries, helm_environ
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.plan.rollout import RESUME_ANNOTATION

PIN = catalog.BY_NAME["kube-prometheus-stack"].version
NEWER = EXTRA_VERSIONS["kube-prometheus-stack"][0]
# Not in the fixture repository: helm fails, and the upgrade with it.
MISSING = "99.0.0"
KPS = "kube-prometheus-stack"
RELEASE = "mp-kube-prometheus-stack"
CANARY_LABEL = "modelplane.test/ring"
CANARY = "canary"
STACKS = (CANARY, "east", "west")


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestEnv]]:
    with (
        private_env(tmp_path_factory.mktemp("canary")) as canary,
        private_env(tmp_path_factory.mktemp("east")) as east,
        private_env(tmp_path_factory.mktemp("west")) as west,
    ):
        yield {CANARY: canary, "east": east, "west": west}


class Watcher:
    """Reads every stack's UpToDate reason and installed version, a few times a second."""

    def __init__(self, hub: Client, namespace: str) -> None:
        self.hub, self.ns = hub, namespace
        self.samples: list[tuple[float, dict[str, tuple[str, str | None]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            seen: dict[str, tuple[str, str | None]] = {}
            for obj in self.hub.list(SS, namespace=self.ns):
                body = obj.to_dict()
                status = body.get("status") or {}
                reason = next(
                    (
                        c["reason"]
                        for c in status.get("conditions") or []
                        if c["type"] == "UpToDate"
                    ),
                    "",
                )
                kps = next((c for c in status.get("components") or [] if c["name"] == KPS), {})
                seen[body["metadata"]["name"]] = (reason, kps.get("installedVersion"))
            self.samples.append((time.monotonic(), seen))

    def upgrading(self, since: float = 0.0) -> list[set[str]]:
        """The stacks shown Upgrading in each sample taken since ``since``."""
        return [
            {name for name, (reason, _) in seen.items() if reason == "Upgrading"}
            for at, seen in self.samples
            if at >= since
        ]

    def first_upgrading(self, since: float) -> list[str]:
        order: list[str] = []
        for names in self.upgrading(since):
            order += sorted(n for n in names if n not in order)
        return order


def _stack(h: Harness, name: str, version: str) -> dict[str, Any]:
    body = _stack_body(h.ns, name, {"versions": {"prometheus": version}}, secret=f"kc-{name}")
    if name == CANARY:
        body["metadata"]["labels"] = {CANARY_LABEL: "true"}
    return body


def _kps(h: Harness, name: str) -> dict[str, Any]:
    return next(c for c in h.status(name)["components"] if c["name"] == KPS)


def _up_to_date(h: Harness, name: str) -> dict[str, Any]:
    return h.condition("UpToDate", name)


def _wait_all(h: Harness, names: tuple[str, ...], installed: str, deadline: float) -> None:
    for name in names:
        wait_for(
            f"{name} up to date at {installed}",
            lambda name=name: (
                _up_to_date(h, name).get("status") == "True"
                and _kps(h, name).get("installedVersion") == installed
                and h.condition("Ready", name).get("status") == "True"
            ),
            deadline=deadline,
        )


def _helm(h: Harness, env: TestEnv, *args: str) -> Any:
    """helm's JSON answer about the release on ``env``."""
    out = subprocess.run(
        [str(find_binaries()["helm"]), *args, "-n", "monitoring", "-o", "json",
         "--kubeconfig", str(env.kubeconfig_path)],
        env=helm_environ(h.tmp / "helm-home"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # fmt: skip
    return json.loads(out)


def _helm_deployed_at(h: Harness, env: TestEnv, version: str) -> datetime:
    """When helm deployed ``version`` of the release on ``env``, by its own history."""
    out = _helm(h, env, "history", RELEASE)
    revisions = [r for r in out if r["chart"].endswith(f"-{version}")]
    assert revisions, f"helm never ran {version} on {env.kubeconfig_path}: {out}"
    return datetime.fromisoformat(revisions[-1]["updated"])


def _revision(h: Harness, env: TestEnv) -> int:
    return int(next(r for r in _helm(h, env, "list", "-a") if r["name"] == RELEASE)["revision"])


def _reconciles(h: Harness) -> int:
    """The operator's reconciles so far; -1 before it serves its metrics."""
    try:
        return h.reconciles()
    except httpx2.HTTPError:
        return -1


def _reconcile_seconds(h: Harness) -> tuple[float, float]:
    return (
        h.operator_counter("modelplane_reconcile_seconds_sum"),
        h.operator_counter("modelplane_reconcile_seconds_count"),
    )


def test_a_canary_goes_first_one_at_a_time_and_a_failure_pauses_the_rest(
    hub: Client,
    hub_env: TestEnv,
    targets: dict[str, TestEnv],
    substrate: Substrate,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    ns = namespace_for("rollout", request.node.name)
    h = Harness(hub, hub_env, targets[CANARY], substrate, tmp_path, ns)
    for name in STACKS:
        put_kubeconfig(hub, ns, targets[name].kubeconfig, name=f"kc-{name}")
        put_stack(hub, _stack(h, name, PIN))
    try:
        h.start(
            "--max-concurrent-upgrades", "1",
            "--canary-selector", f"{CANARY_LABEL}=true",
            "--upgrade-ready-timeout", "60s",
            "--resync", "5",
        )  # fmt: skip
        # A first install is not an upgrade: all three install at once.
        _wait_all(h, STACKS, PIN, deadline=300)

        with Watcher(hub, ns) as watcher:
            # 1. Every stack's pin moves: the canary goes first, then one at a time.
            bumped = time.monotonic()
            # The others' edits follow the canary's at once: they wait for it.
            for name in STACKS:
                put_stack(hub, _stack(h, name, NEWER))
            _wait_all(h, STACKS, NEWER, deadline=300)
            took = time.monotonic() - bumped
            shown = watcher.upgrading(bumped)
            assert all(len(names) <= 1 for names in shown), shown
            assert watcher.first_upgrading(bumped)[0] == CANARY
            # Helm's history agrees: the canary's release moved before the others.
            moved = {n: _helm_deployed_at(h, targets[n], NEWER) for n in STACKS}
            assert moved[CANARY] < moved["east"] and moved[CANARY] < moved["west"], moved
            # The others were seen waiting at their installed version meanwhile.
            waited = {
                name
                for _, seen in watcher.samples
                for name, (reason, installed) in seen.items()
                if reason == "UpgradePending" and installed == PIN
            }
            assert waited == {"east", "west"}

            # 2. A bump that breaks the canary leaves the rest where they are.
            revisions = {n: _revision(h, targets[n]) for n in STACKS}
            put_stack(hub, _stack(h, CANARY, MISSING))
            # The others move once the canary is seen behind: a change of
            # theirs that the operator reconciled first would rightly start,
            # since no canary had anything left to do then.
            wait_for(
                "the canary's upgrade to start",
                lambda: _up_to_date(h, CANARY).get("reason") in ("Upgrading", "UpgradeFailed"),
                deadline=60,
            )
            put_stack(hub, _stack(h, "east", PIN))
            put_stack(hub, _stack(h, "west", PIN))
            failed = h.wait_condition(
                "UpToDate", "False", "UpgradeFailed", name=CANARY, deadline=120
            )
            assert RESUME_ANNOTATION in failed["message"]
            for name in ("east", "west"):
                paused = h.wait_condition(
                    "UpToDate", "False", "RolloutPaused", name=name, deadline=60
                )
                assert f"{ns}/{CANARY}" in paused["message"]
            before = _reconcile_seconds(h)
            paused_at = time.monotonic()
            # A few resyncs: each waiting stack is reconciled at what it runs.
            time.sleep(15)
            after = _reconcile_seconds(h)
            # ...and across a restart: the pause is read back from the hub.
            h.kill()
            h.start(
                "--max-concurrent-upgrades", "1",
                "--canary-selector", f"{CANARY_LABEL}=true",
                "--upgrade-ready-timeout", "60s",
                "--resync", "5",
            )  # fmt: skip
            wait_for(
                "the restarted operator to reconcile", lambda: _reconciles(h) >= 6, deadline=60
            )
            for name in ("east", "west"):
                assert _up_to_date(h, name)["reason"] == "RolloutPaused"
                kps = _kps(h, name)
                assert (kps["version"], kps["installedVersion"]) == (PIN, NEWER)
                assert h.condition("Ready", name)["status"] == "True"
                assert _revision(h, targets[name]) == revisions[name]
            assert all(n <= {CANARY} for n in watcher.upgrading(paused_at))

            # 3. Resuming past the canary lets the rollout go on, one at a time.
            resumed = time.monotonic()
            hub.patch(
                SS,
                CANARY,
                {"metadata": {"annotations": {RESUME_ANNOTATION: "true"}}},
                namespace=ns,
                patch_type=PatchType.MERGE,
            )
            _wait_all(h, ("east", "west"), PIN, deadline=300)
            assert all(len(names) <= 1 for names in watcher.upgrading(resumed))
            for name in ("east", "west"):
                assert _revision(h, targets[name]) == revisions[name] + 1
            # The canary is still failed, no longer pausing; the annotation was taken.
            assert _up_to_date(h, CANARY)["reason"] == "UpgradeFailed"
            wait_for(
                "the resume annotation to be taken",
                lambda: (
                    RESUME_ANNOTATION
                    not in (hub.get(SS, CANARY, namespace=ns).metadata.annotations or {})
                ),
                deadline=30,
            )
        waiting = (after[0] - before[0]) / max(after[1] - before[1], 1)
        print(
            f"\nrollout of {len(STACKS)} stacks: {took:.1f}s; "
            f"while paused: {after[1] - before[1]:.0f} reconciles, {waiting * 1000:.0f} ms each"
        )
    finally:
        h.stop()
