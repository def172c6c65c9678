"""The catalog's images of each Standard chart, against what the real chart renders at its pin.

Every image the real render names (``rendered-standard.yaml``, hooks
included; a container's, or a custom resource's) is one the catalog lists
for that component, so a mirror rule, a pull secret and the air-gapped list
cover it; and every image the catalog says runs ALWAYS or as a HOOK is in
the render.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs

from modelplane.catalog.components import components_of_stack
from modelplane.catalog.images import ImageRef, Runs
from modelplane.pins import Stack

CHARTS = [c for c in components_of_stack(Stack.STANDARD) if c.chart is not None and c.images]


def _images(node: Any) -> Iterator[str]:
    """Every ``image`` anywhere in ``node``: a container's, or a custom resource's that its
    operator runs (the Prometheus object's ``spec.image``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from _images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def _rendered_images(render: Path) -> set[str]:
    return {str(ImageRef.parse(image)) for doc in yaml_docs(render) for image in _images(doc)}


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_the_catalog_knows_every_image_the_real_chart_runs(component: Any) -> None:
    assert component.chart is not None and component.images is not None
    render = real_chart(component.chart.chart, component.version) / "rendered-standard.yaml"
    rendered = _rendered_images(render)
    sites = component.images.sites
    listed = {str(s.default(component.version)) for s in sites}
    assert rendered <= listed, sorted(rendered - listed)
    running = {
        str(s.default(component.version)) for s in sites if s.runs in (Runs.ALWAYS, Runs.HOOK)
    }
    assert running <= rendered, sorted(running - rendered)
