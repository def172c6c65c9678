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


# The upstream CRD folders (under ``upstream_dir()``) a cluster owner running
# the Standard stack's substrate would carry: Envoy Gateway's own Gateway
# API bundle (experimental channel), as its chart installs it, not the
# standard channel beside it. The simulated GPU cluster and the simulated
# fleet's targets carry these.
PROVIDED_STANDARD = (
    "cert-manager",
    "kube-prometheus-stack",
    "node-feature-discovery",
    "nvidia-dra-driver-gpu",
    "envoy-gateway",
    "envoy-ai-gateway",
    "gateway-api-inference-extension",
    "trust-manager",
    "leaderworkerset",
)


def upstream_dir() -> Path:
    env = os.environ.get("MODELPLANE_UPSTREAM_FIXTURES")
    return Path(env) if env else REPO.parent / "shared" / "fixtures" / "upstream"


def yaml_docs(path: Path) -> list[Any]:
    """Every document of a YAML file, as the safe loader reads it."""
    return list(yaml.load_all(path.read_text(), Loader=FAST_YAML))


def charts_dir() -> Path:
    """The real upstream charts' data files, ``<chart>/<version>/`` (see its README.md)."""
    return upstream_dir().parent / "charts"


def real_chart(chart: str, version: str) -> Path:
    """One real chart's data folder; the calling test skips, naming it, when it is absent."""
    import pytest

    path = charts_dir() / chart / version
    if not path.is_dir():
        pytest.skip(f"the real chart data {path} is not there (../shared/fixtures/charts)")
    return path
