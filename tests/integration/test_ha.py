"""Two replicas of one operator against one hub: only the Lease holder acts.

A replica killed with SIGKILL (a node lost, an OOM kill) leaves its Lease to
expire; the standby then takes it and finishes what the leader started. A
replica stopped in order hands the Lease over at once. What each did is read
from the Lease's writes, in order, as a watch sees them; when a standby may
take an unreleased Lease is the Elector's rule, tested on the real API
server with a clock the test moves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import httpx2
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret
from tests.integration.hubs import SS, Harness, ensure_namespace
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.actions.claim import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.catalog import components as catalog
from modelplane.operator.leader import Elector, LeaderElection, lease_name

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
    return _holder_of(hub.get(Lease, lease_name([ns], None), namespace=ns))


def _holder_of(lease: Lease) -> str | None:
    return lease.spec.holderIdentity if lease.spec else None


class _LeaseWrites:
    """The writes to one Lease after the version it has now, in order, up to the first ``last``.

    A watch from that version, on a thread and a client of its own, sees
    every write, however soon one follows another.
    """

    def __init__(self, env: TestEnv, ns: str, name: str, last: Callable[[Lease], bool]) -> None:
        self._client = Client(KubeConfig.from_file(env.kubeconfig_path))
        current = self._client.get(Lease, name, namespace=ns)
        assert current.metadata is not None
        # The record as it was before the first write seen.
        self.start = current
        self.writes: list[Lease] = []
        self._last = last
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._follow, args=(ns, name, current.metadata.resourceVersion), daemon=True
        )
        self._thread.start()

    def _follow(self, ns: str, name: str, since: str | None) -> None:
        watch = self._client.watch(
            Lease, namespace=ns, fields={"metadata.name": name}, resource_version=since
        )
        with contextlib.suppress(httpx2.HTTPError):  # closed under it: the test is over
            for _, lease in watch:
                self.writes.append(lease)
                if self._last(lease):
                    self._done.set()
                    return

    def wait(self, what: str, deadline: float) -> list[Lease]:
        wait_for(what, self._done.is_set, deadline=deadline)
        return list(self.writes)

    def close(self) -> None:
        self._client.close()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command: state, parent, group, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _operator_children(h: Harness) -> list[int]:
    """The operator's child processes: the helm runs in flight."""
    assert h.proc is not None
    children = []
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and fields[1] == str(h.proc.pid):
            children.append(int(entry.name))
    return children


def _running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _kill_tree(h: Harness) -> None:
    """SIGKILL the operator and every helm it runs at once, as a node loss would."""
    children = _operator_children(h)
    h.kill()
    for child in children:
        # Each helm leads a process group of its own, holding what it started.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)


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
    lease: _LeaseWrites | None = None
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
        lease = _LeaseWrites(
            hub_env, ns, lease_name([ns], None), lambda w: _holder_of(w) not in (None, leader)
        )
        _kill_tree(a)
        before = a.helm_releases()
        assert before and set(before) < STANDARD_RELEASES, "the kill did not land mid-install"
        # Still the dead leader's until the Lease expires on b's clock.
        assert _holder(hub, ns) == leader

        wait_for("replica b to take over", lambda: _leading(b), deadline=60)
        writes = lease.wait("b's write to the Lease", deadline=30)
        # The dead leader wrote nothing but its last renewals: never released,
        # the Lease went to b only by expiring (when an unrenewed Lease
        # expires is the test below). b took it in one write, one transition.
        *renewals, taken = writes
        assert all(_holder_of(w) == leader for w in renewals), [_holder_of(w) for w in writes]
        last = ([lease.start, *renewals])[-1]
        assert taken.spec is not None and last.spec is not None
        assert taken.spec.leaseTransitions == (last.spec.leaseTransitions or 0) + 1
        assert _holder(hub, ns) == _holder_of(taken)
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
        if lease is not None:
            lease.close()


def test_an_orderly_stop_ends_its_helm_and_hands_the_lease_over_at_once(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp_path: Path
) -> None:
    ns = "ha-handover"
    lease_seconds = 60
    a, b = _replicas(hub, hub_env, target, substrate, tmp_path, ns)
    lease: _LeaseWrites | None = None
    try:
        a.start(*_elect(lease_seconds, ns))
        wait_for("replica a to lead", lambda: _leading(a), deadline=60)
        b.start(*_elect(lease_seconds, ns))
        wait_for("replica b to stand by", lambda: _standing_by(b), deadline=60)
        leader = _holder(hub, ns)
        a.put_secret({"kubeconfig": a.kubeconfig_text()})
        a.create({})
        helm = wait_for("replica a to run helm", lambda: _operator_children(a), deadline=120)
        lease = _LeaseWrites(
            hub_env, ns, lease_name([ns], None), lambda w: _holder_of(w) not in (None, leader)
        )

        a.stop()  # SIGTERM, mid-install
        # The helm it ran went with it: nothing acts for a replica that stopped.
        assert not [pid for pid in helm if _running(pid)], helm
        wait_for("replica b to take over", lambda: _leading(b), deadline=lease_seconds * 2)
        writes = lease.wait("b's write to the Lease", deadline=30)
        # a's last write emptied the Lease, and b's was the next: b took a
        # released Lease, not one that had run out.
        *before, released, taken = writes
        assert all(_holder_of(w) == leader for w in before), [_holder_of(w) for w in writes]
        assert released.spec is not None and released.spec.holderIdentity is None
        assert released.spec.leaseDurationSeconds == 1
        assert _holder_of(taken) not in (None, leader)
        assert _holder(hub, ns) == _holder_of(taken)
    finally:
        a.stop()
        b.stop()
        if lease is not None:
            lease.close()


async def test_a_standby_takes_a_lease_only_once_it_went_unrenewed_for_its_duration(
    hub: Client, hub_env: TestEnv
) -> None:
    # client-go's rule, on the real API server: expiry is judged on the
    # standby's own clock, from when it saw the record last change.
    ns = "ha-expiry"
    ensure_namespace(hub, ns)
    now = [0.0]

    clients: list[AsyncClient] = []

    def elector(identity: str) -> Elector:
        config = LeaderElection(
            namespace=ns, name="expiry", identity=identity, lease_duration_seconds=15
        )
        clients.append(AsyncClient(KubeConfig.from_file(hub_env.kubeconfig_path)))
        return Elector(clients[-1], config, clock=lambda: now[0])

    a, b = elector("a"), elector("b")
    try:
        assert await a.try_once() == "a"
        assert await b.try_once() == "a"  # b sees the record at 0
        now[0] = 14.9
        assert await b.try_once() == "a"
        # a renews: b sees a new record at 15, and counts from there.
        now[0] = 15.0
        assert await a.try_once() == "a"
        assert await b.try_once() == "a"
        now[0] = 29.9
        assert await b.try_once() == "a"
        now[0] = 30.0
        assert await b.try_once() == "b"
        taken = hub.get(Lease, "expiry", namespace=ns)
        assert taken.spec is not None
        assert (taken.spec.holderIdentity, taken.spec.leaseTransitions) == ("b", 1)
        # a, on its own clock, finds the Lease another's and does not take it back.
        assert await a.try_once() == "b"
    finally:
        for client in clients:
            await client.close()
