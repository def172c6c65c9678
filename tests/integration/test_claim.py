"""The claim on a target, against a real API server: one owner per target.

First the claim's steps on their own (a race, a resync, a release), then
whole operators: two ServingStacks in two hub namespaces, each with its own
operator process, pointed at one target, and a stack blocked by a claim
whose owner is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources import core_v1
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import SS, Harness, private_env
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.actions import claim
from modelplane.actions.claim import TARGET_CLAIMED, StackIdentity
from modelplane.api.models import ServingStack
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.kube.client import open_target
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

Event = tuple[str, str, str]


def _stack(namespace: str, name: str, uid: str) -> ServingStack:
    return ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"}]},
        }
    )


WEST = _stack("platform", "west", "0b7e2c1a-0000-4000-8000-00000000000a")
# The same namespace and name on another hub: only the UID differs.
WEST_ELSEWHERE = _stack("platform", "west", "0b7e2c1a-0000-4000-8000-00000000000b")


def _recorder() -> tuple[list[Event], claim.Emit]:
    events: list[Event] = []
    return events, lambda type_, reason, message: events.append((type_, reason, message))


# -- the claim's steps against a real API server -----------------------------


@pytest.fixture(scope="module")
def claim_env(
    testbin: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestEnv]:
    # Shared by the claim's step tests: each leaves the target unclaimed.
    with private_env(tmp_path_factory.mktemp("claim-target")) as env:
        yield env


@contextlib.asynccontextmanager
async def _free_target(env: TestEnv) -> AsyncIterator[AsyncClient]:
    """The product's client of the target, which is left without a claim afterwards."""
    # A loopback server: nothing is denied.
    target = await open_target(KubeConfig.from_dict(env.kubeconfig).get(), deny=(), trust_env=False)
    c = target.client
    try:
        yield c
    finally:
        # The namespace stays: a bare API server never finishes deleting one.
        try:
            await c.delete(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        except ApiError as err:
            if err.status.code != 404:
                raise
        await target.close()


async def _lease(c: AsyncClient) -> Lease:
    return await c.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)


async def test_racing_stacks_get_exactly_one_owner(claim_env: TestEnv) -> None:
    async with _free_target(claim_env) as client:
        for _ in range(5):
            events, emit = _recorder()
            results = await asyncio.gather(
                claim.before_reconcile(client, WEST, emit, None),
                claim.before_reconcile(client, WEST_ELSEWHERE, emit, None),
            )
            winners = [s for s, r in zip((WEST, WEST_ELSEWHERE), results, strict=True) if r is None]
            assert len(winners) == 1, results
            [winner] = winners
            [blocked] = [r for r in results if r is not None]
            lease = await _lease(client)
            assert lease.spec is not None
            assert lease.spec.holderIdentity == StackIdentity.of(winner).holder
            assert blocked.reason == TARGET_CLAIMED
            assert str(StackIdentity.of(winner)) in blocked.message
            assert sorted((t, r) for t, r, _ in events) == [
                ("Normal", "ClaimAcquired"),
                ("Warning", TARGET_CLAIMED),
            ]
            await client.delete(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)

        # The namespace the first claim needed was made the product's own.
        ns = await client.get(Namespace, CLAIM_NAMESPACE)
        assert ns.metadata is not None
        assert (ns.metadata.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


async def test_the_holder_resyncs_without_writing(claim_env: TestEnv) -> None:
    async with _free_target(claim_env) as client:
        events, emit = _recorder()
        assert await claim.before_reconcile(client, WEST, emit, None) is None
        before = await _lease(client)
        assert before.metadata is not None
        # Resyncs, and an operator restart: the same identity from a fresh read
        # of the same hub object is still the owner.
        for _ in range(3):
            restarted = _stack("platform", "west", StackIdentity.of(WEST).uid)
            assert await claim.before_reconcile(client, restarted, emit, None) is None
        after = await _lease(client)
        assert after.metadata is not None
        assert after.metadata.resourceVersion == before.metadata.resourceVersion
        assert [r for _, r, _ in events] == ["ClaimAcquired"]


async def test_a_blocked_stack_writes_nothing_and_warns_once(claim_env: TestEnv) -> None:
    async with _free_target(claim_env) as client:
        _, emit = _recorder()
        assert await claim.before_reconcile(client, WEST, emit, None) is None
        before = await _lease(client)

        events, emit = _recorder()
        blocked = await claim.before_reconcile(client, WEST_ELSEWHERE, emit, None)
        assert blocked is not None
        assert f"uid {StackIdentity.of(WEST).uid}" in blocked.message
        # The next resync finds the hub's status already saying so.
        status = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": blocked.reason,
                    "message": blocked.message,
                }
            ]
        }
        again = await claim.before_reconcile(client, WEST_ELSEWHERE, emit, status)
        assert again == blocked
        assert [(t, r) for t, r, _ in events] == [("Warning", TARGET_CLAIMED)]
        after = await _lease(client)
        assert after.metadata is not None and before.metadata is not None
        assert after.metadata.resourceVersion == before.metadata.resourceVersion


async def test_a_lease_that_names_nobody_is_taken(claim_env: TestEnv) -> None:
    async with _free_target(claim_env) as client:
        await client.create(
            Lease.from_dict(
                {
                    "metadata": {"name": CLAIM_NAME, "namespace": CLAIM_NAMESPACE},
                    "spec": {"holderIdentity": ""},
                }
            )
        )
        _, emit = _recorder()
        assert await claim.before_reconcile(client, WEST, emit, None) is None
        lease = await _lease(client)
        assert lease.spec is not None
        assert lease.spec.holderIdentity == StackIdentity.of(WEST).holder
        assert lease.spec.leaseTransitions == 1


async def test_teardown_releases_only_its_own_claim(claim_env: TestEnv) -> None:
    async with _free_target(claim_env) as client:
        _, emit = _recorder()
        assert await claim.before_reconcile(client, WEST, emit, None) is None

        # A stack the claim blocked: its deletion touches nothing, the claim included.
        events, emit = _recorder()
        assert await claim.before_teardown(client, WEST_ELSEWHERE, emit) is False
        await claim.after_teardown(client, WEST_ELSEWHERE, emit)
        lease = await _lease(client)
        assert lease.spec is not None
        assert lease.spec.holderIdentity == StackIdentity.of(WEST).holder
        [(type_, reason, message)] = events
        assert (type_, reason) == ("Normal", "TeardownSkipped")
        assert str(StackIdentity.of(WEST)) in message

        # The owner releases it as its last step.
        events, emit = _recorder()
        assert await claim.before_teardown(client, WEST, emit) is True
        await claim.after_teardown(client, WEST, emit)
        with pytest.raises(ApiError) as err:
            await _lease(client)
        assert err.value.status.code == 404
        assert [r for _, r, _ in events] == ["ClaimReleased"]


# -- whole operators ------------------------------------------------------------


class Operator:
    """A Harness (one hub namespace, one operator process) whose reconciles can be counted."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness

    def start(self) -> None:
        # At --resync 1 an owner re-checks every second; a blocked stack
        # every 10 s (the operator's retry for blocked stacks).
        self.h.start("--resync", "1")

    def reconciles(self, result: str) -> float:
        """Reconciles that ended with ``result``, from the operator's own metrics."""
        try:
            text = self.h.scrape().text
        except httpx2.HTTPError:
            return 0.0  # not serving yet
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "modelplane_reconciles_total" and s.labels.get("result") == result
        )

    def uid(self) -> str:
        obj = self.h.hub.get(SS, "stack", namespace=self.h.ns)
        assert obj.metadata is not None and obj.metadata.uid
        return obj.metadata.uid

    def holder(self) -> str:
        return f"{self.h.ns}/stack/{self.uid()}"

    def events(self, reason: str) -> list[dict[str, Any]]:
        events = self.h.hub.list(core_v1.Event, namespace=self.h.ns)
        return [e.to_dict() for e in events if e.reason == reason]

    def delete(self) -> None:
        self.h.hub.delete(SS, "stack", namespace=self.h.ns)

        def gone() -> bool:
            try:
                self.h.hub.get(SS, "stack", namespace=self.h.ns)
            except ApiError as err:
                return err.status.code == 404
            return False

        wait_for(f"ServingStack {self.h.ns}/stack to be gone", gone, deadline=120)


def _operator(
    hub: Client,
    hub_env: TestEnv,
    target: TestEnv,
    substrate: Substrate,
    tmp: Path,
    namespace: str,
    spec: dict[str, Any],
) -> Operator:
    tmp.mkdir()
    h = Harness(hub, hub_env, target, substrate, tmp, namespace)
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create(spec)
    return Operator(h)


def _lease_of(target: TestEnv) -> Lease | None:
    client = Client(KubeConfig.from_dict(target.kubeconfig))
    try:
        return client.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def _holder_and_version(target: TestEnv) -> tuple[str | None, str | None]:
    lease = _lease_of(target)
    if lease is None:
        return None, None
    assert lease.spec is not None and lease.metadata is not None
    return lease.spec.holderIdentity, lease.metadata.resourceVersion


def _revisions(h: Harness) -> dict[str, int]:
    return {name: int(r["revision"]) for name, r in h.helm_releases().items()}


def test_two_operators_on_one_target_never_flap(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp_path: Path
) -> None:
    # Two stacks that differ only in one pin: without a claim, each would
    # upgrade mp-kube-prometheus-stack to its own version on every resync.
    a = _operator(hub, hub_env, target, substrate, tmp_path / "a", "claim-two-a", {})
    b = _operator(
        hub,
        hub_env,
        target,
        substrate,
        tmp_path / "b",
        "claim-two-b",
        {"versions": {"prometheus": "84.5.0"}},
    )
    try:
        # Started together: the claim, not the start order, picks the owner.
        a.start()
        b.start()
        holder = wait_for("a claim on the target", lambda: _lease_of(target), deadline=60)
        assert holder.spec is not None
        owner, other = (a, b) if holder.spec.holderIdentity == a.holder() else (b, a)
        assert holder.spec.holderIdentity == owner.holder()

        owner.h.wait_condition("Ready", "True", deadline=180)
        blocked = other.h.wait_condition("Ready", "False", TARGET_CLAIMED, deadline=90)
        assert f"ServingStack {owner.h.ns}/stack (uid {owner.uid()})" in blocked["message"]
        assert f"kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}" in blocked["message"]

        revisions = _revisions(owner.h)
        assert set(revisions.values()) == {1}
        claim_before = _holder_and_version(target)
        owner_ok = owner.reconciles("ok")
        other_blocked = other.reconciles(TARGET_CLAIMED)
        wait_for(
            "several resyncs of both stacks",
            lambda: (
                owner.reconciles("ok") >= owner_ok + 3
                and other.reconciles(TARGET_CLAIMED) >= other_blocked + 2
            ),
            deadline=90,
        )
        # Nothing flapped: no release was upgraded, the Lease was not
        # written at all (its resourceVersion would have moved), and the
        # blocked stack warned once.
        assert _revisions(owner.h) == revisions
        assert _holder_and_version(target) == claim_before
        assert len(other.events(TARGET_CLAIMED)) == 1
        assert other.h.condition("Ready")["reason"] == TARGET_CLAIMED

        # Deleting the blocked stack leaves the owner's target as it is.
        other.delete()
        # kopf posts events from a queue of its own: one can trail the
        # finalizer's removal, and so the stack's disappearance.
        wait_for("the TeardownSkipped event", lambda: other.events("TeardownSkipped"), deadline=30)
        assert _revisions(owner.h) == revisions
        assert _holder_and_version(target) == claim_before
        assert owner.h.condition("Ready")["status"] == "True"

        # Deleting the owner tears down and releases the claim last.
        owner.delete()
        assert _lease_of(target) is None
        assert owner.h.helm_releases() == {}
        wait_for("the ClaimReleased event", lambda: owner.events("ClaimReleased"), deadline=30)
    finally:
        a.h.stop()
        b.h.stop()


def test_a_stale_claim_blocks_a_provided_stack_until_released_by_hand(
    hub: Client, hub_env: TestEnv, target: TestEnv, substrate: Substrate, tmp_path: Path
) -> None:
    # A claim left by a stack that is gone (deleted with skip-teardown, or
    # its hub lost): never taken silently, even for Provided mode, which
    # writes configuration too.
    direct = Client(KubeConfig.from_dict(target.kubeconfig), field_manager="owner")
    direct.create(Namespace.from_dict({"metadata": {"name": CLAIM_NAMESPACE}}))
    gone = "elsewhere/west/5d1e0000-dead-4000-8000-000000000000"
    direct.create(
        Lease.from_dict(
            {
                "metadata": {"name": CLAIM_NAME, "namespace": CLAIM_NAMESPACE},
                "spec": {"holderIdentity": gone},
            }
        )
    )
    op = _operator(
        hub,
        hub_env,
        target,
        substrate,
        tmp_path / "p",
        "claim-stale",
        {"components": "Provided", "gateway": {"hostname": "west.example.com"}},
    )
    try:
        writes = target.write_requests()
        claim_before = _holder_and_version(target)
        op.start()
        c = op.h.wait_condition("Ready", "False", TARGET_CLAIMED, deadline=60)
        assert (
            "ServingStack elsewhere/west (uid 5d1e0000-dead-4000-8000-000000000000)"
            in (c["message"])
        )
        assert f"kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}" in c["message"]
        seen = op.reconciles(TARGET_CLAIMED)
        wait_for(
            "two more reconciles of the blocked stack",
            lambda: op.reconciles(TARGET_CLAIMED) >= seen + 2,
            deadline=60,
        )
        assert target.write_requests() == writes
        assert _holder_and_version(target) == claim_before
        assert len(op.events(TARGET_CLAIMED)) == 1

        # Released by hand, as the message says: the stack takes the target.
        direct.delete(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        wait_for(
            "the stack to claim the target",
            lambda: _holder_and_version(target)[0] == op.holder(),
            deadline=60,
        )
        wait_for(
            "Ready to move past TargetClaimed",
            lambda: op.h.condition("Ready").get("reason") not in (None, TARGET_CLAIMED),
            deadline=60,
        )
        assert op.events("ClaimAcquired")

        op.delete()
        assert _lease_of(target) is None
    finally:
        op.h.stop()
