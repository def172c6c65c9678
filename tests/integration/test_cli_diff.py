"""``modelplane diff`` against a target the operator installed, with the fixture charts.

One target for the module: the operator installs the default Managed stack
on it and is stopped, so nothing corrects what a test changes; each test
that changes the target puts it back. Every run of ``diff`` is checked
against the API server's own request counters: it never writes (a server-side
apply dry run is counted apart, with ``dry_run="All"``).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import Harness, private_env, stack_body
from tests.integration.substrate import EXTRA_VERSIONS, Substrate
from tests.testenv import TestEnv, find_binaries

from modelplane.api.models import ServingStack
from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import (
    CLAIM_NAME,
    CLAIM_NAMESPACE,
    ENVOY_PROXY_NAME,
    GATEWAY_NAME,
    NS,
    configuration_for,
)
from modelplane.catalog.types import CRDServes
from modelplane.observe.releases import MAX_RELEASE_BYTES
from modelplane.wire import (
    DIGEST_ANNOTATION,
    FIELD_MANAGER,
    RELEASE_DIGEST_LABEL,
    object_key,
    stamp,
)

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
ENVOY_PROXY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
HUB_NAMESPACE = "cli-diff"
PROMETHEUS = catalog.BY_NAME["kube-prometheus-stack"]
CERT_MANAGER = catalog.BY_NAME["cert-manager"]
GAIE = catalog.BY_NAME["gaie-crds"]
READER = "diff-reader"
DRA = catalog.BY_NAME["nvidia-dra-driver-gpu"]
NEW_PROMETHEUS = EXTRA_VERSIONS["kube-prometheus-stack"][0]
# Verbs that write; apply is counted as APPLY. The API server's renewals of
# its own identity Leases are its writes, so Leases are left out (the
# claim Lease is checked by its resourceVersion instead).
WRITES = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
# Bounds on how long a step may hang on two shared cores, not speed claims.
READY_DEADLINE = 300
RUN_TIMEOUT = 180


def write_requests(env: TestEnv) -> tuple[float, float]:
    """(writes, dry-run writes) the API server served so far, from one scrape."""
    real = dry = 0.0
    for family in text_string_to_metric_families(env.metrics_text()):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name != "apiserver_request_total"
                or labels.get("verb") not in WRITES
                or labels.get("resource") == "leases"
            ):
                continue
            if labels.get("dry_run", ""):
                dry += sample.value
            else:
                real += sample.value
    return real, dry


@dataclass
class Installed:
    harness: Harness
    env: TestEnv
    substrate: Substrate
    tmp: Path

    @property
    def target(self) -> Client:
        return self.harness.target

    def stack_file(self, spec: dict[str, Any], name: str = "stack.yaml") -> Path:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(stack_body(HUB_NAMESPACE, "stack", spec)))
        return path

    def claim_version(self) -> str | None:
        lease = self.target.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        return lease.metadata.resourceVersion if lease.metadata else None

    def diff(self, spec: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
        """Run ``modelplane diff`` and check that it wrote nothing to the target."""
        claim = self.claim_version()
        before, _ = write_requests(self.env)
        proc = subprocess.run(
            [
                sys.executable, "-m", "modelplane.cli.main", "diff",
                "-f", str(self.stack_file(spec)),
                "--kubeconfig", str(self.env.kubeconfig_path),
                "--chart-repository", self.substrate.chart_repository,
                "--gaie-manifests-url", f"{self.substrate.manifests_base}/gaie-crds",
                "--manifests-url-for",
                f"modelexpress-crds={self.substrate.manifests_base}/modelexpress-crds",
                *extra,
            ],
            capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
            env={**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])},
        )  # fmt: skip
        after, _ = write_requests(self.env)
        assert after == before, f"diff wrote to the target:\n{proc.stdout}\n{proc.stderr}"
        assert self.claim_version() == claim
        return proc

    def desired(self, kind: str, name: str) -> dict[str, Any]:
        """The body the operator applies for the default stack's ``kind`` ``name``."""
        stack = ServingStack.model_validate(stack_body(HUB_NAMESPACE, "stack", {}))
        for obj in configuration_for(stack.spec):
            body = stamp(obj.body)
            if body["kind"] == kind and body["metadata"]["name"] == name:
                return body
        raise AssertionError(f"no {kind} {name} in the configuration")

    def restore(self, res: Any, body: dict[str, Any]) -> None:
        """Put back what the operator applied, as it would: its field manager, forced."""
        self.target.apply(res.from_dict(body), field_manager=FIELD_MANAGER, force=True)


@pytest.fixture(scope="module")
def installed(
    hub: Client,
    hub_env: TestEnv,
    substrate: Substrate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("cli-diff")
    with private_env(tmp / "target") as env:
        h = Harness(hub, hub_env, env, substrate, tmp, HUB_NAMESPACE)
        try:
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
            h.create({})
            h.start()
            h.wait_condition("Ready", "True", deadline=READY_DEADLINE)
        finally:
            # Stopped once Ready: nothing may correct what the tests change.
            h.stop()
        yield Installed(h, env, substrate, tmp)


def test_a_converged_target_diffs_clean_and_nothing_is_written(installed: Installed) -> None:
    proc = installed.diff({})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout
    assert proc.stderr == ""
    as_json = installed.diff({}, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["changes"] is False
    assert (doc["releases"], doc["objects"], doc["drift"]) == ([], [], [])


def test_a_pin_change_names_the_release_both_versions_and_the_changed_values(
    installed: Installed,
) -> None:
    spec = {"versions": {"prometheus": NEW_PROMETHEUS}, "nvidiaDriverRoot": "/run/nvidia/driver"}
    proc = installed.diff(spec)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    release = PROMETHEUS.release_name
    assert (
        f"{release} (kube-prometheus-stack): upgrade {PROMETHEUS.version} -> {NEW_PROMETHEUS}"
        in out
    )
    # The rendered manifest diff: the fixture chart writes its version into a ConfigMap.
    assert f'-  version: "{PROMETHEUS.version}"' in out
    assert f'+  version: "{NEW_PROMETHEUS}"' in out

    doc = json.loads(installed.diff(spec, "-o", "json").stdout)
    releases = {r["release"]: r for r in doc["releases"]}
    prometheus = releases[release]
    assert (prometheus["change"], prometheus["old_version"], prometheus["new_version"]) == (
        "upgrade",
        PROMETHEUS.version,
        NEW_PROMETHEUS,
    )
    dra = releases[DRA.release_name]
    assert dra["change"] == "upgrade"
    assert "+nvidiaDriverRoot: /run/nvidia/driver\n" in dra["values_diff"]
    # Nothing else of the installed stack would change.
    assert set(releases) == {release, DRA.release_name}


def test_a_hand_edit_shows_as_drift_and_as_an_update(installed: Installed) -> None:
    body = installed.desired("Gateway", GATEWAY_NAME)
    # What kubectl edit does: an Update under another field manager.
    listeners = [{**body["spec"]["listeners"][0], "port": 8080}]
    installed.target.patch(
        GATEWAY,
        GATEWAY_NAME,
        {"spec": {"listeners": listeners}},
        namespace=NS,
        patch_type=PatchType.MERGE,
        field_manager="kubectl-edit",
    )
    try:
        _, dry_before = write_requests(installed.env)
        proc = installed.diff({})
        _, dry_after = write_requests(installed.env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"Gateway {NS}/{GATEWAY_NAME}: update" in proc.stdout
        assert "drift: spec.listeners" in proc.stdout
        assert "-    port: 8080" in proc.stdout
        assert f"+    port: {body['spec']['listeners'][0]['port']}" in proc.stdout
        # The update is the API server's answer to a dry run, counted as such.
        assert dry_after > dry_before
        doc = json.loads(installed.diff({}, "-o", "json").stdout)
        [drift] = doc["drift"]
        assert drift["key"] == object_key(body)
        assert [o["change"] for o in doc["objects"]] == ["update"]
    finally:
        installed.restore(GATEWAY, body)
    assert installed.diff({}).returncode == 0


def test_a_missing_object_shows_as_a_create(installed: Installed) -> None:
    body = installed.desired("EnvoyProxy", ENVOY_PROXY_NAME)
    installed.target.delete(ENVOY_PROXY, ENVOY_PROXY_NAME, namespace=NS)
    try:
        proc = installed.diff({})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"EnvoyProxy {NS}/{ENVOY_PROXY_NAME}: create" in proc.stdout
        assert f"+  name: {ENVOY_PROXY_NAME}" in proc.stdout
        assert not [
            line
            for line in proc.stdout.splitlines()
            if line.startswith("-") and not line.startswith("---")
        ]
    finally:
        installed.restore(ENVOY_PROXY, body)
    assert installed.diff({}).returncode == 0


def test_image_mirror_rules_show_as_the_values_they_would_set(installed: Installed) -> None:
    # The operator merges the rules into every release's values: a diff that
    # ignored them would call a mirrored install clean, or the reverse.
    proc = installed.diff({}, "--image-registry-mirror", "registry.k8s.io=mirror.internal/k8s")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(
        installed.diff(
            {}, "--image-registry-mirror", "registry.k8s.io=mirror.internal/k8s", "-o", "json"
        ).stdout
    )
    releases = {r["release"]: r for r in doc["releases"]}
    nfd = releases["mp-node-feature-discovery"]
    assert nfd["change"] == "upgrade"
    assert "repository: mirror.internal/k8s/nfd/node-feature-discovery" in nfd["values_diff"]
    # cert-manager pulls from quay.io, which the rule does not name.
    assert "mp-cert-manager" not in releases


def test_manifests_from_a_moved_mirror_show_each_crd_they_would_update(
    installed: Installed,
) -> None:
    # The same files under another URL: the source's digest changes, the CRDs do not.
    moved = installed.substrate.manifests_base.replace("127.0.0.1", "localhost")
    assert moved != installed.substrate.manifests_base
    proc = installed.diff({}, "--gaie-manifests-url", f"{moved}/gaie-crds")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"manifests of gaie-crds {GAIE.version}: apply {moved}/gaie-crds/" in proc.stdout
    updates = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("CustomResourceDefinition ") and line.endswith(": update")
    ]
    # Every CRD the file holds: the requirement's, and the others it brings.
    assert GAIE.manifests is not None
    expected = [r.crd for r in GAIE.requirements if isinstance(r, CRDServes)]
    expected += list(GAIE.manifests.other_crds)
    assert sorted(updates) == sorted(f"CustomResourceDefinition {c}: update" for c in expected)
    assert f"-    {DIGEST_ANNOTATION}: " in proc.stdout
    assert f"+    {DIGEST_ANNOTATION}: " in proc.stdout


def test_a_chart_version_the_repository_lacks_is_an_error_after_the_rest(
    installed: Installed,
) -> None:
    proc = installed.diff({"versions": {"prometheus": "99.0.0"}})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # What can be said is said; the error names the release and helm's reason.
    assert f"upgrade {PROMETHEUS.version} -> 99.0.0" in proc.stdout
    assert proc.stderr.startswith(f"error: release {PROMETHEUS.release_name}: helm template: ")
    assert "99.0.0" in proc.stderr


def test_a_denied_target_is_refused_before_any_request(installed: Installed) -> None:
    lists = installed.env.request_total(verb="LIST")
    proc = installed.diff({}, "--deny-target-cidr", "127.0.0.0/8")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith("error: ") and "127.0.0.0/8" in proc.stderr
    assert installed.env.request_total(verb="LIST") == lists


def test_a_gzip_bomb_in_helm_storage_is_a_clear_error(installed: Installed) -> None:
    name = CERT_MANAGER.release_name
    revision = int(installed.harness.helm_releases()[name]["revision"]) + 1
    # Over the bound once inflated, a few dozen KiB stored; named and
    # labelled as Helm's next revision, so it is the one a plan reads.
    bomb = gzip.compress(b" " * (MAX_RELEASE_BYTES + 1), compresslevel=9)
    secret = f"sh.helm.release.v1.{name}.v{revision}"
    installed.target.create(
        Secret.from_dict(
            {
                "metadata": {
                    "name": secret,
                    "namespace": CERT_MANAGER.namespace,
                    "labels": {
                        "owner": "helm",
                        "name": name,
                        "version": str(revision),
                        "status": "deployed",
                        RELEASE_DIGEST_LABEL: "not-the-desired-digest",
                    },
                },
                "type": "helm.sh/release.v1",
                "data": {"release": base64.b64encode(base64.b64encode(bomb)).decode()},
            }
        )
    )
    try:
        proc = installed.diff({})
    finally:
        installed.target.delete(Secret, secret, namespace=CERT_MANAGER.namespace)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"release {CERT_MANAGER.namespace}/{name} (cert-manager): upgrade" in proc.stdout
    assert (
        f"error: release {name}: Secret {CERT_MANAGER.namespace}/{secret}: the stored "
        "release is unreadable: decompresses to more than"
    ) in proc.stderr


def _reader_kubeconfig(installed: Installed) -> Path:
    """A kubeconfig whose only credential is a token of a ServiceAccount that may only read."""
    rules = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
    installed.target.apply(
        ServiceAccount.from_dict({"metadata": {"name": READER, "namespace": "default"}}),
        field_manager="test",
    )
    installed.target.apply(
        ClusterRole.from_dict({"metadata": {"name": READER}, "rules": rules}),
        field_manager="test",
    )
    installed.target.apply(
        ClusterRoleBinding.from_dict(
            {
                "metadata": {"name": READER},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": READER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": "default"}],
            }
        ),
        field_manager="test",
    )
    with installed.env.http_client() as http:
        response = http.post(
            f"/api/v1/namespaces/default/serviceaccounts/{READER}/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
    response.raise_for_status()
    config = installed.env.kubeconfig
    config["users"] = [{"name": READER, "user": {"token": response.json()["status"]["token"]}}]
    config["contexts"] = [
        {**c, "context": {**c["context"], "user": READER}} for c in config["contexts"]
    ]
    path = installed.tmp / "reader.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_diff_needs_no_right_to_write(installed: Installed) -> None:
    reader = ["--kubeconfig", str(_reader_kubeconfig(installed))]
    proc = installed.diff({}, *reader)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pin = installed.diff({"versions": {"prometheus": NEW_PROMETHEUS}}, *reader)
    assert pin.returncode == 1, pin.stdout + pin.stderr
    assert f"upgrade {PROMETHEUS.version} -> {NEW_PROMETHEUS}" in pin.stdout
