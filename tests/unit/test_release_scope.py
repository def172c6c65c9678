"""A stored revision whose workloads reach outside its release's namespace is refused."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from typing import Any

import yaml

from modelplane.catalog import components as catalog
from modelplane.observe.release_objects import (
    ReleaseManifests,
    refused_revisions,
    release_workloads,
    watches_for,
)
from modelplane.observe.state import Listed, release_of
from modelplane.plan.health import Reason, State
from modelplane.plan.manifest import ManifestWorkload
from modelplane.plan.release_health import (
    DriftMode,
    RefusedRevision,
    ReleaseWorkload,
    outside_namespace,
    release_report,
)
from modelplane.plan.workloads import Kind, WorkloadKey
from modelplane.wire import RELEASE_DIGEST_LABEL

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
COMPONENT = catalog.BY_NAME["kube-prometheus-stack"]


def _daemonset(namespace: str | None, name: str) -> dict[str, Any]:
    metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}},
        },
    }


def _secret(*bodies: dict[str, Any]) -> dict[str, Any]:
    release = {"manifest": "\n---\n".join(yaml.safe_dump(b) for b in bodies), "config": {}}
    helm_text = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.{COMPONENT.release_name}.v3",
            "namespace": COMPONENT.namespace,
            "resourceVersion": "1",
            "labels": {
                "owner": "helm",
                "name": COMPONENT.release_name,
                "version": "3",
                "status": "deployed",
                RELEASE_DIGEST_LABEL: "d",
            },
        },
        "data": {"release": base64.b64encode(helm_text).decode()},
    }


def _read(*bodies: dict[str, Any]) -> tuple[Listed, list[Any]]:
    secret = _secret(*bodies)
    listed = Listed(apis={}, release_secrets=[secret])
    release = release_of(secret)
    assert release is not None
    return listed, ReleaseManifests().read(listed, {release.name: release})


def test_a_revision_with_a_workload_elsewhere_is_neither_followed_nor_judged() -> None:
    listed, manifests = _read(_daemonset(None, "exporter"), _daemonset("kube-system", "node-shell"))
    # Not even its own-namespace workload is followed: the revision is not Helm's.
    assert watches_for(manifests) == ()
    assert release_workloads(manifests, listed) == []
    (refused,) = refused_revisions(manifests)
    assert refused.namespace == COMPONENT.namespace
    assert [k.shown for k in refused.outside] == ["DaemonSet kube-system/node-shell"]
    assert refused.message.startswith(f"revision 3 of release {COMPONENT.release_name} installs")
    assert f"outside the release's namespace {COMPONENT.namespace}" in refused.message


def test_a_revision_inside_its_namespace_is_followed() -> None:
    _, manifests = _read(_daemonset(None, "exporter"), _daemonset(COMPONENT.namespace, "other"))
    assert refused_revisions(manifests) == []
    assert {(w.namespace, w.name) for w in watches_for(manifests)} == {
        (COMPONENT.namespace, "exporter"),
        (COMPONENT.namespace, "other"),
    }


def test_a_refused_revision_degrades_its_component_and_restores_nothing() -> None:
    key = WorkloadKey(kind=Kind.DAEMON_SET, namespace="kube-system", name="node-shell")
    assert outside_namespace([key], "monitoring") == [key]
    assert outside_namespace([key], "kube-system") == []
    deleted = ReleaseWorkload(
        component="kube-prometheus-stack",
        release="mp-kube-prometheus-stack",
        manifest=ManifestWorkload(key=key),
        desired=_daemonset("kube-system", "node-shell"),
    )
    refused = RefusedRevision(
        component="kube-prometheus-stack",
        release="mp-kube-prometheus-stack",
        revision=3,
        namespace="monitoring",
        outside=[key],
    )
    report = release_report([deleted], None, NOW, DriftMode.CORRECT, refused=[refused])
    assert report.drift == []
    (health,) = report.health
    assert (health.state, health.reason) == (State.DEGRADED, Reason.RELEASE_OUTSIDE_NAMESPACE)
    assert health.message == refused.message
    # Without the refusal the same workload would be put back.
    (drift,) = release_report([deleted], None, NOW, DriftMode.CORRECT).drift
    assert drift.restore is not None
