"""Benchmark: what a long base-60 scalar costs to load, as YAML 1.1 read it and as we do.

To PyYAML (YAML 1.1) ``1:59:59:...`` is a base-60 integer, whose value
costs the square of its length to build: 180 KB of it took 3.8 s. The
product reads YAML as the API server does (``untrusted.load_yaml``), where
it is a string, built by a scan. This loads such a scalar at three lengths
both ways and prints the seconds each took: the old way grows with the
square of the length, the new one with the length.
tests/unit/test_untrusted.py checks that it is a string; the speed is here.

    python bench/bench_yaml_scalars.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modelplane.untrusted import load_yaml  # noqa: E402

REPEATS = (15_000, 30_000, 60_000)


def _seconds(load: Callable[[str], Any], text: str) -> float:
    start = time.perf_counter()
    load(text)
    return time.perf_counter() - start


def main() -> None:
    print(f"{'KB':>6} {'YAML 1.1 s':>11} {'load_yaml s':>12}")
    for repeats in REPEATS:
        text = "a: 1" + ":59" * repeats + "\n"
        assert isinstance(load_yaml(text)["a"], str)
        old = _seconds(yaml.safe_load, text)
        new = _seconds(load_yaml, text)
        print(f"{len(text) // 1024:>6} {old:>11.3f} {new:>12.4f}")


if __name__ == "__main__":
    main()
