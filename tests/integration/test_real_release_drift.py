"""The real charts' objects, stored by a real API server as Helm stores them, show no drift.

Every ``rendered-standard.yaml`` of ``../shared/fixtures/charts`` (what
``helm template`` renders with the values the product composes) is created
on a private API server as Helm creates a release's objects (a create under
the field manager ``helm``, hooks left out, as a release's manifest leaves
them), read back, and judged by the product's drift rule with the dry runs
it asks (``actions.dry_runs``). The API server drops a chart's zero values
(``hostNetwork: false``, ``value: ""``) and fields of disabled feature
gates, so ownership alone names fields no one edited.

Then a hand edit (``kubectl edit``: an Update under another manager) is
seen, and the restore puts it back owning only what it changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from tests.integration.hubs import client_for, private_env
from tests.shared_fixtures import charts_dir, yaml_docs
from tests.testenv import TestEnv

from modelplane.actions.dry_runs import DryRuns
from modelplane.actions.restore import restore_object
from modelplane.catalog.components import COMPONENTS
from modelplane.kube.client import Target, open_target
from modelplane.kube.resources import resource
from modelplane.observe.release_objects import RELEASE_OWNERS, manifest_entries
from modelplane.observe.release_others import FOLLOWED, other_entries
from modelplane.plan.drift import fields_of, owned_fields
from modelplane.plan.release_health import (
    DriftMode,
    ReleaseObject,
    ReleaseWorkload,
    drift_candidates,
    drift_of,
    object_drift,
)
from modelplane.plan.workloads import WorkloadStatus
from modelplane.wire import FIELD_MANAGER

RENDERS = sorted(charts_dir().glob("*/*/rendered-standard.yaml"))
NAMESPACES = {c.chart.chart: c.namespace for c in COMPONENTS if c.chart is not None}
RELEASES = {c.chart.chart: (c.name, c.release_name) for c in COMPONENTS if c.chart is not None}
EDITOR = "kubectl-edit"
PLURALS = {kind: f.api.resource for (_, kind), f in FOLLOWED.items()} | {
    "Deployment": "deployments",
    "DaemonSet": "daemonsets",
    "StatefulSet": "statefulsets",
    "Job": "jobs",
}

pytestmark = pytest.mark.skipif(
    not RENDERS, reason=f"no real chart renders under {charts_dir()} (../shared/fixtures/charts)"
)


def _resource(body: dict[str, Any]) -> Any:
    namespaced = bool(body["metadata"].get("namespace"))
    return resource(body["apiVersion"], body["kind"], namespaced, PLURALS[body["kind"]])


def _manifest(render: Path) -> str:
    """The render less its hooks (what Helm stores as a release's manifest), of the kinds
    drift is judged for: its CRDs and custom resources need the CRDs served first."""
    docs = [d for d in yaml_docs(render) if isinstance(d, dict) and d.get("kind") in PLURALS]
    return yaml.safe_dump_all([d for d in docs if "helm.sh/hook" not in _annotations(d)])


def _annotations(doc: dict[str, Any]) -> dict[str, Any]:
    return dict((doc.get("metadata") or {}).get("annotations") or {})


class Release:
    def __init__(self, chart: str, manifest: str) -> None:
        self.chart = chart
        self.namespace = NAMESPACES[chart]
        self.component, self.name = RELEASES[chart]
        self.workloads = manifest_entries(manifest, self.namespace)
        self.others = other_entries(manifest, self.namespace)

    def bodies(self) -> list[dict[str, Any]]:
        return [e.body for e in self.workloads] + [e.body for e in self.others]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    # Its own API server: the renders' webhook configurations would call
    # services that do not run for every other test's objects.
    with private_env(tmp_path_factory.mktemp("real-drift")) as made:
        yield made


@pytest.fixture(scope="module")
def releases(env: TestEnv) -> list[Release]:
    helm = client_for(env, field_manager="helm")
    out = []
    for render in RENDERS:
        chart = render.parent.parent.name
        if chart not in NAMESPACES:
            continue
        release = Release(chart, _manifest(render))
        _ensure_namespace(helm, release.namespace)
        for body in release.bodies():
            _create(helm, body)
        out.append(release)
    return out


def _ensure_namespace(client: Client, name: str) -> None:
    try:
        client.create(Namespace.from_dict({"metadata": {"name": name}}))
    except ApiError as err:
        if err.status.code != 409:
            raise


def _create(client: Client, body: dict[str, Any]) -> None:
    res = _resource(body)
    client.create(res.from_dict(body), field_manager="helm")


def _live(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    got = client.get(_resource(body), meta["name"], namespace=meta.get("namespace"))
    return dict(got.to_dict())


def _judged(client: Client, releases: list[Release]) -> tuple[list[Any], list[Any]]:
    workloads, objects = [], []
    for r in releases:
        for e in r.workloads:
            live = _live(client, e.body)
            workloads.append(
                ReleaseWorkload(
                    component=r.component,
                    release=r.name,
                    manifest=e.workload,
                    desired=e.body,
                    live=WorkloadStatus.from_object(live),
                    owned=fields_of(live["metadata"], RELEASE_OWNERS),
                    autoscaled=e.autoscaled,
                    version=live["metadata"]["resourceVersion"],
                )
            )
        for o in r.others:
            live = _live(client, o.body)
            objects.append(
                ReleaseObject(
                    component=r.component,
                    release=r.name,
                    shown=o.shown,
                    desired=o.body,
                    present=True,
                    owned=fields_of(live["metadata"], RELEASE_OWNERS),
                    data_owned_elsewhere=o.kind == "Secret",
                    version=live["metadata"]["resourceVersion"],
                )
            )
    return workloads, objects


def _settled(env: TestEnv, workloads: list[Any], objects: list[Any]) -> tuple[list[Any], list[Any]]:
    async def run() -> tuple[list[Any], list[Any]]:
        async with await _target(env) as target:
            return await DryRuns().settle(target.client, workloads, objects)

    return asyncio.run(run())


async def _target(env: TestEnv) -> Target:
    return await open_target(KubeConfig.from_dict(env.kubeconfig).get(), deny=(), trust_env=False)


def _drift(workloads: list[Any], objects: list[Any]) -> list[str]:
    found = [drift_of(w, DriftMode.CORRECT) for w in workloads]
    found += [object_drift(o, DriftMode.CORRECT) for o in objects]
    return [d.message for d in found if d is not None]


def test_the_real_renders_stored_as_helm_stores_them_show_no_drift(
    env: TestEnv, releases: list[Release]
) -> None:
    client = client_for(env)
    workloads, objects = _judged(client, releases)
    assert len(workloads) > 10 and len(objects) > 50
    # Ownership alone names fields nobody edited: the API server dropped them.
    unowned = [w.manifest.key.shown for w in workloads if drift_candidates(w.desired, w.owned)]
    assert any("node-feature-discovery" in shown for shown in unowned)
    workloads, objects = _settled(env, workloads, objects)
    assert _drift(workloads, objects) == []


def test_a_hand_edit_of_a_real_release_object_is_drift_and_its_restore_owns_only_it(
    env: TestEnv, releases: list[Release]
) -> None:
    client = client_for(env)
    nfd = next(r for r in releases if r.chart == "node-feature-discovery")
    entry = next(e for e in nfd.workloads if e.workload.key.kind.value == "DaemonSet")
    body, meta = entry.body, entry.body["metadata"]
    editor = client_for(env, field_manager=EDITOR)
    editor.patch(
        _resource(body),
        meta["name"],
        {"spec": {"template": {"spec": {"hostNetwork": True}}}},
        namespace=meta["namespace"],
        patch_type=PatchType.STRATEGIC,
    )
    workloads, objects = _settled(env, *_judged(client, [nfd]))
    drift = _drift(workloads, objects)
    assert len(drift) == 1 and "spec.template.spec.hostNetwork" in drift[0], drift

    async def restore() -> None:
        async with await _target(env) as target:
            await restore_object(target.client, body)

    asyncio.run(restore())
    live = _live(client, body)
    assert not live["spec"]["template"]["spec"].get("hostNetwork")
    # The restore took no field Helm owns: Helm still owns the containers.
    helm = owned_fields(live["metadata"], "helm", frozenset({"Update"}))
    assert helm is not None and "f:containers" in helm["f:spec"]["f:template"]["f:spec"]
    ours = owned_fields(live["metadata"], FIELD_MANAGER, frozenset({"Update", "Apply"}))
    assert ours is not None and "f:containers" not in str(ours)
    workloads, objects = _settled(env, *_judged(client, [nfd]))
    assert _drift(workloads, objects) == []
