"""Where the shared fixtures are (``../shared/fixtures`` beside the repository), and reading them.

They are read where they lie, never copied into the project; a test that
needs them skips, saying where it looked, when they are not there.
``MODELPLANE_UPSTREAM_FIXTURES`` points elsewhere (a worktree, say).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]

# libyaml's loader: the upstream CRDs are 15 MB of YAML, which the pure
# Python loader takes tens of seconds to read on a shared CI core.
FAST_YAML: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def upstream_dir() -> Path:
    env = os.environ.get("MODELPLANE_UPSTREAM_FIXTURES")
    return Path(env) if env else REPO.parent / "shared" / "fixtures" / "upstream"


def yaml_docs(path: Path) -> list[Any]:
    """Every document of a YAML file, as the safe loader reads it."""
    return list(yaml.load_all(path.read_text(), Loader=FAST_YAML))
