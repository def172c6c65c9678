"""The image's hashed requirements pin what hack/constraints.txt and pyproject.toml say.

hack/lock-image.py writes them (downloading and hashing each wheel); this
runs its offline check, so a relock of constraints.txt, or a dependency
added to pyproject.toml, without a new hack/image-requirements.txt fails
here rather than in the image build.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _lock_image() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_image", ROOT / "hack" / "lock-image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_requirements_are_current() -> None:
    lock = _lock_image()
    assert lock.problems((ROOT / "hack" / "image-requirements.txt").read_text()) == []


def test_a_stale_or_unhashed_pin_is_found() -> None:
    lock = _lock_image()
    text = (ROOT / "hack" / "image-requirements.txt").read_text()
    older = re.sub(r"^aiohttp==\S+", "aiohttp==3.9.0", text, flags=re.M)
    pinned = lock.pinned((ROOT / "hack" / "constraints.txt").read_text())["aiohttp"]
    assert [p for p in lock.problems(older) if p.startswith("aiohttp")] == [
        f"aiohttp: 3.9.0, constraints.txt pins {pinned}"
    ]
    unhashed = re.sub(r"^(yarl==\S+) \\\n(\s+--hash=\S+( \\)?\n)+", r"\1\n", text, flags=re.M)
    assert "yarl: no SHA-256 hash" in lock.problems(unhashed)
    dropped = re.sub(r"^h2==\S+ \\\n(\s+--hash=\S+( \\)?\n)+", "", text, flags=re.M)
    assert "h2: not pinned" in lock.problems(dropped)


def test_the_image_installs_with_hashes_and_builds_offline() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile
    assert "hack/image-requirements.txt" in dockerfile
    # The package itself: no index, no dependency, no build isolation (which
    # would fetch its build backend unhashed).
    assert "--no-index --no-deps --no-build-isolation" in dockerfile
    assert "!hack/image-requirements.txt" in (ROOT / ".dockerignore").read_text()
