"""The chart's RBAC, proven by running the operator with nothing else.

The chart is installed into the hub test API server with the real helm.
Nothing runs its Deployment here (a bare API server has no controllers,
scheduler or kubelet; test_image.py runs the image as the Deployment would,
this module the process, quicker): the test mints a token for the
chart's ServiceAccount with the TokenRequest API and runs the operator
process itself with a kubeconfig that holds only that token, exactly the
permissions a pod of the Deployment would have, and with the container's
own arguments and environment as the installed release rendered them
(``--leader-elect`` among them, POD_NAMESPACE resolved as the downward API
would).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, Role
from lightkube.types import PatchType
from tests.integration.conftest import Helm
from tests.integration.hubs import (
    SS,
    Harness,
    free_port,
    scrape_metrics,
    service_account_token,
    stack_gone,
)
from tests.integration.substrate import Substrate, provide_substrate
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for

from modelplane.catalog.configuration import GATEWAY_NAME, NS

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart"
RELEASE = "mp"
SERVICE_ACCOUNT = "mp-modelplane"
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
# A real CA certificate: the models parse every clientCAs entry.
CA_PEM = (Path(__file__).parents[1] / "fixtures" / "client-cas" / "fleet-a.pem").read_text()
# A Provided stack fetches no chart and no manifest: any fetch would fail here.
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", Path("/"))


@dataclass
class Installed:
    harness: Harness
    release_namespace: str
    kubeconfig: Path  # holds only the chart's ServiceAccount token
    container: dict[str, Any]  # the Deployment's, as the installed release rendered it
    # Further replicas a test starts, each with a directory of its own.
    others: list[Harness] = field(default_factory=list)

    def command(self, metrics_port: int, health_port: int) -> tuple[list[str], dict[str, str]]:
        """The container's command line and environment, run as a local process.

        Only what a pod gets otherwise is changed: the hub is reached through
        the token's kubeconfig rather than the in-cluster ServiceAccount, the
        metrics and health ports are free ones, and POD_NAMESPACE is what the
        downward API would give.
        """
        ports = ("--metrics-port=", "--health-port=")
        args = [a for a in self.container["args"] if not a.startswith(ports)]
        args += [f"--metrics-port={metrics_port}", f"--health-port={health_port}"]
        args += ["--kubeconfig", str(self.kubeconfig)]
        env = {**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])}
        for var in self.container["env"]:
            if "value" in var:
                env[var["name"]] = var["value"]
            else:
                assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, var
                env[var["name"]] = self.release_namespace
        return [sys.executable, "-m", "modelplane.cli.main", *args], env

    def start(self, harness: Harness | None = None) -> None:
        h = harness or self.harness
        h.metrics_port, h.health_port = free_port(), free_port()
        argv, env = self.command(h.metrics_port, h.health_port)
        h.proc = subprocess.Popen(argv, stdout=h.log.open("wb"), stderr=subprocess.STDOUT, env=env)

    def probe(self, path: str, harness: Harness | None = None) -> httpx2.Response:
        return (harness or self.harness).probe(path)

    def role_rules(self) -> list[dict[str, Any]]:
        role = self.harness.hub.get(Role, f"{RELEASE}-modelplane", namespace=self.harness.ns)
        return [r.to_dict() for r in role.rules or []]

    def set_role_rules(self, rules: list[dict[str, Any]]) -> None:
        self.harness.hub.patch(
            Role,
            f"{RELEASE}-modelplane",
            {"rules": rules},
            namespace=self.harness.ns,
            patch_type=PatchType.MERGE,
        )


@pytest.fixture
def installed(
    hub: Client, hub_env: TestEnv, target: TestEnv, helm: Helm, tmp_path: Path, request: Any
) -> Iterator[Installed]:
    digest = hashlib.sha256(request.node.name.encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:30]
    namespace = f"rbac-{slug.strip('-')}-{digest}"
    release_namespace = f"mp-{digest}"
    h = Harness(hub, hub_env, target, NO_SUBSTRATE, tmp_path, namespace)
    hub_kubeconfig = ["--kubeconfig", str(hub_env.kubeconfig_path)]
    helm.run(
        "install",
        RELEASE,
        str(CHART),
        *hub_kubeconfig,
        "--namespace",
        release_namespace,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        # A refused status write is retried at the next resync: 300 s by default.
        "--set",
        "operator.resync=30",
    )
    kubeconfig = tmp_path / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_service_account_kubeconfig(hub_env, release_namespace)))
    manifest = helm.run("get", "manifest", RELEASE, *hub_kubeconfig, "-n", release_namespace)
    (deployment,) = [
        d for d in yaml.safe_load_all(manifest.stdout) if d and d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    installed = Installed(h, release_namespace, kubeconfig, container)
    try:
        yield installed
    finally:
        for other in installed.others:
            other.stop()
        h.stop()
        # The finalizer is the operator's: without it running, a stack left
        # behind would hold the namespace's cleanup forever, so drop it.
        for stack in hub.list(SS, namespace=namespace):
            hub.patch(
                SS,
                stack.metadata.name,
                {"metadata": {"finalizers": None}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        helm.run("uninstall", RELEASE, *hub_kubeconfig, "--namespace", release_namespace)


def _service_account_kubeconfig(hub_env: TestEnv, namespace: str) -> dict[str, Any]:
    """A kubeconfig whose only credential is a fresh token of the chart's ServiceAccount."""
    token = service_account_token(hub_env, namespace, SERVICE_ACCOUNT)
    config = hub_env.kubeconfig
    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    config["users"] = [{"name": user, "user": {"token": token}}]
    config["contexts"] = [
        {**c, "context": {**c["context"], "user": user}} for c in config["contexts"]
    ]
    return config


def _absent_on_target(h: Harness) -> bool:
    try:
        h.target.get(GATEWAY, GATEWAY_NAME, namespace=NS)
    except ApiError as err:
        return err.status.code == 404
    return False


def test_operator_takes_a_stack_through_its_life_with_only_the_charts_rbac(
    installed: Installed,
) -> None:
    h = installed.harness
    # The token is the chart's ServiceAccount and nothing more: it may not
    # even list the Secrets it reads one by one.
    as_operator = Client(KubeConfig.from_file(installed.kubeconfig))
    with pytest.raises(ApiError) as refused:
        list(as_operator.list(Secret, namespace=h.ns))
    assert refused.value.status.code == 403

    provide_substrate(h.target)
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({"components": "Provided"})
    assert "--leader-elect" in installed.container["args"]
    installed.start()

    h.wait_condition("Ready", "True", deadline=120, generation=1)
    # It leads on the release's Lease, in the release namespace, under the
    # chart's Role for it, and renews it (an update every 2 s) meanwhile.
    lease = f"{installed.release_namespace}/{RELEASE}-modelplane"
    assert f"holds Lease {lease}" in h.log.read_text()
    wait_for(
        "/readyz to answer 200", lambda: installed.probe("/readyz").status_code == 200, deadline=30
    )
    assert installed.probe("/healthz").status_code == 200
    gateway = h.target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    assert [listener["name"] for listener in gateway["spec"]["listeners"]] == ["http"]

    # Update: a hostname and a client CA add the HTTPS listener.
    h.create(
        {
            "components": "Provided",
            "gateway": {
                "hostname": "west.example.com",
                "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
            },
        }
    )
    h.wait_condition("Ready", "True", deadline=120, generation=2)
    gateway = h.target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    assert [listener["name"] for listener in gateway["spec"]["listeners"]] == ["http", "https"]

    # Delete: kopf's finalizer patch and the teardown both run under the chart's RBAC.
    h.hub.delete(SS, "stack", namespace=h.ns)
    wait_for("the ServingStack to be gone", lambda: stack_gone(h.hub, h.ns), deadline=120)
    assert _absent_on_target(h)
    log = h.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert "forbidden" not in log.lower(), log[-3000:]


def _without(rules: list[dict[str, Any]], resource: str) -> list[dict[str, Any]]:
    kept = [r for r in rules if resource not in r["resources"]]
    assert len(kept) == len(rules) - 1, rules
    return kept


@pytest.mark.parametrize(
    ("resource", "verb"), [("secrets", "get"), ("servingstacks/status", "patch")]
)
def test_a_missing_rule_is_named_and_the_operator_keeps_running(
    installed: Installed, resource: str, verb: str
) -> None:
    h = installed.harness
    provide_substrate(h.target)
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    full = installed.role_rules()
    installed.set_role_rules(_without(full, resource))
    h.create({"components": "Provided"})
    installed.start()

    named = f"the hub refused the operator {verb} on {resource}"
    if resource == "secrets":
        c = h.wait_condition("Ready", "False", "HubForbidden", deadline=90)
        assert named in c["message"], c
        assert f'cannot {verb} resource "{resource}"' in c["message"], c
    else:
        # Status is where the operator reports; with that refused, the log says it.
        wait_for("the log to name the refusal", lambda: named in h.log.read_text(), deadline=90)

    # No crash loop: the process lives, answers /healthz, and tries again.
    tried = h.reconciles()
    wait_for("another reconcile", lambda: h.reconciles() > tried, deadline=90)
    assert h.proc is not None and h.proc.poll() is None
    assert installed.probe("/healthz").status_code == 200
    assert "Traceback" not in h.log.read_text(), h.log.read_text()[-3000:]

    # Given the rule back, the same process carries on to Ready.
    installed.set_role_rules(full)
    h.wait_condition("Ready", "True", deadline=120)


def _leading(h: Harness) -> bool | None:
    """Whether the replica leads, by its own gauge; None before it serves metrics."""
    try:
        return h.operator_counter("modelplane_leader") == 1
    except httpx2.HTTPError:
        return None


def test_two_replicas_under_the_charts_rbac_elect_one_leader(installed: Installed) -> None:
    h = installed.harness
    (h.tmp / "b").mkdir()
    b = Harness(h.hub, h.hub_env, h.target_env, NO_SUBSTRATE, h.tmp / "b", h.ns)
    installed.others.append(b)
    installed.start()
    installed.start(b)
    replicas = (h, b)

    def one_leads() -> tuple[Harness, Harness] | None:
        leading = [_leading(r) for r in replicas]
        if sorted(leading, key=str) != [False, True]:
            return None
        return (h, b) if leading[0] else (b, h)

    leader, standby = wait_for("one replica to lead", one_leads, deadline=60)
    lease = h.hub.get(Lease, f"{RELEASE}-modelplane", namespace=installed.release_namespace)
    holder = lease.spec.holderIdentity if lease.spec else None
    assert holder and f"{holder} holds Lease" in leader.log.read_text()
    # Its gauge is 0 from the start: its log says when it has found the holder.
    wait_for(
        "the other replica to stand by",
        lambda: f"held by {holder}; standing by" in standby.log.read_text(),
        deadline=30,
    )

    # Both are ready, so a rolling update goes on; the standby says what it is.
    def ready(r: Harness) -> httpx2.Response | None:
        answer = installed.probe("/readyz", r)
        return answer if answer.status_code == 200 else None

    assert wait_for("the leader ready", lambda: ready(leader), deadline=60).text == "ok\n"
    answer = wait_for("the standby ready", lambda: ready(standby), deadline=30).text
    assert answer == (
        f"standby: the Lease {installed.release_namespace}/{RELEASE}-modelplane "
        f"is held by {holder}\n"
    )
    for r in replicas:
        assert "forbidden" not in r.log.read_text().lower(), r.log.read_text()[-3000:]


def test_metrics_are_served_only_to_what_the_charts_reader_role_admits(
    installed: Installed, hub: Client, hub_env: TestEnv
) -> None:
    """The operator, with only the chart's grants, reviews each caller of /metrics with the hub."""
    h = installed.harness
    ns = installed.release_namespace
    for name in ("scraper", "stranger"):
        hub.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace=ns)))
    # As the chart's metrics.readers binds it, or an admin does for their Prometheus.
    hub.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name=f"{ns}-scraper"),
            roleRef=RoleRef(
                apiGroup="rbac.authorization.k8s.io",
                kind="ClusterRole",
                name=f"{RELEASE}-modelplane-metrics-reader",
            ),
            subjects=[Subject(kind="ServiceAccount", name="scraper", namespace=ns)],
        )
    )
    try:
        installed.start()
        port = h.metrics_port
        assert port is not None
        scraper = service_account_token(hub_env, ns, "scraper")
        served = wait_for(
            "/metrics to serve the reader",
            lambda: _scraped(port, scraper),
            deadline=60,
            detail=lambda: h.log.read_text(),
        )
        assert served.status_code == 200
        assert "modelplane_reconciles_total" in served.text

        # Nobody else: no token, a token the hub does not know, a real
        # ServiceAccount without the role, and the token in clear text.
        with httpx2.Client(trust_env=False, verify=False, timeout=5) as http:
            anonymous = http.get(f"https://127.0.0.1:{port}/metrics")
        assert anonymous.status_code == 401, anonymous.text
        assert "modelplane_" not in anonymous.text
        assert scrape_metrics(port, "not-a-token").status_code == 401
        stranger = scrape_metrics(port, service_account_token(hub_env, ns, "stranger"))
        assert stranger.status_code == 403, stranger.text
        assert "modelplane_" not in stranger.text
        with httpx2.Client(trust_env=False, timeout=5) as http, pytest.raises(httpx2.HTTPError):
            http.get(
                f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {scraper}"}
            )
        # The probes need no token.
        assert installed.probe("/healthz").status_code == 200
    finally:
        hub.delete(ClusterRoleBinding, f"{ns}-scraper")


def _scraped(port: int, token: str) -> httpx2.Response | None:
    try:
        answer = scrape_metrics(port, token)
    except httpx2.TransportError:
        return None  # not serving yet
    return answer if answer.status_code == 200 else None
