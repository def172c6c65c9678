"""Benchmark: what parsing a target's answers costs, the standard library against ``load_json``.

JSON decoding was the largest part of a starting shard's CPU (a profile of
10,000 targets over 4 shards put 41% there: watch events, LISTs and
discovery). This parses what a target sends the operator most, the
project's fixture CRDs as one LIST and as watch events, and a Node's
MODIFIED event, three ways, and prints the time each takes per document:
``json.loads`` alone; ``load_json`` as it was before (``json.loads``, then
a depth check that visited every value); and ``untrusted.load_json`` now
(msgspec, then a depth check that visits only containers).

    python bench/bench_json.py
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modelplane.kube.reflector import MAX_WATCH_LINE  # noqa: E402
from modelplane.untrusted import Limits, load_json  # noqa: E402

# As the watch parses an event line, and as the client parses an answer.
EVENT_LIMITS = Limits(max_bytes=MAX_WATCH_LINE, max_depth=256)
ANSWER_LIMITS = Limits(max_bytes=64 * 1024 * 1024, max_depth=256)


def _node_event() -> bytes:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-0",
            "resourceVersion": "123456",
            "labels": {f"feature.node.kubernetes.io/f{i}": "true" for i in range(40)},
        },
        "status": {
            "capacity": {"cpu": "96", "memory": "2Ti", "nvidia.com/gpu": "8"},
            "conditions": [
                {"type": t, "status": "False", "reason": f"Kubelet{t}", "message": "ok " * 10}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
        },
    }
    return json.dumps({"type": "MODIFIED", "object": node}, separators=(",", ":")).encode()


def _depth_before(doc: Any, max_depth: int) -> None:
    """The depth check ``load_json`` ran before: every value pushed, leaves too."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= max_depth:
            raise ValueError("too deep")
        stack.extend((child, depth + 1) for child in children)


def _before(text: bytes, limits: Limits) -> Any:
    doc = json.loads(text)
    _depth_before(doc, limits.max_depth)
    return doc


def _per_doc(parse: Callable[[bytes], Any], docs: list[bytes], rounds: int) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        for doc in docs:
            parse(doc)
    return (time.perf_counter() - started) / (rounds * len(docs))


def main() -> None:
    crds = [
        doc
        for path in sorted((ROOT / "tests/fixtures/crds").rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    ]
    events = [
        json.dumps({"type": "ADDED", "object": crd}, separators=(",", ":")).encode() for crd in crds
    ]
    listing = json.dumps({"kind": "List", "items": crds}, separators=(",", ":")).encode()
    cases = [
        (f"a LIST of {len(crds)} CRDs, {len(listing) / 1024:.0f} KiB", [listing], ANSWER_LIMITS),
        (f"{len(events)} CRD watch events", events, EVENT_LIMITS),
        ("a Node's MODIFIED event", [_node_event()], EVENT_LIMITS),
    ]
    print(f"{'per document':<36} {'json.loads':>11} {'before':>11} {'load_json':>11} {'gain':>5}")
    for name, docs, limits in cases:
        rounds = max(1, 20_000 // max(1, sum(map(len, docs)) // 1000))
        stdlib = _per_doc(json.loads, docs, rounds)
        before = _per_doc(lambda d, limits=limits: _before(d, limits), docs, rounds)
        now = _per_doc(lambda d, limits=limits: load_json(d, limits), docs, rounds)
        print(
            f"{name:<36} {stdlib * 1e6:>9.1f}us {before * 1e6:>9.1f}us "
            f"{now * 1e6:>9.1f}us {before / now:>4.1f}x"
        )


if __name__ == "__main__":
    main()
