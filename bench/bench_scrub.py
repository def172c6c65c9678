"""Benchmark: what scrubbing a long message costs, the shapes before and after.

A token service or a hostile target may send any text back, and every such
message passes ``scrub`` (or ``redact``) before a log, an Event or a status.
The shapes as they were began an attempt at each position of a long run of
their characters, each reading to the run's end: quadratic in the run. This
times both on the texts that showed it, 32k characters each, and on a short
ordinary message, and prints milliseconds per call.

    python bench/bench_scrub.py
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modelplane.kube.scrub import REDACTED, scrub  # noqa: E402

# The shapes as they were before they were made linear.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|$)", re.DOTALL)
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_JWT_SHAPED = re.compile(r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#\"'<>]*@")

SIZE = 32_000
TEXTS = {
    "base64url run": "a" * SIZE,
    "repeated JWT header": "eyJ" * (SIZE // 3),
    "dotted scheme run": "a." * (SIZE // 2),
    "ordinary message": "STS at sts.us-east-1.amazonaws.com refused https://u:p@m.example/x",
}


def scrub_before(text: str) -> str:
    """``scrub`` with no caller secrets, as it was."""
    text = _USERINFO.sub(r"\1", text)
    text = _PEM.sub(REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    return _JWT_SHAPED.sub(REDACTED, text)


def _ms_per_call(fn: Callable[[str], str], text: str) -> float:
    calls = 0
    start = time.perf_counter()
    while calls == 0 or time.perf_counter() - start < 0.2:
        fn(text)
        calls += 1
    return (time.perf_counter() - start) * 1000 / calls


def main() -> None:
    print(f"{'text':<22} {'chars':>7} {'before ms':>10} {'after ms':>9}")
    for name, text in TEXTS.items():
        assert scrub(text) == scrub_before(text), name
        before = _ms_per_call(scrub_before, text)
        after = _ms_per_call(scrub, text)
        print(f"{name:<22} {len(text):>7} {before:>10.2f} {after:>9.3f}")


if __name__ == "__main__":
    main()
