"""Benchmark: what the CRD watch's copy of a real target's CRDs holds, whole and outlined.

Every CRD of a target is watched (their events tell when the served APIs
change). The simulated fleet's targets carry the project's small fixture
CRDs; a real target carries its components' real CRDs, schemas and all.
This reads the real upstream CRDs of the Standard stack's components from
``../shared/fixtures/upstream`` (or --fixtures), parses each as the watch
does (JSON, as the API server sends it), and prints the Python memory one
target's copy takes kept whole and kept as ``observe.crd_outline.crd_outline``
keeps it, with the bytes on the wire.

    python bench/bench_crd_copies.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modelplane.kube.reflector import MAX_WATCH_LINE  # noqa: E402
from modelplane.observe.crd_outline import crd_outline  # noqa: E402
from modelplane.untrusted import Limits, load_json  # noqa: E402

# As the watch parses an event line (kube.reflector).
EVENT_LIMITS = Limits(max_bytes=MAX_WATCH_LINE, max_depth=256)

# The Standard stack's components whose CRDs a Provided target carries.
STANDARD = (
    "cert-manager",
    "envoy-ai-gateway",
    "envoy-gateway",
    "gateway-api-inference-extension",
    "kube-prometheus-stack",
    "leaderworkerset",
    "node-feature-discovery",
    "trust-manager",
)


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list):
        size += sum(_deep_size(v, seen) for v in obj)
    return size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", type=Path, default=ROOT.parent / "shared/fixtures/upstream")
    args = parser.parse_args()
    if not args.fixtures.is_dir():
        sys.exit(f"no upstream fixtures at {args.fixtures}: pass --fixtures")
    wire: list[bytes] = []
    for component in STANDARD:
        for path in sorted((args.fixtures / component).glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    wire.append(json.dumps(doc, separators=(",", ":")).encode())
    started = time.perf_counter()
    whole = [load_json(line, EVENT_LIMITS) for line in wire]
    parse = time.perf_counter() - started
    started = time.perf_counter()
    outlines = [crd_outline(crd) for crd in whole]
    outline = time.perf_counter() - started
    whole_bytes = _deep_size(whole, set())
    outline_bytes = _deep_size(outlines, set())
    mib = sum(map(len, wire)) / 2**20
    print(f"{len(wire)} CRDs of {len(STANDARD)} components, {mib:.1f} MiB on the wire (JSON)")
    print(f"kept whole: {whole_bytes / 2**20:.1f} MiB of Python objects per target")
    print(f"kept as outlines: {outline_bytes / 1024:.0f} KiB per target")
    print(f"parse {parse * 1000:.0f} ms, outline {outline * 1000:.1f} ms per target's LIST")


if __name__ == "__main__":
    main()
