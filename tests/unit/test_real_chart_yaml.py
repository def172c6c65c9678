"""The real charts' CRDs and renders read by the product's own readers, as Kubernetes reads them.

Every ``crds.yaml`` (``helm show crds``) goes through the chart-CRD reader,
every ``rendered-standard.yaml`` (``helm template``) through the reader of a
release's stored manifest, under the limits the product gives each. A few
MB of YAML take the pure-Python loader seconds: one test per file, so they
spread over the workers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from tests.shared_fixtures import charts_dir

from modelplane.actions.chart_crds import read_chart_crds
from modelplane.catalog import components as catalog
from modelplane.plan.chart_crds import foreign
from modelplane.plan.manifest import manifest_workloads

_WORKLOAD = re.compile(r"^kind: (?:Deployment|DaemonSet|StatefulSet|Job)$", re.M)


def _files(name: str) -> list[Path | None]:
    root = charts_dir()
    found = sorted(root.glob(f"*/*/{name}")) if root.is_dir() else []
    return list(found) or [None]  # one case that skips, saying where it looked


def _id(path: Path | None) -> str:
    return "absent" if path is None else f"{path.parent.parent.name}-{path.parent.name}"


def _present(path: Path | None) -> Path:
    if path is None or not path.is_file():
        pytest.skip(f"the real chart data {charts_dir()} is not there (../shared/fixtures/charts)")
    return path


@cache
def _crds(path: Path) -> list[dict[str, Any]]:
    # kube-prometheus-stack's take seconds, and two tests read them.
    return read_chart_crds(path.read_text(), "mp-test")


@pytest.mark.parametrize("path", _files("crds.yaml"), ids=_id)
def test_a_real_charts_crds_are_read(path: Path | None) -> None:
    crds = _crds(_present(path))
    assert all(c["kind"] == "CustomResourceDefinition" for c in crds)


@pytest.mark.parametrize("path", _files("crds.yaml"), ids=_id)
def test_every_group_a_real_chart_ships_in_crds_is_its_components(path: Path | None) -> None:
    # The product refuses a chart's CRD of a group the catalog does not name
    # for its component (plan.chart_crds): the real chart must pass whole.
    crds = _crds(_present(path))
    assert path is not None
    (component,) = [
        c for c in catalog.COMPONENTS if c.chart is not None and c.chart.chart == path.parts[-3]
    ]
    assert component.chart is not None
    release = component.release_name
    refused = [r.message for c in crds if (r := foreign(c, release, component.crd_groups))]
    assert refused == []
    # And what the catalog lists besides its requirements is in the chart at
    # its pin: no group is allowed that the chart does not ship.
    if path.parts[-2] == component.version:
        shipped = {c["spec"]["group"] for c in crds}
        assert set(component.chart.crd_groups) <= shipped, component.name


@pytest.mark.parametrize("path", _files("rendered-standard.yaml"), ids=_id)
def test_a_real_charts_render_is_read_as_a_stored_manifest(path: Path | None) -> None:
    text = _present(path).read_text()
    workloads = manifest_workloads(text, "mp-test")
    # Every workload of the render, as a scan of its text finds them.
    assert len(workloads) == len(_WORKLOAD.findall(text))


def _property(schema: Any, name: str) -> Iterator[dict[str, Any]]:
    """Every schema under a property ``name``, at any depth."""
    if isinstance(schema, dict):
        below = schema.get("properties")
        if isinstance(below, dict) and isinstance(below.get(name), dict):
            yield below[name]
        for value in schema.values():
            yield from _property(value, name)
    elif isinstance(schema, list):
        for value in schema:
            yield from _property(value, name)


def test_the_alertmanager_config_match_type_enum_holds_equals() -> None:
    # ``- =`` in the enum, which PyYAML's own resolution refused.
    crds = _crds(_present(charts_dir() / "kube-prometheus-stack" / "84.4.0" / "crds.yaml"))
    (crd,) = [
        c for c in crds if c["metadata"]["name"] == "alertmanagerconfigs.monitoring.coreos.com"
    ]
    enums = [p.get("enum") for p in _property(crd["spec"], "matchType")]
    assert len(enums) == 3
    assert all(e == ["!=", "=", "=~", "!~"] for e in enums), enums
