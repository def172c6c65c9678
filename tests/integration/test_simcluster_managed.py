"""Managed mode on a simulated cluster: releases install with --wait, and Ready waits for them.

The fixture charts (tests/integration/substrate.py, ``workloads=True``) run
the Deployments and DaemonSets their component's advisories look for; kwok
runs their pods, so ``helm install --wait`` returns only once they are ready,
and the advisories that read workloads see real status.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from tests.integration.hubs import SS, Harness, stack_gone
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog import components as catalog


def _not_ready(target: Client) -> list[str]:
    """Workloads of the fixture charts that are not ready."""
    out = []
    for d in target.list(Deployment, namespace="*"):
        s = d.status
        if not (s and s.readyReplicas == d.spec.replicas):  # type: ignore[union-attr]
            out.append(f"Deployment {d.metadata.namespace}/{d.metadata.name}")  # type: ignore[union-attr]
    for ds in target.list(DaemonSet, namespace="*"):
        s = ds.status
        if not (s and s.desiredNumberScheduled > 0 and s.numberReady == s.desiredNumberScheduled):
            out.append(f"DaemonSet {ds.metadata.namespace}/{ds.metadata.name}")  # type: ignore[union-attr]
    return out


def test_managed_releases_install_with_wait_and_ready_waits_for_them(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
) -> None:
    h = Harness(hub, hub_env, sim_nodes_target, workload_substrate, tmp_path, "sim-managed")
    try:
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({})
        h.start()
        h.wait_condition("Ready", "True", deadline=600)
        # Ready came after every release with wait: true returned from --wait,
        # so their workloads run now; nothing is left to become ready.
        waited = {
            c.chart.chart
            for c in catalog.components_of_stack(catalog.Stack.STANDARD)
            if c.chart is not None and c.wait
        }
        releases = {k: v for k, v in h.helm_releases().items() if k.startswith("mp-")}
        assert {f"mp-{chart}" for chart in waited} <= set(releases)
        assert all(r["status"] == "deployed" for r in releases.values())
        deployments = {
            (d.metadata.namespace, d.metadata.name)  # type: ignore[union-attr]
            for d in h.target.list(Deployment, namespace="*")
        }
        assert (catalog.ENVOY_GATEWAY_NAMESPACE, "gateway") in deployments
        assert (catalog.BY_NAME["cert-manager"].namespace, "cert-manager-webhook") in deployments
        assert h.target.list(DaemonSet, namespace="*")  # the DRA kubelet plugin
        waited_not_ready = [
            w
            for w in _not_ready(h.target)
            if w.split()[1].split("/")[0] in {c.namespace for c in catalog.COMPONENTS if c.wait}
        ]
        assert waited_not_ready == []
        # The advisories that read workloads see them Available, not "unknown".
        check = subprocess.run(
            [
                sys.executable, "-m", "modelplane.cli.main", "check",
                "--kubeconfig", str(sim_nodes_target.kubeconfig_path), "-o", "json",
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        results = json.loads(check.stdout)["results"]
        workloads = {r["requirement"]: r for r in results if r["requirement"].endswith("available")}
        assert workloads, results
        assert {r["status"] for r in workloads.values()} == {"met"}, workloads
        assert all("Available" in r["message"] for r in workloads.values())
        gpu = [r for r in results if r["requirement"].startswith("GPU nodes")]
        # NFD's label, the kubelet plugin's slices, and no node cordoned or tainted.
        assert len(gpu) == 3, gpu
        assert [r["status"] for r in gpu] == ["met"] * 3, gpu
        assert any(r["message"] == "all 2 GPU nodes are schedulable" for r in gpu), gpu
        h.hub.delete(SS, "stack", namespace=h.ns)
        wait_for("the ServingStack gone", lambda: stack_gone(h.hub, h.ns), deadline=300)
        # Only the operator's releases (mp-*): the session's target is shared.
        assert [r for r in h.helm_releases() if r.startswith("mp-")] == []
    finally:
        h.stop()
