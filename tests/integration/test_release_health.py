"""Managed mode: Ready follows what the releases run, and a release's workload put back.

One Managed install of the Standard stack on the simulated GPU cluster
(kwok runs the fixture charts' Deployments and DaemonSets), shared by every
case: each breaks one workload after Ready, asserts the hub's Ready
condition (reason and message) and, with ``--release-drift=warn``, that it
is only reported, then the recovery. The operator is restarted when a case
needs another ``--release-drift``; the install stays.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ServiceSpec
from lightkube.resources.admissionregistration_v1 import ValidatingWebhookConfiguration
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Node, Pod, Secret, Service
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness, requests_by_resource, stack_gone
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.testenv.nodes import DEFAULT_LAYOUT, NodeLayout
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.wire import FIELD_MANAGER

CERT_MANAGER = catalog.BY_NAME["cert-manager"].namespace
WEBHOOK = "cert-manager-webhook"
CONTROLLER = "cert-manager-controller"
DRA = catalog.BY_NAME["nvidia-dra-driver-gpu"].namespace
DRA_PLUGIN = "dra-driver-nvidia-gpu-kubelet-plugin"
# A change on the target reaches the hub through the watches, well within this.
DEADLINE = 60
# The operator's resync period, and the one of the cases that show a change
# followed by watch: longer than the module runs, so that a change that
# reaches the hub (or is put back) can only have come through the watches.
RESYNC = 20.0
WATCHES_ONLY = 3600.0


class Stack:
    """The shared install, and the operator's --release-drift mode now."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.mode = ""

    def run(self, mode: str, resync: float = RESYNC) -> None:
        running = f"{mode} at --resync {resync:g}"
        if running != self.mode:
            self.h.stop()
            self.h.start("--release-drift", mode, "--resync", f"{resync:g}")
            self.mode = running
            # Past the new process's first reconcile, whose direct read would
            # find a change made before it; its watches start as it ends.
            wait_for(
                "the operator's first reconcile",
                lambda: self.h.reconciles() >= 1,
                deadline=DEADLINE,
                not_yet=(httpx2.TransportError,),
            )
        self.h.wait_condition("Ready", "True", deadline=300)

    def events(self, reason: str) -> list[str]:
        items = self.h.hub_env.http_client().get(f"/api/v1/namespaces/{self.h.ns}/events").json()
        return [
            e["message"]
            for e in items["items"]
            if e["reason"] == reason and e["involvedObject"].get("name") == "stack"
        ]


@pytest.fixture(scope="module")
def stack(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    h = Harness(
        hub,
        hub_env,
        sim_nodes_target,
        workload_substrate,
        tmp_path_factory.mktemp("op"),
        "rel-health",
    )
    s = Stack(h)
    try:
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({})
        s.run("warn")
        yield s
    finally:
        try:
            h.hub.delete(SS, "stack", namespace=h.ns)
            wait_for("the ServingStack gone", lambda: stack_gone(h.hub, h.ns), deadline=300)
        finally:
            h.stop()


def _deployment(h: Harness, name: str) -> Deployment | None:
    try:
        return h.target.get(Deployment, name, namespace=CERT_MANAGER)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def _not_ready(s: Stack, reason: str) -> dict[str, Any]:
    return s.h.wait_condition("Ready", "False", reason, deadline=DEADLINE)


def _component(s: Stack, name: str) -> dict[str, Any]:
    return next(c for c in s.h.status()["components"] if c["name"] == name)


def test_a_deleted_deployment_is_reported_with_warn(stack: Stack) -> None:
    stack.run("warn")
    # A fresh install is no drift: Helm owns every field its manifest sets.
    assert stack.events("ReleaseDrift") == []
    stack.h.target.delete(Deployment, WEBHOOK, namespace=CERT_MANAGER)
    ready = _not_ready(stack, "WorkloadMissing")
    assert f"Deployment {CERT_MANAGER}/{WEBHOOK}" in ready["message"], ready
    assert "not on the target" in ready["message"], ready
    cert_manager = _component(stack, "cert-manager")
    assert cert_manager["state"] == "Degraded", cert_manager
    assert (
        f"Deployment {CERT_MANAGER}/{WEBHOOK} of release mp-cert-manager was deleted"
        in (cert_manager["message"])
    )
    wait_for(
        "a ReleaseDrift event naming the Deployment",
        lambda: any(f"{WEBHOOK} of release" in m for m in stack.events("ReleaseDrift")),
        deadline=DEADLINE,
    )
    # Only reported: the reconciles since did not put it back.
    assert _deployment(stack.h, WEBHOOK) is None
    # Recovery: with correct, the operator restores it from the stored manifest.
    stack.run("correct")
    assert _deployment(stack.h, WEBHOOK) is not None
    assert any(
        f"Deployment {CERT_MANAGER}/{WEBHOOK}" in m and "restored" in m
        for m in stack.events("ReleaseDrift")
    )


def test_a_deleted_deployment_is_restored_with_correct(stack: Stack) -> None:
    stack.run("correct")
    restored_before = len([m for m in stack.events("ReleaseDrift") if "; restored" in m])
    stack.h.target.delete(Deployment, CONTROLLER, namespace=CERT_MANAGER)
    wait_for(
        "the Deployment restored",
        lambda: _deployment(stack.h, CONTROLLER) is not None,
        deadline=DEADLINE,
    )
    wait_for(
        "a ReleaseDrift event saying it was restored",
        lambda: (
            len([m for m in stack.events("ReleaseDrift") if "; restored" in m]) > restored_before
        ),
        deadline=DEADLINE,
    )
    # Counted for the release drift alert, against this stack's component.
    drift = "modelplane_stack_release_drift_corrections_total"
    wait_for(
        "the restore counted in /metrics",
        lambda: stack.h.operator_counter(drift) >= 1,
        deadline=DEADLINE,
    )
    # Restored by the operator's field manager, not by a helm upgrade.
    restored = _deployment(stack.h, CONTROLLER)
    assert restored is not None and restored.metadata is not None
    # Created again as Helm creates it (an Update), not server-side applied.
    writers = {
        (f.manager, f.operation) for f in restored.metadata.managedFields or [] if not f.subresource
    }
    assert writers == {(FIELD_MANAGER, "Update")}, writers
    releases = stack.h.helm_releases()
    assert releases["mp-cert-manager"]["revision"] == "1", releases["mp-cert-manager"]
    stack.h.wait_condition("Ready", "True", deadline=DEADLINE)


def test_a_deployment_scaled_to_zero_by_hand(stack: Stack) -> None:
    stack.run("warn")
    stack.h.target.patch(
        Deployment.Scale,
        WEBHOOK,
        {"spec": {"replicas": 0}},
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
    )
    ready = _not_ready(stack, "WorkloadScaledDown")
    assert (
        f"Deployment {CERT_MANAGER}/{WEBHOOK}: is scaled to 0 replicas, and the release asks for 1"
        in ready["message"]
    ), ready
    wait_for(
        "a ReleaseDrift event naming spec.replicas",
        lambda: any(WEBHOOK in m and "spec.replicas" in m for m in stack.events("ReleaseDrift")),
        deadline=DEADLINE,
    )
    # Recovery: scaled back by hand, it clears on its own.
    stack.h.target.patch(
        Deployment.Scale,
        WEBHOOK,
        {"spec": {"replicas": 1}},
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
    )
    stack.h.wait_condition("Ready", "True", deadline=DEADLINE)


def _crash(h: Harness, pod: str) -> None:
    """What the kubelet reports of a container that keeps crashing (kwok has no kubelet)."""
    h.target.patch(
        Pod.Status,
        pod,
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                    {"type": "ContainersReady", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": CONTROLLER,
                        "image": "registry.invalid/jetstack/cert-manager-controller",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 4,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": "back-off 1m20s restarting failed container",
                            }
                        },
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                ],
            }
        },
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
    )


def test_a_crash_looping_pod_names_its_container(stack: Stack) -> None:
    stack.run("warn")
    [pod] = stack.h.target.list(
        Pod, namespace=CERT_MANAGER, labels={"app.kubernetes.io/name": CONTROLLER}
    )
    assert pod.metadata is not None and pod.metadata.name is not None
    _crash(stack.h, pod.metadata.name)
    ready = _not_ready(stack, "PodCrashLooping")
    message = ready["message"]
    assert f"Deployment {CERT_MANAGER}/{CONTROLLER}" in message, message
    assert f"pod {pod.metadata.name} container {CONTROLLER}: CrashLoopBackOff" in message, message
    assert "last run ended Error, exit code 1" in message, message
    # Recovery: the pod replaced, its successor runs, and Ready comes back.
    stack.h.target.delete(Pod, pod.metadata.name, namespace=CERT_MANAGER)
    stack.h.wait_condition("Ready", "True", deadline=DEADLINE)


def test_a_daemonset_kept_off_the_tainted_gpu_nodes(stack: Stack) -> None:
    stack.run("warn")
    stack.h.target.patch(
        DaemonSet,
        DRA_PLUGIN,
        [{"op": "remove", "path": "/spec/template/spec/tolerations"}],
        namespace=DRA,
        patch_type=PatchType.JSON,
        field_manager="kubectl-edit",
    )
    ready = _not_ready(stack, "Unschedulable")
    assert (
        # The plugin's node affinity (the real chart's) takes it to the two GPU
        # nodes only; without the toleration of their taint it runs on neither.
        f"DaemonSet {DRA}/{DRA_PLUGIN}: runs on 0 of 2 nodes it should run on" in (ready["message"])
    ), ready
    wait_for(
        "a ReleaseDrift event naming the tolerations",
        lambda: any(
            DRA_PLUGIN in m and "spec.template.spec.tolerations" in m
            for m in stack.events("ReleaseDrift")
        ),
        deadline=DEADLINE,
    )
    # Recovery: correct puts the tolerations back, and the pods on the GPU nodes.
    stack.run("correct")
    ds = stack.h.target.get(DaemonSet, DRA_PLUGIN, namespace=DRA)
    assert ds.spec is not None and ds.spec.template.spec is not None
    assert ds.spec.template.spec.tolerations, ds.spec.template.spec


def test_a_quiet_managed_resync_reads_none_of_the_release_workloads(stack: Stack) -> None:
    """Following the releases' workloads costs a quiet resync nothing: the watches hold them.

    Counted by resource (the API server's counters): kwok, the scheduler and
    the controller manager read the same target, but not these resources
    while nothing changes; their lease renewals make "only the claim" not
    countable here (tests/integration/test_noop_resync_provided.py counts
    that on a bare API server).
    """
    stack.run("correct")
    h = stack.h
    h.stop()
    stack.mode = ""
    h.start("--release-drift", "correct", "--resync", "2")
    stack.mode = "correct at --resync 2"
    h.wait_condition("Ready", "True", deadline=300)
    # Past the first reconciles of the new process (its watches start from a direct read).
    wait_for(
        "three resyncs after the restart",
        lambda: h.reconciles() >= 3,
        deadline=60,
        not_yet=(httpx2.TransportError,),
    )
    release_kinds = {"deployments", "daemonsets", "pods", "nodes", "secrets"}

    def reads() -> dict[str, float]:
        return requests_by_resource(h.target_env, ("GET", "LIST"))

    before, writes_before, hub_before = (
        reads(),
        h.target_env.write_requests(),
        h.hub_env.write_requests(),
    )
    count = h.reconciles()
    wait_for("five resyncs", lambda: h.reconciles() >= count + 5, deadline=60)
    after, writes_after, hub_after = (
        reads(),
        h.target_env.write_requests(),
        h.hub_env.write_requests(),
    )
    grown = {r: n - before.get(r, 0.0) for r, n in after.items() if r in release_kinds}
    # Nothing of the releases' workloads, pods, nodes or release Secrets is read again.
    assert not any(grown.values()), grown
    ours = {k: v - writes_before.get(k, 0.0) for k, v in writes_after.items()}
    assert not any(v for (_, r), v in ours.items() if r in {"deployments", "daemonsets"}), ours
    hub = {k: v - hub_before.get(k, 0.0) for k, v in hub_after.items() if v != hub_before.get(k)}
    assert hub == {}, hub


# ---- every object of a release, and the GPU path, followed by watch -------------------

# How fast a change is followed (the bound is 2 s) is measured by
# bench/bench_release_health.py; these cases run at WATCHES_ONLY, so that
# what they see followed at all was followed by watch.
WEBHOOK_CONFIG = "mp-cert-manager-webhook"
WEBHOOK_CA = "cert-manager-webhook-ca"
GPU_NODES = [name for name, gpu in NodeLayout.parse(DEFAULT_LAYOUT).names() if gpu]
MAINTENANCE = {"key": "maintenance", "value": "true", "effect": "NoExecute"}


def _present(h: Harness, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        h.target.get(res, name, namespace=namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True


def _deleted_and_back(h: Harness, res: Any, name: str, namespace: str | None = None) -> None:
    """Delete the object, and wait until it is on the target again."""
    h.target.delete(res, name, namespace=namespace)
    wait_for(f"{name} restored", lambda: _present(h, res, name, namespace), deadline=DEADLINE)


def test_a_deleted_service_comes_back_a_webhook_configuration_is_reported(stack: Stack) -> None:
    stack.run("correct", WATCHES_ONLY)
    # Helm's own install is no drift: not one of these objects is reported.
    assert not any("Service" in m or "Webhook" in m for m in stack.events("ReleaseDrift"))
    _deleted_and_back(stack.h, Service, WEBHOOK, CERT_MANAGER)
    said = f"Service {CERT_MANAGER}/{WEBHOOK} of release mp-cert-manager was deleted; restored"
    wait_for(
        "a ReleaseDrift event saying the Service was restored",
        lambda: said in stack.events("ReleaseDrift"),
        deadline=DEADLINE,
    )
    restored = stack.h.target.get(Service, WEBHOOK, namespace=CERT_MANAGER)
    assert restored.metadata is not None
    # Created again as Helm creates it (an Update), not server-side applied.
    writers = {
        (f.manager, f.operation) for f in restored.metadata.managedFields or [] if not f.subresource
    }
    assert writers == {(FIELD_MANAGER, "Update")}, writers
    # From the stored manifest, not by a helm upgrade.
    assert stack.h.helm_releases()["mp-cert-manager"]["revision"] == "1"
    # A cluster-scoped object is never created from a stored revision, which
    # whoever writes Secrets in cert-manager could have written: reported.
    kept = stack.h.target.get(ValidatingWebhookConfiguration, WEBHOOK_CONFIG)
    stack.h.target.delete(ValidatingWebhookConfiguration, WEBHOOK_CONFIG)
    said = (
        f"ValidatingWebhookConfiguration {WEBHOOK_CONFIG} of release mp-cert-manager was "
        "deleted; not restored (a cluster-scoped object is recreated only by its release's helm)"
    )
    wait_for(
        "a ReleaseDrift event saying the webhook configuration is not restored",
        lambda: said in stack.events("ReleaseDrift"),
        deadline=DEADLINE,
    )
    assert not _present(stack.h, ValidatingWebhookConfiguration, WEBHOOK_CONFIG)
    # Put back as it was, for the tests after this one.
    assert kept.metadata is not None
    kept.metadata.resourceVersion = kept.metadata.uid = None
    kept.metadata.managedFields = None
    stack.h.target.create(kept)
    stack.h.wait_condition("Ready", "True", deadline=DEADLINE)


def test_a_hand_edited_service_is_taken_back_and_reported_with_warn(stack: Stack) -> None:
    stack.run("warn")
    stack.h.target.patch(
        Service,
        WEBHOOK,
        {"spec": {"selector": {"app.kubernetes.io/name": "someone-else"}}},
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
        field_manager="kubectl-edit",
    )
    wait_for(
        "a ReleaseDrift Warning naming the Service's selector",
        lambda: any(
            f"Service {CERT_MANAGER}/{WEBHOOK}" in m
            and "spec.selector" in m
            and "not restored" in m
            for m in stack.events("ReleaseDrift")
        ),
        deadline=DEADLINE,
    )
    service = stack.h.target.get(Service, WEBHOOK, namespace=CERT_MANAGER)
    assert service.spec is not None and service.spec.selector == {
        "app.kubernetes.io/name": "someone-else"
    }
    stack.run("correct")
    wait_for(
        "the Service's selector taken back",
        lambda: (
            (
                stack.h.target.get(Service, WEBHOOK, namespace=CERT_MANAGER).spec or ServiceSpec()
            ).selector
            == {"app.kubernetes.io/name": WEBHOOK}
        ),
        deadline=DEADLINE,
    )


def test_a_secret_a_controller_filled_is_not_emptied_again(stack: Stack) -> None:
    stack.run("correct", WATCHES_ONLY)
    # As the webhook fills its CA Secret: another manager, data the chart never had.
    filled = base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()
    stack.h.target.patch(
        Secret,
        WEBHOOK_CA,
        {"data": {"ca.crt": filled}},
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
        field_manager="cert-manager-webhook",
    )
    # A reconcile judges the drift after the fill: a Service put back proves one ran.
    _deleted_and_back(stack.h, Service, WEBHOOK, CERT_MANAGER)
    stack.h.wait_condition("Ready", "True", deadline=DEADLINE)
    secret = stack.h.target.get(Secret, WEBHOOK_CA, namespace=CERT_MANAGER)
    assert (secret.data or {}).get("ca.crt") == filled, secret.data
    # Gone, it is created again from the manifest (empty, for the webhook to fill).
    _deleted_and_back(stack.h, Secret, WEBHOOK_CA, CERT_MANAGER)
    assert not stack.h.target.get(Secret, WEBHOOK_CA, namespace=CERT_MANAGER).data


def _taints(h: Harness, node: str) -> list[dict[str, Any]]:
    found = h.target.get(Node, node)
    assert found.spec is not None
    return [t.to_dict() for t in found.spec.taints or []]


def _set_taints(h: Harness, node: str, taints: list[dict[str, Any]]) -> None:
    h.target.patch(
        Node, node, {"spec": {"taints": taints}}, patch_type=PatchType.MERGE, field_manager="drain"
    )


def _gpus(s: Stack) -> Any:
    return s.h.status().get("target", {}).get("gpus")


def test_every_gpu_node_tainted_for_maintenance(stack: Stack) -> None:
    """GPUsAvailable follows the GPU nodes by watch, with no resync due and the default --relist."""
    stack.run("correct", WATCHES_ONLY)
    stack.h.wait_condition("GPUsAvailable", "True", "GPUsPublished", deadline=DEADLINE)
    before = {node: _taints(stack.h, node) for node in GPU_NODES}
    try:
        for node in GPU_NODES:
            _set_taints(stack.h, node, [*before[node], MAINTENANCE])
        c = stack.h.wait_condition(
            "GPUsAvailable", "False", "GPUNodesUnavailable", deadline=DEADLINE
        )
        assert f"GPU nodes {', '.join(sorted(GPU_NODES))}" in c["message"], c
        assert "taint maintenance=true:NoExecute" in c["message"], c
        wait_for("no GPU counted", lambda: _gpus(stack) == 0, deadline=DEADLINE)
    finally:
        for node in GPU_NODES:
            _set_taints(stack.h, node, before[node])
    stack.h.wait_condition("GPUsAvailable", "True", "GPUsPublished", deadline=DEADLINE)
    assert _gpus(stack) == 2
