"""A fleet's upgrade, staged: the canaries first, one stack at a time, paused by a failure.

Three stacks on three targets of their own: a canary in the hub namespace the
operator is told is the canary one (``--canary-namespace``), and two in a
team's namespace, one operator run with ``--max-concurrent-upgrades 1``. A
watcher reads the stacks' statuses throughout, so what is asserted is what
``kubectl get ss`` showed at each moment, and helm's own history on each
target says in which order the releases really moved. The canary goes first
both when an operator starts to find every stack behind at once and when
every stack's pin is edited at once, whichever stack's reconcile runs first.

A new operator release whose default pins moved is the first case; it is
made here by moving every stack's pin while the operator is down, since
the hub's CRD stores a default pin into each stack it creates (structural
defaulting), so a stack of this hub never follows a new default by itself.
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
    ensure_namespace,
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
CANARY = "canary"
TEAM = ("east", "west")
STACKS = (CANARY, *TEAM)


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

    def __init__(self, hub: Client, namespaces: tuple[str, ...]) -> None:
        self.hub, self.namespaces = hub, namespaces
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
            # One LIST of every namespace: one moment, whatever the namespaces.
            bodies = [o.to_dict() for o in self.hub.list(SS, namespace="*")]
            for body in bodies:
                if body["metadata"]["namespace"] not in self.namespaces:
                    continue
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


class Fleet:
    """The three stacks: the canary in the canary namespace, the others in a team's."""

    def __init__(self, hub: Client, team: str, ring: str) -> None:
        self.hub, self.team, self.ring = hub, team, ring

    def ns(self, name: str) -> str:
        return self.ring if name == CANARY else self.team

    def put(self, name: str, version: str) -> None:
        spec = {"versions": {"prometheus": version}}
        put_stack(self.hub, _stack_body(self.ns(name), name, spec, secret=f"kc-{name}"))

    def status(self, name: str) -> dict[str, Any]:
        obj = self.hub.get(SS, name, namespace=self.ns(name))
        return dict(obj.to_dict().get("status") or {})

    def condition(self, type_: str, name: str) -> dict[str, Any]:
        return next(
            (c for c in self.status(name).get("conditions") or [] if c["type"] == type_), {}
        )

    def kps(self, name: str) -> dict[str, Any]:
        return next(c for c in self.status(name)["components"] if c["name"] == KPS)

    def wait_all(self, names: tuple[str, ...], installed: str, deadline: float) -> None:
        for name in names:
            wait_for(
                f"{name} up to date at {installed}",
                lambda name=name: (
                    self.condition("UpToDate", name).get("status") == "True"
                    and self.kps(name).get("installedVersion") == installed
                    and self.condition("Ready", name).get("status") == "True"
                ),
                deadline=deadline,
            )

    def wait_reason(self, name: str, reasons: tuple[str, ...], deadline: float) -> dict[str, Any]:
        wait_for(
            f"{name}'s UpToDate to be one of {reasons}",
            lambda: self.condition("UpToDate", name).get("reason") in reasons,
            deadline=deadline,
        )
        return self.condition("UpToDate", name)


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


def _canary_first(
    h: Harness, watcher: Watcher, targets: dict[str, TestEnv], since: float, old: str, new: str
) -> None:
    """Since ``since``: one upgrade at a time, the canary's first, the others waiting at ``old``."""
    assert all(len(names) <= 1 for names in watcher.upgrading(since)), watcher.upgrading(since)
    assert watcher.first_upgrading(since)[0] == CANARY, watcher.first_upgrading(since)
    # Helm's history agrees: the canary's release moved before the others.
    moved = {n: _helm_deployed_at(h, targets[n], new) for n in STACKS}
    assert all(moved[CANARY] < moved[n] for n in TEAM), moved
    waited = {
        name
        for at, seen in watcher.samples
        if at >= since
        for name, (reason, installed) in seen.items()
        if reason == "UpgradePending" and installed == old
    }
    assert waited == set(TEAM)


def test_canaries_go_first_one_at_a_time_and_a_canarys_failure_pauses_the_rest(
    hub: Client,
    hub_env: TestEnv,
    targets: dict[str, TestEnv],
    substrate: Substrate,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    team = namespace_for("rollout", request.node.name)
    ring = namespace_for("the-canary", request.node.name)
    h = Harness(hub, hub_env, targets[CANARY], substrate, tmp_path, team)
    ensure_namespace(hub, ring)
    fleet = Fleet(hub, team, ring)
    for name in STACKS:
        put_kubeconfig(hub, fleet.ns(name), targets[name].kubeconfig, name=f"kc-{name}")
        fleet.put(name, PIN)
    flags = (
        "--namespace", ring,
        "--canary-namespace", ring,
        "--max-concurrent-upgrades", "1",
        "--upgrade-ready-timeout", "60s",
        "--resync", "5",
    )  # fmt: skip
    try:
        h.start(*flags)
        # A first install is not an upgrade: all three install at once.
        fleet.wait_all(STACKS, PIN, deadline=300)

        with Watcher(hub, (team, ring)) as watcher:
            # 1. An operator starts to find every stack behind at once, as a
            # new release with new default pins would, in whatever order its
            # listings of the two namespaces bring them.
            h.stop()
            moved = time.monotonic()
            for name in STACKS:
                fleet.put(name, NEWER)
            h.start(*flags)
            fleet.wait_all(STACKS, NEWER, deadline=300)
            _canary_first(h, watcher, targets, moved, PIN, NEWER)

            # 2. Every stack's pin edited at once, the canary's first: the
            # others' edits may reach the operator before it, and still wait.
            bumped = time.monotonic()
            for name in STACKS:
                fleet.put(name, PIN)
            fleet.wait_all(STACKS, PIN, deadline=300)
            _canary_first(h, watcher, targets, bumped, NEWER, PIN)

            # 3. A bump that breaks the canary pauses the rest, in another namespace.
            revisions = {n: _revision(h, targets[n]) for n in STACKS}
            fleet.put(CANARY, MISSING)
            failed = fleet.wait_reason(CANARY, ("UpgradeFailed",), deadline=120)
            assert RESUME_ANNOTATION in failed["message"]
            paused_at = time.monotonic()
            for name in TEAM:
                fleet.put(name, NEWER)
            for name in TEAM:
                paused = fleet.wait_reason(name, ("RolloutPaused",), deadline=60)
                # It says a canary elsewhere holds it, never which stack.
                assert "elsewhere" in paused["message"], paused
                assert ring not in paused["message"] and f"/{CANARY}" not in paused["message"]
                assert "pausedBy" not in (fleet.status(name).get("rollout") or {})
            # Reconciled meanwhile at what they run (a few resyncs, counted)...
            floor = h.reconciles()
            wait_for("a few resyncs", lambda: _reconciles(h) >= floor + 6, deadline=60)
            # ...and across a restart: the pause is read back from the hub.
            h.kill()
            h.start(*flags)
            wait_for(
                "the restarted operator to reconcile", lambda: _reconciles(h) >= 6, deadline=60
            )
            for name in TEAM:
                assert fleet.condition("UpToDate", name)["reason"] == "RolloutPaused"
                kps = fleet.kps(name)
                assert (kps["version"], kps["installedVersion"]) == (NEWER, PIN)
                assert fleet.condition("Ready", name)["status"] == "True"
                assert _revision(h, targets[name]) == revisions[name]
            assert all(n <= {CANARY} for n in watcher.upgrading(paused_at))

            # 4. Resuming past the canary lets the rollout go on, one at a time.
            resumed = time.monotonic()
            hub.patch(
                SS,
                CANARY,
                {"metadata": {"annotations": {RESUME_ANNOTATION: "true"}}},
                namespace=ring,
                patch_type=PatchType.MERGE,
            )
            fleet.wait_all(TEAM, NEWER, deadline=300)
            assert all(len(names) <= 1 for names in watcher.upgrading(resumed))
            for name in TEAM:
                assert _revision(h, targets[name]) == revisions[name] + 1
            # The canary is still failed, no longer pausing; the annotation was taken.
            assert fleet.condition("UpToDate", CANARY)["reason"] == "UpgradeFailed"
            wait_for(
                "the resume annotation to be taken",
                lambda: (
                    RESUME_ANNOTATION
                    not in (hub.get(SS, CANARY, namespace=ring).metadata.annotations or {})
                ),
                deadline=30,
            )
    finally:
        h.stop()
