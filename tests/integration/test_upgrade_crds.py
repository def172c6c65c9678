"""From the previous tested combination to the current one, on the simulated GPU cluster.

The fixture charts here keep their CRDs where the real charts do
(``upstream_crds=True``: crds/, a crds subchart's crds/, or templates/), and
each chart also comes at the version before its pin, whose CRDs declare one
field fewer (``fixture.after``). Helm installs a chart's crds/ once and never
upgrades it, so without the product's own apply the cluster would keep the
old CRDs and prune that field from every object written after the upgrade.

The cluster is this module's own: the CRDs of crds/ outlive the stack's
teardown, by design, and must not leak into the session's shared targets.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Event
from tests.integration.hubs import SS, Harness, ensure_namespace
from tests.integration.simcluster import simulated
from tests.integration.substrate import (
    CHART_CRDS,
    Substrate,
    previous_version,
    serve_substrate,
)
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.types import Component

STANDARD = [c for c in catalog.components_of_stack(catalog.Stack.STANDARD) if c.chart is not None]
# The charts whose CRDs Helm would leave at their first version.
CRDS_OUTSIDE_TEMPLATES = [
    c
    for c in STANDARD
    if c.chart is not None and not c.chart.crds.helm_upgrades and CHART_CRDS[c.chart.chart]
]
PROBES = "upgrade-probes"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    with simulated(tmp_path_factory.mktemp("sim-upgrade")) as env:
        yield env


@pytest.fixture(scope="module")
def upstream_substrate(helm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    yield from serve_substrate(
        helm, tmp_path_factory.mktemp("substrate"), workloads=True, upstream_crds=True
    )


def _previous_versions() -> dict[str, Any]:
    """A spec fragment pinning every versioned Standard component one version back."""
    spec: dict[str, Any] = {}
    for c in STANDARD:
        if c.version_field is None:
            continue
        section, field = c.version_field.split(".")
        spec.setdefault(section, {})[field] = previous_version(c.version)
    return spec


def _versioned(c: Component) -> bool:
    return c.version_field is not None


def _charts(h: Harness) -> dict[str, str]:
    """Release name -> ``chart-version``, as helm lists it."""
    return {name: r["chart"] for name, r in h.helm_releases().items()}


def _at(c: Component, version: str) -> str:
    assert c.chart is not None
    return f"{c.chart.chart}-{version}"


def _log(h: Harness) -> str:
    return h.log.read_text(errors="replace")[-6000:]


def _fields(target: Client, name: str) -> set[str]:
    body = target.get(CustomResourceDefinition, name).to_dict()
    (version,) = body["spec"]["versions"]
    fixture = version["schema"]["openAPIV3Schema"]["properties"]["fixture"]
    return set(fixture["properties"])


def _probe_resource(group: str, version: str, plural: str, kind: str, namespaced: bool) -> Any:
    if namespaced:
        return create_namespaced_resource(group, version, kind, plural)
    return create_global_resource(group, version, kind, plural)


def _events(h: Harness) -> list[dict[str, Any]]:
    """The stack's events on the hub, in the order the hub stored them."""
    events = [e.to_dict() for e in h.hub.list(Event, namespace=h.ns)]
    return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))


def test_the_whole_stack_upgrades_from_the_previous_versions_with_its_crds(
    hub: Client,
    hub_env: TestEnv,
    own_cluster: TestEnv,
    upstream_substrate: Substrate,
    tmp_path: Path,
) -> None:
    assert CRDS_OUTSIDE_TEMPLATES, "no fixture chart keeps its CRDs outside templates/"
    h = Harness(hub, hub_env, own_cluster, upstream_substrate, tmp_path, "upgrade-crds")
    try:
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create(_previous_versions())
        h.start()
        h.wait_condition("Ready", "True", deadline=600)
        charts = _charts(h)
        for c in filter(_versioned, STANDARD):
            assert charts[c.release_name] == _at(c, previous_version(c.version)), charts
        for c in CRDS_OUTSIDE_TEMPLATES:
            assert c.chart is not None
            for spec in CHART_CRDS[c.chart.chart]:
                name = f"{spec[2]}.{spec[0]}"
                want = {"before"} if _versioned(c) else {"before", "after"}
                assert _fields(h.target, name) == want, (c.name, name)

        # An object of every CRD of crds/, stored under the old definition.
        ensure_namespace(h.target, PROBES)
        probes = []
        for c in CRDS_OUTSIDE_TEMPLATES:
            assert c.chart is not None
            for spec in CHART_CRDS[c.chart.chart]:
                res = _probe_resource(*spec)
                meta: dict[str, Any] = {"name": "probe"}
                if spec[4]:
                    meta["namespace"] = PROBES
                body = {
                    "apiVersion": f"{spec[0]}/{spec[1]}",
                    "kind": spec[3],
                    "metadata": meta,
                    "fixture": {"before": "kept", "after": "pruned by the old CRD"},
                }
                h.target.apply(res.from_dict(body), field_manager="tenant")
                probes.append((c, spec, res))
        for c, spec, res in probes:
            stored = h.target.get(res, "probe", namespace=PROBES if spec[4] else None)
            expected = (
                {"before": "kept"}
                if _versioned(c)
                else {"before": "kept", "after": "pruned by the old CRD"}
            )
            assert stored["fixture"] == expected, (c.name, spec)

        before_upgrade = len(_events(h))
        # The current defaults: the overrides go, as an operator upgrade's new pins would come.
        h.create({})

        def upgraded() -> bool:
            charts = _charts(h)
            if any(charts.get(c.release_name) != _at(c, c.version) for c in STANDARD):
                return False
            status = h.status()
            reported = {c["name"]: c.get("version") for c in status.get("components", [])}
            if any(reported.get(c.name) != c.version for c in STANDARD):
                return False
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            return bool(ready) and ready[0]["status"] == "True"

        wait_for(
            "every release at its pin and Ready", upgraded, deadline=600, detail=lambda: _log(h)
        )

        for c in CRDS_OUTSIDE_TEMPLATES:
            assert c.chart is not None
            for spec in CHART_CRDS[c.chart.chart]:
                assert _fields(h.target, f"{spec[2]}.{spec[0]}") == {"before", "after"}
        for _, spec, res in probes:
            namespace = PROBES if spec[4] else None
            assert h.target.get(res, "probe", namespace=namespace)["fixture"]["before"] == "kept"
            # The field the new CRD adds is kept now.
            h.target.apply(
                res.from_dict(
                    {
                        "apiVersion": f"{spec[0]}/{spec[1]}",
                        "kind": spec[3],
                        "metadata": {"name": "probe", **({"namespace": PROBES} if spec[4] else {})},
                        "fixture": {"before": "kept", "after": "kept too"},
                    }
                ),
                field_manager="tenant",
            )
            assert h.target.get(res, "probe", namespace=namespace)["fixture"]["after"] == "kept too"

        # Each chart's CRDs landed before its upgrade, and each upgrade after
        # the releases it depends on had finished theirs.
        events = _events(h)[before_upgrade:]
        position = {}
        for i, e in enumerate(events):
            position.setdefault((e["reason"], e["message"].split()[0]), i)
        for c in filter(_versioned, CRDS_OUTSIDE_TEMPLATES):
            assert c.chart is not None
            applied = position[("CRDsApplied", f"{c.chart.chart}")]
            upgrade = next(
                i
                for i, e in enumerate(events)
                if e["reason"] == "UpgradeSucceeded" and f" {c.release_name} " in e["message"]
            )
            assert applied < upgrade, (c.name, [(e["reason"], e["message"]) for e in events])
            for dependency in c.depends_on:
                dep = catalog.BY_NAME[dependency]
                if not _versioned(dep):
                    continue
                done = next(
                    i
                    for i, e in enumerate(events)
                    if e["reason"] == "UpgradeSucceeded" and f" {dep.release_name} " in e["message"]
                )
                assert done < applied, (c.name, dependency)

        # Teardown keeps the CRDs of crds/, as Helm does, and every object of theirs.
        h.hub.delete(SS, "stack", namespace=h.ns)

        def gone() -> bool:
            try:
                h.hub.get(SS, "stack", namespace=h.ns)
            except ApiError as err:
                return err.status.code == 404
            return False

        wait_for("the ServingStack gone", gone, deadline=300, detail=lambda: _log(h))
        for _, spec, res in probes:
            namespace = PROBES if spec[4] else None
            assert h.target.get(res, "probe", namespace=namespace)["fixture"]["before"] == "kept"
    finally:
        h.stop()
