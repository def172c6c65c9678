"""Two replicas of one operator against one hub: only the Lease holder acts.

A replica killed with SIGKILL (a node lost, an OOM kill) leaves its Lease to
expire; the standby then takes it and finishes what the leader started. A
replica stopped in order hands the Lease over at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import httpx2
from lightkube import Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret
from tests.integration.hubs import SS, Harness
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.actions.claim import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.catalog import components as catalog
from modelplane.operator.leader import lease_name

STANDARD_RELEASES = {
    f"mp-{c.chart.chart}"
    for c in catalog.components_of_stack(catalog.Stack.STANDARD)
    if c.chart is not None
}
LEASE_SECONDS = 6


def _replicas(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp: Path, ns: str
) -> tuple[Harness, Harness]:
    out = []
    for name in ("a", "b"):
        (tmp / name).mkdir()
        out.append(Harness(hub, hub_env, target, substrate, tmp / name, ns))
    return out[0], out[1]


def _elect(lease_seconds: int, ns: str) -> tuple[str, ...]:
    return (
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--leader-election-lease-duration",
        str(lease_seconds),
        "--leader-election-renew-deadline",
        str(lease_seconds * 2 // 3),
        "--leader-election-retry-period",
        "1",
    )


def _leading(h: Harness) -> bool:
    try:
        return h.operator_counter("modelplane_leader") == 1
    except httpx2.HTTPError:  # its metrics are not served yet
        return False


def _standing_by(h: Harness) -> bool:
    try:
        return h.operator_counter("modelplane_leader") == 0
    except httpx2.HTTPError:
        return False


def _holder(hub: Client, ns: str) -> str | None:
    lease = hub.get(Lease, lease_name([ns], None), namespace=ns)
    return lease.spec.holderIdentity if lease.spec else None


def _kill_tree(h: Harness) -> None:
    """SIGKILL the operator and its helm children at once, as a node loss would."""
    assert h.proc is not None
    pid = h.proc.pid
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            children.append(int(stat.parent.name))
    h.kill()
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def _helm_storage(h: Harness) -> dict[str, list[tuple[str, int, str]]]:
    """Every revision helm stored on the target, per release: (namespace, revision, status)."""
    out: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    for secret in h.target.list(Secret, namespace="*", labels={"owner": "helm"}):
        labels = (secret.metadata.labels if secret.metadata else None) or {}
        namespace = secret.metadata.namespace if secret.metadata else ""
        out[labels["name"]].append((namespace or "", int(labels["version"]), labels["status"]))
    return {name: sorted(revisions) for name, revisions in out.items()}


def test_standby_finishes_a_managed_install_after_the_leader_is_killed(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp_path: Path
) -> None:
    ns = "ha-failover"
    a, b = _replicas(hub, hub_env, target, substrate, tmp_path, ns)
    try:
        a.start(*_elect(LEASE_SECONDS, ns))
        wait_for("replica a to lead", lambda: _leading(a), deadline=60)
        b.start(*_elect(LEASE_SECONDS, ns))
        wait_for("replica b to stand by", lambda: _standing_by(b), deadline=60)

        a.put_secret({"kubeconfig": a.kubeconfig_text()})
        a.create({})
        wait_for("a first deployed release", lambda: a.helm_releases(), deadline=120)
        # The standby has done nothing: no reconcile, no status write, and
        # the Lease still names the leader.
        assert b.reconciles() == 0
        assert b.operator_counter("modelplane_status_writes_total") == 0
        leader = _holder(hub, ns)
        _kill_tree(a)
        killed_at = time.monotonic()
        before = a.helm_releases()
        assert before and set(before) < STANDARD_RELEASES, "the kill did not land mid-install"
        # Still the dead leader's until the Lease expires on b's clock.
        assert _holder(hub, ns) == leader

        wait_for("replica b to take over", lambda: _leading(b), deadline=60)
        took_over = time.monotonic() - killed_at
        assert _holder(hub, ns) not in (None, leader)
        # Not before the dead leader's Lease ran out: no overlap.
        assert took_over >= LEASE_SECONDS - 1.5, took_over
        b.wait_condition("Ready", "True", deadline=180)

        storage = _helm_storage(b)
        assert set(storage) == STANDARD_RELEASES
        for name, revisions in storage.items():
            # One release of each name, in one namespace, numbered without
            # gaps, exactly one revision deployed and none left pending.
            assert len({r[0] for r in revisions}) == 1, (name, revisions)
            assert [r[1] for r in revisions] == list(range(1, len(revisions) + 1)), revisions
            assert [r[2] for r in revisions].count("deployed") == 1, (name, revisions)
            assert not any(r[2].startswith("pending") for r in revisions), (name, revisions)
        # What the dead leader had deployed was not installed again.
        for name, release in before.items():
            if release["status"] == "deployed":
                assert [r[1] for r in storage[name]] == [int(release["revision"])], storage[name]
        # The target is still claimed by the one stack, not by a replica.
        claim = b.target.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        stack = hub.get(SS, "stack", namespace=ns)
        assert claim.spec is not None and stack.metadata is not None
        assert claim.spec.holderIdentity == f"{ns}/stack/{stack.metadata.uid}"
    finally:
        a.stop()
        b.stop()


def test_an_orderly_stop_hands_the_lease_over_at_once(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp_path: Path
) -> None:
    ns = "ha-handover"
    lease_seconds = 60
    a, b = _replicas(hub, hub_env, target, substrate, tmp_path, ns)
    try:
        a.start(*_elect(lease_seconds, ns))
        wait_for("replica a to lead", lambda: _leading(a), deadline=60)
        b.start(*_elect(lease_seconds, ns))
        wait_for("replica b to stand by", lambda: _standing_by(b), deadline=60)
        leader = _holder(hub, ns)

        stopped_at = time.monotonic()
        a.stop()  # SIGTERM
        wait_for("replica b to take over", lambda: _leading(b), deadline=lease_seconds * 2)
        # An expired Lease would have taken a full minute.
        assert time.monotonic() - stopped_at < lease_seconds / 2
        assert _holder(hub, ns) not in (None, leader)
    finally:
        a.stop()
        b.stop()
