"""The suite in a clone with no ``../shared`` beside it: collected whole, nothing read at import.

Tests that need the shared fixtures skip, naming what they looked for
(``tests/shared_fixtures.py``, ``simulated``, and ``tests/conftest.py``'s
rule for a missing GPU profile); none may fail for want of them. A module
that read them while being collected would error here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.testenv.nodes import HARDWARE_ENV

ROOT = Path(__file__).resolve().parents[2]


def test_the_suite_collects_with_the_shared_fixtures_hidden(tmp_path: Path) -> None:
    nowhere = tmp_path / "no-shared"
    env = {
        **os.environ,
        "MODELPLANE_UPSTREAM_FIXTURES": str(nowhere / "fixtures" / "upstream"),
        HARDWARE_ENV: str(nowhere / "fixtures" / "hardware" / "nvidia-h200"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " error" not in done.stdout.splitlines()[-1], done.stdout[-2000:]
