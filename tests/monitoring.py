"""The chart's alert rules and dashboard as helm renders them, and the tools that check them.

promtool and prometheus come from Debian's ``prometheus`` package, which
hack/test-deps.sh installs; a test that needs them fails, saying so, when they
are missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.testenv import TestbinMissingError, find_binaries, helm_environ

CHART = Path(__file__).resolve().parents[1] / "deploy" / "chart"
RULES = "templates/prometheusrule.yaml"
DASHBOARD = "templates/dashboard.yaml"


def prometheus_tool(name: str) -> Path:
    """``promtool`` or ``prometheus`` on PATH, or the test fails with how to get it."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: run 'bash hack/test-deps.sh' (as root it installs Debian's "
            "prometheus package, which has promtool and prometheus), or "
            "'apt-get install --no-install-recommends prometheus'",
            pytrace=False,
        )
    return Path(found)


def render(home: Path, show_only: str, *sets: str) -> list[dict[str, Any]]:
    """The chart's documents from ``show_only``, rendered by the test helm with ``sets``."""
    try:
        helm = find_binaries()["helm"]
    except TestbinMissingError as err:
        pytest.fail(str(err), pytrace=False)
    args = [str(helm), "template", "mp", str(CHART), "--namespace", "modelplane"]
    args += ["--show-only", show_only]
    for value in sets:
        args += ["--set", value]
    proc = subprocess.run(
        args, env=helm_environ(home), capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def rule_file(home: Path, path: Path, *sets: str) -> dict[str, Any]:
    """The PrometheusRule's groups, written to ``path`` as a Prometheus rule file."""
    (rule,) = render(home, RULES, "prometheusRule.enabled=true", *sets)
    groups = {"groups": rule["spec"]["groups"]}
    path.write_text(yaml.safe_dump(groups))
    return groups
