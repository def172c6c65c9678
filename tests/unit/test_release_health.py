"""The release health and drift rules (plan.release_health), and what observe hands them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from tests.shared_fixtures import real_chart, yaml_docs
from tests.testenv.nodes import DEFAULT_LAYOUT, HardwareMissingError, NodeLayout, h200
from tests.testenv.nodes import node as sim_node
from typer.testing import CliRunner

from modelplane.api.models import ServingStack
from modelplane.cli.main import app
from modelplane.observe.release_objects import (
    ReleaseManifest,
    manifest_entries,
    node_facts,
    pod_selector,
    release_workloads,
)
from modelplane.observe.state import Listed
from modelplane.operator.status import Outcome, desired_status
from modelplane.plan import plan
from modelplane.plan.manifest import ManifestWorkload
from modelplane.plan.model import ComponentPlan
from modelplane.plan.observed import Observed
from modelplane.plan.planner import with_health
from modelplane.plan.release_health import (
    DriftMode,
    NodeFacts,
    ReleaseWorkload,
    Taint,
    drift_of,
    nodes_expected,
    release_report,
)
from modelplane.plan.workloads import Kind, WorkloadKey, WorkloadStatus

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
NODES = [
    NodeFacts(name="cpu-0", labels={"pool": "cpu"}),
    NodeFacts(name="gpu-0", labels={"pool": "gpu"}, taints=[GPU_TAINT]),
    NodeFacts(name="gpu-1", labels={"pool": "gpu"}, taints=[GPU_TAINT]),
    NodeFacts(
        name="drain",
        labels={"pool": "gpu"},
        taints=[Taint(key="maintenance", effect="PreferNoSchedule"), GPU_TAINT],
    ),
]


def _ds(
    tolerations: list[dict[str, Any]] | None = None, selector: dict[str, str] | None = None
) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if tolerations is not None:
        pod["tolerations"] = tolerations
    if selector is not None:
        pod["nodeSelector"] = selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "plugin", "namespace": "dra"},
        "spec": {"selector": {"matchLabels": {"app": "plugin"}}, "template": {"spec": pod}},
    }


@pytest.mark.parametrize(
    ("tolerations", "selector", "expected"),
    [
        (None, None, 1),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], None, 4),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], None, 4),
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}], None, 1),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], None, 1),
        ([{"operator": "Exists"}], None, 4),
        ([{"operator": "Exists"}], {"pool": "gpu"}, 3),
        (None, {"pool": "gpu"}, 0),
    ],
)
def test_nodes_a_daemonset_should_run_on(
    tolerations: list[dict[str, Any]] | None, selector: dict[str, str] | None, expected: int
) -> None:
    assert nodes_expected(_ds(tolerations, selector), NODES) == expected


def _simulated_nodes() -> list[NodeFacts]:
    """The simulated GPU cluster's nodes (tests/testenv/nodes.py, its default layout: two
    H200 nodes with NFD's PCI label and the GPU taint, one CPU node), as observe reads them."""
    try:
        gpu = h200()
    except HardwareMissingError as exc:
        pytest.skip(str(exc))
    names = NodeLayout.parse(DEFAULT_LAYOUT).names()
    found = node_facts([sim_node(name, gpu=gpu if is_gpu else None) for name, is_gpu in names])
    assert found is not None
    return found


def _rendered_daemon_set(chart: str, version: str, name: str) -> dict[str, Any]:
    docs = yaml_docs(real_chart(chart, version) / "rendered-standard.yaml")
    [found] = [
        d
        for d in docs
        if isinstance(d, dict) and d.get("kind") == "DaemonSet" and d["metadata"]["name"] == name
    ]
    return dict(found)


@pytest.mark.parametrize(
    ("chart", "version", "name", "gpu_only"),
    [
        # Required node affinity on NFD's NVIDIA PCI labels (OR of five terms),
        # and the GPU taint tolerated: the GPU nodes only.
        ("dra-driver-nvidia-gpu", "0.4.1", "dra-driver-nvidia-gpu-kubelet-plugin", True),
        # No selection, the GPU taint tolerated: every node.
        ("node-feature-discovery", "0.19.0", "mp-node-feature-discovery-worker", False),
        # nodeSelector kubernetes.io/os=linux, an affinity that only keeps it off
        # Fargate and virtual-kubelet nodes, every NoSchedule taint tolerated: every node.
        (
            "kube-prometheus-stack",
            "84.4.0",
            "mp-kube-prometheus-stack-prometheus-node-exporter",
            False,
        ),
    ],
)
def test_the_real_charts_daemonsets_are_expected_where_they_run(
    chart: str, version: str, name: str, gpu_only: bool
) -> None:
    desired = _rendered_daemon_set(chart, version, name)
    nodes = _simulated_nodes()
    gpu_nodes = [n for n in nodes if any(t.key == "nvidia.com/gpu" for t in n.taints)]
    assert len(gpu_nodes) == 2 and len(nodes) == 3
    assert nodes_expected(desired, nodes) == len(gpu_nodes if gpu_only else nodes)


def test_the_dra_kubelet_plugin_on_every_gpu_node_is_healthy() -> None:
    # Issue 39: read by its nodeSelector alone, the plugin was expected on the
    # CPU node too, and "runs on 2 of 3 nodes" for ever.
    desired = _rendered_daemon_set(
        "dra-driver-nvidia-gpu", "0.4.1", "dra-driver-nvidia-gpu-kubelet-plugin"
    )
    nodes = _simulated_nodes()
    counts = {
        "desiredNumberScheduled": 2,
        "currentNumberScheduled": 2,
        "updatedNumberScheduled": 2,
        "numberReady": 2,
        "numberAvailable": 2,
    }
    meta = {**desired["metadata"], "generation": 1}
    live = WorkloadStatus.from_object(
        {**desired, "metadata": meta, "status": {"observedGeneration": 1, **counts}}
    )
    w = ReleaseWorkload(
        component="nvidia-dra-driver-gpu",
        release="mp-dra-driver-nvidia-gpu",
        manifest=ManifestWorkload(
            key=WorkloadKey(kind=Kind.DAEMON_SET, namespace=meta["namespace"], name=meta["name"])
        ),
        desired=desired,
        live=live,
        owned=None,
    )
    [health] = release_report([w], nodes, NOW, DriftMode.OFF).health
    assert health.state == "Healthy", health.message


def test_a_virtual_kubelet_node_is_kept_from_the_node_exporter() -> None:
    desired = _rendered_daemon_set(
        "kube-prometheus-stack", "84.4.0", "mp-kube-prometheus-stack-prometheus-node-exporter"
    )
    linux = {"kubernetes.io/os": "linux"}
    nodes = [
        NodeFacts(name="virtual", labels={**linux, "type": "virtual-kubelet"}),
        NodeFacts(name="windows", labels={"kubernetes.io/os": "windows"}),
        NodeFacts(name="kwok", labels={**linux, "type": "kwok"}),
    ]
    assert nodes_expected(desired, nodes) == 1


def _deployment_body(replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "i", "resources": {}}]},
            },
        },
    }


def _live(replicas: int, ready: int, generation: int = 1) -> WorkloadStatus:
    status = WorkloadStatus.from_object(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "generation": generation},
            "spec": {"replicas": replicas},
            "status": {
                "observedGeneration": generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
            },
        }
    )
    assert status is not None
    return status


# What Helm's create leaves in managedFields for _deployment_body (resources: {} is not kept).
HELM_OWNED = {
    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
    "f:spec": {
        "f:replicas": {},
        "f:selector": {},
        "f:template": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:containers": {'k:{"name":"web"}': {".": {}, "f:image": {}, "f:name": {}}}
            },
        },
    },
}


def _workload(
    live: WorkloadStatus | None, owned: dict[str, Any] | None = HELM_OWNED, replicas: int = 2
) -> ReleaseWorkload:
    return ReleaseWorkload(
        component="web",
        release="mp-web",
        manifest=ManifestWorkload(
            key=WorkloadKey(kind=Kind.DEPLOYMENT, namespace="ns", name="web"), replicas=replicas
        ),
        desired=_deployment_body(replicas),
        live=live,
        owned=owned,
    )


def _without_replicas() -> dict[str, Any]:
    spec = {k: v for k, v in HELM_OWNED["f:spec"].items() if k != "f:replicas"}
    return {**HELM_OWNED, "f:spec": spec}


@pytest.mark.parametrize(
    ("live", "owned", "mode", "deleted", "fields", "restore"),
    [
        (_live(2, 2), HELM_OWNED, DriftMode.CORRECT, None, None, None),
        (None, HELM_OWNED, DriftMode.CORRECT, True, [], True),
        (None, HELM_OWNED, DriftMode.WARN, True, [], False),
        (None, HELM_OWNED, DriftMode.OFF, None, None, None),
        (_live(0, 0), _without_replicas(), DriftMode.WARN, False, ["spec.replicas"], False),
        (_live(0, 0), _without_replicas(), DriftMode.CORRECT, False, ["spec.replicas"], True),
        # managedFields too deep to read: not judged.
        (_live(2, 2), None, DriftMode.CORRECT, None, None, None),
    ],
)
def test_drift_of_a_release_workload(
    live: WorkloadStatus | None,
    owned: dict[str, Any] | None,
    mode: DriftMode,
    deleted: bool | None,
    fields: list[str] | None,
    restore: bool | None,
) -> None:
    found = drift_of(_workload(live, owned), mode)
    if deleted is None:
        assert found is None
        return
    assert found is not None
    assert found.deleted is deleted
    assert found.fields == fields
    assert (found.restore is not None) is restore
    if restore:
        assert found.restore == _deployment_body()
        assert found.message.endswith("; restored")
    else:
        assert "not restored" in found.message
    assert found.message.startswith("Deployment ns/web of release mp-web ")


def test_the_report_judges_each_component_by_its_workloads() -> None:
    report = release_report([_workload(_live(2, 2)), _workload(None)], NODES, NOW, DriftMode.WARN)
    [health] = report.health
    assert health.component == "web"
    assert health.state == "Degraded"
    assert health.reason == "WorkloadMissing"
    report = release_report([_workload(_live(0, 0), replicas=2)], NODES, NOW, DriftMode.OFF)
    assert report.health[0].reason == "WorkloadScaledDown"
    assert report.drift == []
    healthy = release_report([_workload(_live(2, 2))], NODES, NOW, DriftMode.CORRECT)
    assert healthy.unhealthy() == [] and healthy.drift == []


def test_a_daemonset_short_of_its_nodes_is_unschedulable() -> None:
    live = WorkloadStatus.from_object(
        {
            **_ds(),
            "metadata": {"name": "plugin", "namespace": "dra", "generation": 2},
            "status": {
                "observedGeneration": 2,
                "desiredNumberScheduled": 1,
                "currentNumberScheduled": 1,
                "updatedNumberScheduled": 1,
                "numberReady": 1,
                "numberAvailable": 1,
            },
        }
    )
    desired = _ds([{"key": "nvidia.com/gpu", "operator": "Exists"}])
    w = ReleaseWorkload(
        component="dra",
        release="mp-dra",
        manifest=ManifestWorkload(
            key=WorkloadKey(kind=Kind.DAEMON_SET, namespace="dra", name="plugin")
        ),
        desired=desired,
        live=live,
        owned=None,
    )
    [health] = release_report([w], NODES, NOW, DriftMode.OFF).health
    assert health.reason == "Unschedulable"
    assert "runs on 1 of 4 nodes it should run on" in health.message
    # Without the Nodes, the DaemonSet's own count is all there is.
    [health] = release_report([w], None, NOW, DriftMode.OFF).health
    assert health.state == "Healthy"


@pytest.mark.parametrize(
    ("labels", "selector"),
    [
        ({"app": "web"}, "app=web"),
        ({"b": "2", "a.io/x": "1"}, "a.io/x=1,b=2"),
        ({"app": "web,evil=1"}, None),
        ({"app": "a b"}, None),
        ({}, None),
        ({"app": 1}, None),
    ],
)
def test_a_pod_selector_only_from_labels_the_api_server_allows(
    labels: dict[str, Any], selector: str | None
) -> None:
    assert pod_selector({"spec": {"selector": {"matchLabels": labels}}}) == selector


def test_manifest_entries_fill_the_release_namespace() -> None:
    body = _deployment_body()
    del body["metadata"]["namespace"]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    [entry] = manifest_entries(yaml.safe_dump_all([other, body]), "rel")
    assert entry.body["metadata"]["namespace"] == "rel"
    assert entry.watch.fields == "metadata.name=web"
    assert entry.watch.pods == "app=web"
    assert entry.workload.replicas == 2


def _stack() -> ServingStack:
    return ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}]},
        }
    )


def test_ready_is_false_while_a_release_workload_is_missing() -> None:
    p = plan(_stack(), Observed())
    report = release_report([_workload(None)], NODES, NOW, DriftMode.WARN)
    # A plan with nothing left to do, but a workload gone.
    done = p.model_copy(
        update={
            "work": [],
            "requirements": [],
            "health": report.health,
            "release_drift": report.drift,
        }
    )
    status = desired_status(Outcome(plan=done), 1)
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "WorkloadMissing"
    assert ready["message"].startswith("web: Deployment ns/web: is in the release's manifest")
    healthy = release_report([_workload(_live(2, 2))], NODES, NOW, DriftMode.WARN)
    status = desired_status(Outcome(plan=done.model_copy(update={"health": healthy.health})), 1)
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True"


def test_a_component_with_no_work_left_shows_its_health_and_drift() -> None:
    component = ComponentPlan(
        name="web", mode="Managed", kind="chart", version="1", namespace="ns", state="Ready"
    )
    report = release_report([_workload(None)], NODES, NOW, DriftMode.WARN)
    shown = with_health(component, report)
    assert shown.state == "Degraded"
    assert shown.message.startswith("Deployment ns/web: is in the release's manifest")
    assert "Deployment ns/web of release mp-web was deleted; not restored" in shown.message
    # A component still installing says that, not its workloads'.
    pending = component.model_copy(update={"state": "Pending", "message": "install"})
    assert with_health(pending, report) == pending
    healthy = release_report([_workload(_live(2, 2))], NODES, NOW, DriftMode.WARN)
    assert with_health(component, healthy) == component


def test_hostile_nodes_and_workloads_are_read_as_missing_fields() -> None:
    facts = node_facts(
        [
            {"metadata": "x", "spec": {"taints": "none"}},
            {"metadata": {"name": "n", "labels": {"a": 1, "b": "c"}}, "spec": {"taints": [1, {}]}},
        ]
    )
    assert facts is not None
    assert [(n.name, n.labels, len(n.taints)) for n in facts] == [("", {}, 0), ("n", {"b": "c"}, 1)]
    [entry] = manifest_entries(yaml.safe_dump(_deployment_body()), "ns")
    manifest = ReleaseManifest(component="web", release="mp-web", entries=(entry,))
    listed = Listed(apis={})
    hostile = {"metadata": {"name": "web", "managedFields": "no"}, "status": "broken"}
    listed.release_objects[entry.watch] = [{"metadata": "x"}, hostile]
    listed.release_pods[entry.watch] = [{"metadata": {"name": 3}}, "pod"]  # type: ignore[list-item]
    [w] = release_workloads([manifest], listed)
    assert w.live is not None and w.live.replicas is None
    assert w.pods == []
    # Not read yet is not missing: nothing is said of it.
    assert release_workloads([manifest], Listed(apis={})) == []


def test_run_refuses_an_unknown_release_drift_mode() -> None:
    result = CliRunner().invoke(app, ["run", "--release-drift", "sometimes"])
    assert result.exit_code == 2
    # Rich wraps the message in a box; read it as one line of words.
    words = " ".join(result.output.replace("│", " ").split())
    assert "Invalid value for '--release-drift'" in words, words
    assert "'sometimes' is not one of 'off', 'warn', 'correct'" in words, words


def _job(ttl: int | None) -> ReleaseWorkload:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return ReleaseWorkload(
        component="web",
        release="mp-web",
        manifest=ManifestWorkload(key=WorkloadKey(kind=Kind.JOB, namespace="ns", name="migrate")),
        desired={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "ns"},
            "spec": spec,
        },
    )


@pytest.mark.parametrize("ttl", [None, 100])
def test_a_job_gone_is_neither_missing_nor_run_again(ttl: int | None) -> None:
    # A Job applied again would run again: never restored.
    assert drift_of(_job(ttl), DriftMode.CORRECT) is None
    # Deleted once done (its TTL, a clean-up): gone is not a fault.
    report = release_report([_job(ttl)], NODES, NOW, DriftMode.CORRECT)
    assert report.health == [] and report.drift == []


HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "web"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
}


def test_an_autoscaled_workloads_replicas_are_the_autoscalers() -> None:
    body = _deployment_body()
    del body["metadata"]["namespace"]
    [entry] = manifest_entries(yaml.safe_dump_all([body, HPA]), "ns")
    assert entry.autoscaled
    w = _workload(_live(5, 5), owned=_without_replicas()).model_copy(update={"autoscaled": True})
    assert drift_of(w, DriftMode.CORRECT) is None
    # Another field changed by hand: restored without the replicas.
    edited = {k: v for k, v in _without_replicas().items() if k != "f:metadata"}
    found = drift_of(w.model_copy(update={"owned": edited}), DriftMode.CORRECT)
    assert found is not None and found.fields == ["metadata.labels.app"]
    assert found.restore is not None and "replicas" not in found.restore["spec"]
    # Scaled to zero by it (KEDA does): not a hand scale-down.
    [health] = release_report(
        [w.model_copy(update={"live": _live(0, 0)})], NODES, NOW, DriftMode.OFF
    ).health
    assert health.reason != "WorkloadScaledDown"


def test_a_custom_kind_named_deployment_is_not_the_workload() -> None:
    custom = {**_deployment_body(), "apiVersion": "example.com/v1"}
    real = _deployment_body(replicas=3)
    [entry] = manifest_entries(yaml.safe_dump_all([custom, real]), "ns")
    assert entry.body["apiVersion"] == "apps/v1" and entry.workload.replicas == 3


@pytest.mark.parametrize(
    ("live", "apply_changes", "fields"),
    [
        # A field nobody owns, and a dry run of the restore would change the
        # object: a hand edit.
        (_live(0, 0), True, ["spec.replicas"]),
        # Not asked (a webhook refused the dry run): ownership alone decides.
        (_live(0, 0), None, ["spec.replicas"]),
        # The dry run leaves the object as it is: the API server does not
        # store the field (a zero value it drops, a feature gate's field).
        (_live(0, 0), False, None),
        # Deleted is deleted, whatever a dry run said of the object before.
        (None, False, []),
    ],
)
def test_a_field_nobody_owns_is_drift_only_if_a_restore_would_change_the_object(
    live: WorkloadStatus | None, apply_changes: bool | None, fields: list[str] | None
) -> None:
    w = _workload(live, _without_replicas()).model_copy(update={"apply_changes": apply_changes})
    found = drift_of(w, DriftMode.CORRECT)
    assert (found.fields if found is not None else None) == fields


def test_ready_names_an_unhealthy_component_beside_a_failure_and_pending_work() -> None:
    p = plan(_stack(), Observed())
    report = release_report([_workload(None)], NODES, NOW, DriftMode.WARN)
    pending = p.model_copy(update={"health": report.health})
    assert pending.pending, "the plan still has work"
    failed = Outcome(plan=pending, failures={"trust-manager": "the webhook refused it"})
    for outcome, reason, first in (
        (failed, "ActionFailed", "trust-manager: the webhook refused it"),
        (Outcome(plan=pending), "Progressing", pending.pending[0]),
    ):
        [ready] = [c for c in desired_status(outcome, 1)["conditions"] if c["type"] == "Ready"]
        assert ready["reason"] == reason
        assert ready["message"].startswith(first)
        assert "web: Deployment ns/web: is in the release's manifest" in ready["message"]
