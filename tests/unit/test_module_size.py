"""No module under src/ grows past 600 lines.

A module that long has usually taken on a second job; split it along its
seams (as plan/health.py, api/models.py, operator/handlers.py,
operator/reconciler.py and plan/planner.py were) rather than raise the limit.
"""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 600


def too_long(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Every Python module under ``root`` over ``limit`` lines, with its count."""
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            out.append(f"{path.relative_to(root)}: {lines} lines")
    return out


def test_no_module_is_over_the_limit() -> None:
    assert too_long(SRC) == []


def test_a_long_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == [f"pkg/long.py: {MAX_LINES + 1} lines"]
