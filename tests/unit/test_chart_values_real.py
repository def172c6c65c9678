"""What the catalog says each chart reads, against the real charts at the pins.

The ground truth is the charts' own data files (../shared/fixtures/charts,
read through tests.shared_fixtures; each test skips, saying where it looked,
when they are absent): every values path the catalog says a chart reads at
its version is in that chart's values.yaml (or a subchart's, or its
values.schema.json), and what the product composes for the example Standard
stack is read, and shows in the chart's render (``rendered-standard.yaml``,
``helm template`` with those very values).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.shared_fixtures import FAST_YAML, charts_dir, real_chart, yaml_docs

from modelplane.api.models import ServingStack
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.types import Component, ValuesRead
from modelplane.cli.inputs import load_yaml
from modelplane.plan.chart_values import leaf_paths
from modelplane.plan.images import parse_rules
from modelplane.plan.model import Plan, PlannedRelease
from modelplane.plan.planner import plan
from modelplane.plan.sources import Sources

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "servingstack.yaml"

CHARTS = [c for c in COMPONENTS if c.chart is not None]
BY_CHART = {c.chart.chart: c for c in CHARTS if c.chart is not None}


def _reads(component: Component, version: str) -> ValuesRead:
    assert component.chart is not None
    reads = component.chart.reads_at(version)
    assert reads is not None, f"the catalog has no ValuesRead for {component.name} {version}"
    return reads


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=FAST_YAML)


def _has(values: Any, keys: list[str]) -> bool:
    for key in keys:
        if not isinstance(values, dict) or key not in values:
            return False
        values = values[key]
    return True


def _resolve(node: Any, root: Any) -> Any:
    # Only local references: the charts' schemas keep every definition in $defs.
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def _schema_has(schema: Any, keys: list[str]) -> bool:
    node = _resolve(schema, schema)
    for key in keys:
        properties = node.get("properties", {}) if isinstance(node, dict) else {}
        if key not in properties:
            return False
        node = _resolve(properties[key], schema)
    return True


def where_listed(chart: Path, path: str) -> str | None:
    """The data file of the chart that lists ``path``, or None when none does."""
    keys = path.split(".")
    if _has(_load(chart / "values.yaml"), keys):
        return "values.yaml"
    sub = chart / "charts" / keys[0] / "values.yaml"
    if len(keys) > 1 and sub.is_file() and _has(_load(sub), keys[1:]):
        return f"charts/{keys[0]}/values.yaml"
    schema = chart / "values.schema.json"
    if schema.is_file() and _schema_has(json.loads(schema.read_text()), keys):
        return "values.schema.json"
    return None


# ---- the catalog's records against each chart's data files ---------------------------


def test_every_chart_there_is_a_pin_the_catalog_records() -> None:
    root = charts_dir()
    if not root.is_dir():
        pytest.skip(f"the real chart data {root} is not there (../shared/fixtures/charts)")
    found = sorted(
        (chart.name, version.name)
        for chart in root.iterdir()
        if chart.is_dir()
        for version in chart.iterdir()
        if version.is_dir()
    )
    assert found, f"no chart under {root}"
    for chart, version in found:
        assert chart in BY_CHART, f"{chart}: no component of the catalog installs it"
        _reads(BY_CHART[chart], version)


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_every_path_read_is_in_the_charts_values(component: Component) -> None:
    assert component.chart is not None
    chart = real_chart(component.chart.chart, component.version)
    reads = _reads(component, component.version)
    assert [p for p in reads.paths if where_listed(chart, p) is None] == []


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_a_path_read_though_unlisted_is_indeed_unlisted(component: Component) -> None:
    # Once the chart lists it, it belongs in ``paths``, where the data proves it.
    assert component.chart is not None
    chart = real_chart(component.chart.chart, component.version)
    reads = _reads(component, component.version)
    assert {p: where_listed(chart, p) for p, _ in reads.unlisted} == {
        p: None for p, _ in reads.unlisted
    }


# ---- what the product composes for the example Standard stack ----------------------------


def _standard(sources: Sources | None = None) -> Plan:
    return plan(ServingStack.model_validate(load_yaml(EXAMPLE)), None, sources)


# Bare, and with a mirror for every registry and a pull Secret: every image
# setting and pull-secret path of the Standard stack's charts is composed.
COMPOSITIONS = {
    "bare": None,
    "mirrored": Sources(
        image_mirrors=parse_rules(["*=mirror.internal"]), image_pull_secrets=("mirror-pull",)
    ),
}


@pytest.mark.parametrize("sources", list(COMPOSITIONS.values()), ids=list(COMPOSITIONS))
def test_every_path_composed_for_the_example_is_read(sources: Sources | None) -> None:
    p = _standard(sources)
    for release in p.releases:
        real_chart(release.chart, release.version)
        reads = _reads(BY_CHART[release.chart], release.version)
        assert release.refused == [], release.chart
        assert [x for x in leaf_paths(release.values) if not reads.reads(x)] == [], release.chart


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _rendered(chart: Path) -> str:
    """The render, with each Secret's data decoded: a value may reach a Secret only."""
    text = (chart / "rendered-standard.yaml").read_text()
    decoded = [
        base64.b64decode(encoded).decode()
        for doc in yaml_docs(chart / "rendered-standard.yaml")
        if isinstance(doc, dict) and doc.get("kind") == "Secret"
        for encoded in (doc.get("data") or {}).values()
    ]
    return "\n".join([text, *decoded])


def distinctive(release: PlannedRelease, chart: Path) -> list[str]:
    """The composed strings the chart's values.yaml does not hold: seen in the render,
    only the composed values can have put them there."""
    defaults = (chart / "values.yaml").read_text()
    return [s for s in dict.fromkeys(_strings(release.values)) if s not in defaults]


# Values composed since the renders were made (their README: product commit
# a8c7511), so no render can show them: each with the rendered field its path
# lands in, whole, which the render must show instead. kubeletPlugin.updateStrategy
# is the plugin DaemonSet's updateStrategy (templates/kubeletplugin.yaml).
SINCE_RENDER = {("dra-driver-nvidia-gpu", "OnDelete"): "  updateStrategy:\n"}


@pytest.mark.parametrize("chart", sorted({r.chart for r in _standard().releases}))
def test_each_distinctive_value_composed_for_the_example_shows_in_the_render(chart: str) -> None:
    [release] = [r for r in _standard().releases if r.chart == chart]
    data = real_chart(release.chart, release.version)
    rendered = _rendered(data)
    missing = [s for s in distinctive(release, data) if s not in rendered]
    assert [s for s in missing if SINCE_RENDER.get((chart, s), "\0") not in rendered] == []


def test_the_render_check_checks_something() -> None:
    # Guards the test above against passing on nothing: these charts are
    # given values their defaults do not hold.
    seen: dict[str, list[str]] = {}
    for release in _standard().releases:
        data = real_chart(release.chart, release.version)
        seen[release.chart] = distinctive(release, data)
    assert "modelplane-system" in seen["trust-manager"]
    assert "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local" in seen["gateway-helm"]
    assert "envoy-gateway-proxy" in seen["kube-prometheus-stack"]
