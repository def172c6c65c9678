"""``modelplane apply`` and ``delete`` against a simulated cluster, without a hub.

The CLI runs as a subprocess, with the fixture charts (``workloads=True``, so
``helm install --wait`` waits for pods kwok runs) served on loopback. The
tests run in order on the session's simulated cluster: apply to Ready,
apply again (nothing changes), a target another holder claims (refused),
then delete (the target as it was before apply).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace
from tests.integration.hubs import SS, Harness, client_for, stack_body, stack_gone
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv, find_binaries, helm_environ
from tests.waiting import wait_for

from modelplane.actions.claim import LocalRun
from modelplane.catalog.components import BY_NAME, components_of_stack
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.pins import Stack

HUB_HOLDER = "platform/west/0b7c2a4e-uid-of-a-hub-stack"
# kube-prometheus-stack's release namespace, made by the cluster owner here.
OWNERS_NAMESPACE = BY_NAME["kube-prometheus-stack"].namespace
# What the simulated cluster itself keeps writing, whatever the product does.
SIMULATION_WRITES = {"nodes", "pods", "events"}


@dataclass
class Cli:
    target: TestEnv
    substrate: Substrate
    stack: Path
    helm_home: Path

    def run(
        self, verb: str, *extra: str, stack: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        args = [
            sys.executable, "-m", "modelplane.cli.main", verb,
            "-f", str(stack or self.stack),
            "--kubeconfig", str(self.target.kubeconfig_path),
            "--chart-repository", self.substrate.chart_repository,
            "--gaie-manifests-url", f"{self.substrate.manifests_base}/gaie-crds",
            "--manifests-url-for",
            f"modelexpress-crds={self.substrate.manifests_base}/modelexpress-crds",
            # diff takes no --helm-timeout: it runs helm template only.
            *(() if verb == "diff" else ("--helm-timeout", "120")),
            *extra,
        ]  # fmt: skip
        env = {**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])}
        return subprocess.run(
            args, capture_output=True, text=True, env=env, timeout=900, check=False
        )

    def releases(self) -> dict[str, dict[str, Any]]:
        """The product's helm releases on the target (mp-*), by name."""
        proc = subprocess.run(
            [
                str(find_binaries()["helm"]), "list", "--all-namespaces", "-a", "-o", "json",
                "--kubeconfig", str(self.target.kubeconfig_path),
            ],
            capture_output=True, text=True, env=helm_environ(self.helm_home), timeout=120,
            check=True,
        )  # fmt: skip
        return {r["name"]: r for r in json.loads(proc.stdout) if r["name"].startswith("mp-")}


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _namespaces(client: Client) -> set[str]:
    return {ns.metadata.name for ns in client.list(Namespace)}  # type: ignore[union-attr]


def _claim(client: Client) -> Lease | None:
    try:
        return client.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


@dataclass(frozen=True)
class Snapshot:
    namespaces: set[str]
    releases: set[str]
    claim: bool


@pytest.fixture(scope="module")
def cli(
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Cli:
    tmp = tmp_path_factory.mktemp("apply-cli")
    stack = tmp / "stack.yaml"
    stack.write_text(yaml.safe_dump(stack_body("platform", "laptop", {})))
    return Cli(sim_nodes_target, workload_substrate, stack, tmp / "helm-home")


@pytest.fixture(scope="module")
def target(sim_nodes_target: TestEnv) -> Client:
    return client_for(sim_nodes_target)


@pytest.fixture(scope="module")
def before(cli: Cli, target: Client) -> Snapshot:
    # Another module on this session's cluster may have just deleted its
    # stack: its namespaces are still going.
    wait_for(
        "no product namespace terminating",
        lambda: all(
            ns.status is None or ns.status.phase != "Terminating" for ns in target.list(Namespace)
        ),
        deadline=180,
    )
    # A namespace of the cluster owner's that a release goes into: it stays
    # after delete, where the ones the product made go.
    if OWNERS_NAMESPACE not in _namespaces(target):
        target.create(Namespace(metadata=ObjectMeta(name=OWNERS_NAMESPACE)))
    return Snapshot(_namespaces(target), set(cli.releases()), _claim(target) is not None)


def test_bad_input_exits_2_and_writes_nothing(cli: Cli, target: Client, tmp_path: Path) -> None:
    bad_stack = tmp_path / "bad.yaml"
    bad_stack.write_text("apiVersion: infrastructure.modelplane.ai/v1alpha1\nkind: ServingStack\n")
    cases = {
        "a stack that does not validate": cli.run("apply", stack=bad_stack),
        "a stack that does not exist": cli.run("apply", stack=tmp_path / "missing.yaml"),
        "a bad --timeout": cli.run("apply", "--timeout", "soon"),
        "an unknown --chart-repository-for": cli.run(
            "apply", "--chart-repository-for", "nosuch=https://charts.example"
        ),
        "a missing kubeconfig": cli.run("delete", "--kubeconfig", str(tmp_path / "nope")),
        "a context the kubeconfig lacks": cli.run("apply", "--context", "elsewhere"),
    }
    for what, proc in cases.items():
        assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
        assert proc.stderr.strip(), what
    assert _claim(target) is None


def test_apply_installs_a_managed_stack_to_ready(
    cli: Cli, target: Client, before: Snapshot
) -> None:
    assert not before.claim
    proc = cli.run("apply", "--wait", "--timeout", "10m", "-o", "json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    records = _events(proc.stdout)
    assert records[-1]["result"] == "done", records[-1]
    # Every release of the stack is deployed on the target.
    wanted = {
        f"mp-{c.chart.chart}" for c in components_of_stack(Stack.STANDARD) if c.chart is not None
    }
    releases = cli.releases()
    assert wanted <= set(releases), sorted(releases)
    assert {r["status"] for r in releases.values()} == {"deployed"}
    # The progress came from the reconciler: a line per component reaching
    # ready, and the events it emits (one per release installed).
    ready = {r["component"] for r in records if r.get("state") == "ready"}
    assert {"cert-manager", "envoy-gateway", "configuration"} <= ready
    installed = [
        r["event"] for r in records if "event" in r and r["event"]["reason"] == "InstallSucceeded"
    ]
    assert len(installed) == len(wanted)
    # The claim names this run, as the operator's names its ServingStack.
    lease = _claim(target)
    assert lease is not None and lease.spec is not None
    assert lease.spec.holderIdentity == LocalRun.here().holder
    assert lease.spec.holderIdentity.startswith("cli:")


def test_a_second_apply_changes_nothing(cli: Cli, target: Client) -> None:
    revisions = {name: r["revision"] for name, r in cli.releases().items()}
    writes_before = cli.target.write_requests()
    proc = cli.run("apply", "-o", "json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    records = _events(proc.stdout)
    assert not [r for r in records if "event" in r], records
    assert {name: r["revision"] for name, r in cli.releases().items()} == revisions
    # No write of ours reached the target's API server (kwok and the
    # controllers keep writing nodes, pods and events of their own).
    writes = cli.target.write_requests()
    grew = {
        k: v - writes_before.get(k, 0)
        for k, v in writes.items()
        if v > writes_before.get(k, 0) and k[1] not in SIMULATION_WRITES
    }
    assert grew == {}, grew
    # And diff, which reads the target as the operator does, finds nothing to change.
    proc = cli.run("diff")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_a_hub_stack_on_the_laptops_target_is_refused_and_leaves_it_alone(
    cli: Cli, target: Client, hub: Client, hub_env: TestEnv, tmp_path: Path
) -> None:
    revisions = {name: r["revision"] for name, r in cli.releases().items()}
    h = Harness(hub, hub_env, cli.target, cli.substrate, tmp_path, "apply-cli-hub")
    try:
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({})
        h.start()
        c = h.wait_condition("Ready", "False", "TargetClaimed", deadline=120)
        assert f"modelplane apply run by {LocalRun.here().user}@" in c["message"]
        assert "run modelplane delete as" in c["message"]
        # Its deletion leaves the laptop's target as it is.
        h.hub.delete(SS, "stack", namespace=h.ns)
        wait_for("the hub's ServingStack gone", lambda: stack_gone(h.hub, h.ns), deadline=120)
    finally:
        h.stop()
    assert {name: r["revision"] for name, r in cli.releases().items()} == revisions
    assert _claim(target).spec.holderIdentity == LocalRun.here().holder  # type: ignore[union-attr]


def test_a_target_another_holder_claims_is_refused(cli: Cli, target: Client) -> None:
    lease = _claim(target)
    assert lease is not None and lease.spec is not None
    ours = lease.spec.holderIdentity
    revisions = {name: r["revision"] for name, r in cli.releases().items()}
    lease.spec.holderIdentity = HUB_HOLDER
    target.replace(lease)
    try:
        proc = cli.run("apply", "--wait", "-o", "json")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        result = _events(proc.stdout)[-1]
        assert result["result"] == "not done"
        assert "TargetClaimed" in result["message"]
        assert "ServingStack platform/west" in result["message"]
        # Nothing was changed on a target another owner holds.
        assert {name: r["revision"] for name, r in cli.releases().items()} == revisions
        assert _claim(target).spec.holderIdentity == HUB_HOLDER  # type: ignore[union-attr]
        # delete refuses it too: this run never acted on that owner's target.
        proc = cli.run("delete", "-o", "json")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert set(cli.releases()) == set(revisions)
    finally:
        lease = _claim(target)
        assert lease is not None and lease.spec is not None
        lease.spec.holderIdentity = ours
        target.replace(lease)


def test_delete_leaves_the_target_as_it_was(cli: Cli, target: Client, before: Snapshot) -> None:
    installed = len(set(cli.releases()) - before.releases)
    proc = cli.run("delete", "--timeout", "10m", "-o", "json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    records = _events(proc.stdout)
    reasons = [r["event"]["reason"] for r in records if "event" in r]
    # The claim is released last.
    assert reasons[-1] == "ClaimReleased", reasons
    # The view ends with every component removed.
    final = {r["component"]: r["state"] for r in records if "component" in r}
    assert set(final.values()) == {"removed"}, final
    assert {"cert-manager", "gaie-crds", "configuration"} <= set(final)
    assert reasons.count("Uninstalled") == installed
    assert set(cli.releases()) == before.releases
    assert _claim(target) is None
    # Again at once: nothing of the stack is left, and modelplane-system is
    # still terminating, so the claim waits for it, then is taken and released.
    again = cli.run("delete", "--timeout", "5m", "-o", "json")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert _claim(target) is None
    # The product's namespaces go in the cluster's own time (teardown does not wait for them).
    product = {c.namespace for c in BY_NAME.values()} | {CLAIM_NAMESPACE}
    wait_for(
        "the product's namespaces gone",
        lambda: _namespaces(target) & product == before.namespaces & product,
        deadline=300,
        detail=lambda: str(sorted(_namespaces(target) - before.namespaces)),
    )
    assert _namespaces(target) == before.namespaces
    assert OWNERS_NAMESPACE in before.namespaces
