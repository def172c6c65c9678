"""Benchmark: peak memory of the advisories reading an alias-bomb ConfigMap, old and new.

    python bench/bench_alias_bomb.py [--levels N] [--cap-gib G]

The ConfigMap ``envoy-gateway-config`` (whoever may write ConfigMaps in
Envoy Gateway's namespace wrote it) holds a few hundred bytes of
nested YAML aliases under ``extensionManager``; the operator evaluates the
extensionManager advisory on it, as every resync of a Provided stack does.
Each path runs in a child process whose address space is capped with
RLIMIT_AS (2 GiB by default), so the machine stays safe; the child reports
its peak resident set (``ru_maxrss``), its time and what the advisory said.

- old: the code before issue 17, reproduced by putting back plain
  ``yaml.safe_load`` and the unbounded ``json.dumps`` the message used;
- new: the code as it is (``untrusted.load_yaml``, a bounded ``show``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from multiprocessing.connection import Connection
from typing import Any

import yaml

TITLE = "Envoy Gateway's extensionManager is wired to the AI Gateway"


def alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    lines.append(f"extensionManager: *a{levels}")
    return "\n".join(lines) + "\n"


def _old_show(value: Any, limit: int = 0) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _child(path: str, levels: int, cap: int, out: Connection) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from modelplane.catalog import advisories
    from modelplane.checks.checker import check_results
    from modelplane.pins import Stack
    from modelplane.plan.observed import ClusterFacts, Observed, ObservedConfigMap

    if path == "old":
        advisories.load_yaml = yaml.safe_load  # type: ignore[assignment]
        advisories.show = _old_show
    text = alias_bomb(levels)
    cm = ObservedConfigMap(
        namespace="envoy-gateway-system",
        name="envoy-gateway-config",
        data={"envoy-gateway.yaml": text},
    )
    observed = Observed(cluster=ClusterFacts(config_maps=[cm]))
    started = time.perf_counter()
    try:
        (found,) = [r for r in check_results(Stack.STANDARD, observed) if r.requirement == TITLE]
        outcome = f"{found.status}, a message of {len(found.message)} characters"
    except MemoryError:
        outcome = f"MemoryError at the {cap / 2**30:.0f} GiB cap"
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.send((len(text), peak_kib, seconds, outcome))


def measure(path: str, levels: int, cap: int) -> tuple[int, int, float, str]:
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(path, levels, cap, theirs))
    proc.start()
    theirs.close()
    try:
        result: tuple[int, int, float, str] = ours.recv()
    except EOFError:
        result = (0, 0, 0.0, f"the child died (exit code {proc.exitcode})")
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=9)
    parser.add_argument("--cap-gib", type=float, default=2.0)
    args = parser.parse_args()
    cap = int(args.cap_gib * 2**30)
    print(f"alias bomb of {args.levels} levels: 9**{args.levels} = {9**args.levels:,} nodes")
    for path in ("old", "new"):
        size, peak_kib, seconds, outcome = measure(path, args.levels, cap)
        print(
            f"{path:>4}: {size} bytes in, peak RSS {peak_kib / 1024:,.0f} MiB, "
            f"{seconds:.2f} s: {outcome}"
        )


if __name__ == "__main__":
    main()
