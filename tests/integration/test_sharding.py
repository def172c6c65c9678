"""One hub's fleet split between operators, by label selector and by namespace.

Every stack is served by exactly the one shard whose namespace and selector
it matches, and by none when it matches none. The stacks point at a Secret
that does not exist, so that each shard's work shows on the hub (a status
and a finalizer) without a target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import SS, Harness, put_stack, stack_body
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.operator.handlers import FINALIZER

SELECTED = "shard-x"
OTHER = "shard-y"


def _tracked(h: Harness) -> int | None:
    """How many stacks the operator has seen on its watch (None: not serving metrics yet)."""
    try:
        text = h.scrape().text
    except httpx2.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "modelplane_tracked_stacks"
                and sample.labels.get("what") == "generations"
            ):
                return int(sample.value)
    return None


def _stack(hub: Client, ns: str, name: str) -> dict[str, Any]:
    return dict(hub.get(SS, name, namespace=ns).to_dict())


def _blocked(hub: Client, ns: str, name: str) -> bool:
    conditions = (_stack(hub, ns, name).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["reason"] == "SecretNotFound" for c in conditions)


def _labelled(ns: str, name: str, shard: str | None) -> dict[str, Any]:
    body = stack_body(ns, name, secret="missing")
    if shard is not None:
        body["metadata"]["labels"] = {"example.com/shard": shard}
    return body


def test_shards_split_a_fleet_by_selector_and_namespace(
    hub: Client, hub_env: TestEnv, tmp_path: Path
) -> None:
    # Nothing is installed: no chart is ever fetched from here.
    nowhere = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", tmp_path)
    shards: dict[str, Harness] = {}
    for name, ns in (("a", SELECTED), ("b", SELECTED), ("y", OTHER)):
        (tmp_path / name).mkdir()
        shards[name] = Harness(hub, hub_env, hub_env, nowhere, tmp_path / name, ns)
    stacks = {
        (SELECTED, "a1"): "a",
        (SELECTED, "a2"): "a",
        (SELECTED, "b1"): "b",
        (SELECTED, "nobody"): None,
        # Labelled for shard a, but outside its namespace.
        (OTHER, "y1"): "a",
    }
    for (ns, name), shard in stacks.items():
        put_stack(hub, _labelled(ns, name, shard))
    try:
        shards["a"].start("--selector", "example.com/shard=a")
        shards["b"].start("--selector", "example.com/shard in (b)")
        shards["y"].start()

        for ns, name in [(SELECTED, "a1"), (SELECTED, "a2"), (SELECTED, "b1"), (OTHER, "y1")]:
            wait_for(
                f"{name} reconciled", lambda ns=ns, name=name: _blocked(hub, ns, name), deadline=90
            )
        # Each shard saw exactly its own stacks: the hub filtered the others out.
        expected = {"a": 2, "b": 1, "y": 1}
        for shard, count in expected.items():
            wait_for(
                f"shard {shard} to track {count}",
                lambda shard=shard, count=count: _tracked(shards[shard]) == count,
                deadline=30,
            )
        for h in shards.values():
            assert h.reconciles() >= 1
        # The stack no shard selects is left alone: no status, no finalizer.
        nobody = _stack(hub, SELECTED, "nobody")
        assert not nobody.get("status")
        assert FINALIZER not in (nobody["metadata"].get("finalizers") or [])
        for ns, name in [(SELECTED, "a1"), (SELECTED, "b1"), (OTHER, "y1")]:
            assert _stack(hub, ns, name)["metadata"]["finalizers"] == [FINALIZER]

        # Moving a stack between shards hands it over: a forgets it, b takes it.
        hub.patch(
            SS,
            "a2",
            {"metadata": {"labels": {"example.com/shard": "b"}}},
            namespace=SELECTED,
            patch_type=PatchType.MERGE,
        )
        wait_for("shard a to drop a2", lambda: _tracked(shards["a"]) == 1, deadline=30)
        wait_for("shard b to take a2", lambda: _tracked(shards["b"]) == 2, deadline=30)
        # One finalizer, kept: shard a did not release what shard b holds.
        assert _stack(hub, SELECTED, "a2")["metadata"]["finalizers"] == [FINALIZER]
        assert shards["y"].operator_counter("modelplane_status_writes_total") == 1
    finally:
        for h in shards.values():
            h.stop()
        for ns, name in stacks:
            hub.patch(
                SS,
                name,
                {"metadata": {"finalizers": None}},
                namespace=ns,
                patch_type=PatchType.MERGE,
            )
            hub.delete(SS, name, namespace=ns)
