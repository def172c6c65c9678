"""The operator against a real hub and target API server and real helm.

The substrate is stood in for by fixture charts with the real names and
pinned versions, served from a chart repository on loopback (the same
--chart-repository path an air-gapped install takes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.conftest import Helm
from tests.integration.hubs import SS, Harness, stack_gone
from tests.integration.substrate import Substrate, provided_crd_specs, serve_substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import GATEWAY_NAME, NS
from modelplane.catalog.types import CRDServes, ObjectExists

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
AUDIT_LOG = "target-audit.log"
# Deletions only, each once its answer is sent: the order the server served them.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata", "verbs": ["delete"]}, {"level": "None"}],
}
STANDARD_RELEASES = {
    f"mp-{c.chart.chart}"
    for c in catalog.components_of_stack(catalog.Stack.STANDARD)
    if c.chart is not None
}


# gateway-helm's hooks that outlive its release (substrate.RELEASE_HOOKS).
CERTGEN = "mp-gateway-helm-certgen:envoy-gateway-system"
TOPOLOGY_INJECTOR = "envoy-gateway-topology-injector.envoy-gateway-system"
HOOKS_LEFT = (
    (ClusterRole, "clusterroles", CERTGEN),
    (ClusterRoleBinding, "clusterrolebindings", CERTGEN),
    (MutatingWebhookConfiguration, "mutatingwebhookconfigurations", TOPOLOGY_INJECTOR),
)


@pytest.fixture(scope="module")
def substrate(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Substrate]:
    """The fixture charts, with the real charts' hooks that outlive their release."""
    yield from serve_substrate(helm, tmp_path_factory.mktemp("substrate"), hooks=True)


@pytest.fixture
def target(tmp_path: Path) -> Iterator[TestEnv]:
    """A target of this test's own whose API server keeps an audit log of deletions.

    The log goes beside the harness's (``harness.tmp``) so a test reads it there.
    """
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    args = (f"--audit-policy-file={policy}", f"--audit-log-path={tmp_path / AUDIT_LOG}")
    env = TestEnv(tmp_path / "target", extra_apiserver_args=args)
    try:
        env.start()
        yield env
    finally:
        env.stop()


def test_create_installs_every_release_and_object_with_planned_values(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)

    releases = harness.helm_releases()
    assert set(releases) == STANDARD_RELEASES
    assert all(r["status"] == "deployed" for r in releases.values())
    # Values read back from what helm rendered on the target.
    eg = harness.release_values("mp-gateway-helm", catalog.ENVOY_GATEWAY_NAMESPACE)
    assert eg == catalog.BY_NAME["envoy-gateway"].values(None)  # type: ignore[arg-type]
    tm = harness.release_values("mp-trust-manager", catalog.MODELPLANE_NAMESPACE)
    assert tm["app"]["trust"]["namespace"] == catalog.MODELPLANE_NAMESPACE

    gw = harness.target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    assert [listener["name"] for listener in gw["spec"]["listeners"]] == ["http"]
    assert harness.condition("RequirementsMet")["status"] == "True"
    components = {c["name"]: c for c in harness.status()["components"]}
    assert components["cert-manager"]["state"] == "Ready"
    assert components["cert-manager"]["version"] == "v1.20.2"


def _revisions(h: Harness) -> dict[str, int]:
    return {name: int(r["revision"]) for name, r in h.helm_releases().items()}


def test_changing_one_version_pin_upgrades_exactly_that_release(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)
    before = _revisions(harness)
    assert set(before.values()) == {1}

    harness.create({"versions": {"prometheus": "84.5.0"}})
    wait_for(
        "the prometheus release to upgrade",
        lambda: _revisions(harness).get("mp-kube-prometheus-stack") == 2,
        deadline=120,
    )
    # Of the edited spec: the Ready of the first one may still stand.
    harness.wait_condition("Ready", "True", deadline=90, generation=2)
    after = _revisions(harness)
    assert after == {**before, "mp-kube-prometheus-stack": 2}
    values_cm = harness.target.get(
        ConfigMap, "mp-kube-prometheus-stack-values", namespace="monitoring"
    )
    assert (values_cm.data or {})["version"] == "84.5.0"
    components = {c["name"]: c for c in harness.status()["components"]}
    assert components["kube-prometheus-stack"]["version"] == "84.5.0"


def test_delete_tears_down_in_order_and_leaves_nothing(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)
    assert harness.helm_releases()
    for res, _, name in HOOKS_LEFT:
        harness.target.get(res, name)  # made by helm install, outside the release

    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        "the ServingStack to be gone", lambda: stack_gone(harness.hub, harness.ns), deadline=120
    )

    assert harness.helm_releases() == {}

    # The CRDs went with their releases and manifests, so no object of theirs
    # can remain. Deletion of a CRD finishes asynchronously, and a bare API
    # server's cleanup of a CRD deleted moments after it was served can stall
    # ("storage is (re)initializing"), so what is asserted is that nothing is
    # left that is not being deleted.
    def crds_not_deleting() -> list[str]:
        return [
            c.metadata.name or ""
            for c in harness.target.list(CustomResourceDefinition)
            if c.metadata is not None and c.metadata.deletionTimestamp is None
        ]

    assert crds_not_deleting() == []
    # helm uninstall leaves hooks; teardown takes what they left.
    for res, _, name in HOOKS_LEFT:
        with pytest.raises(ApiError) as gone:
            harness.target.get(res, name)
        assert gone.value.status.code == 404, name
    wait_for("modelplane-system deleted", lambda: _namespace_deleting(harness), deadline=60)
    # The order as the target's API server served the deletions (its audit
    # log), not as the operator's log tells it. A release is gone when helm
    # deletes its record, the release Secret, which it does last.
    order = [
        ("gateways", "inference-gateway"),
        ("gatewayclasses", "envoy"),
        ("envoyproxies", "inference-gateway"),
        ("customresourcedefinitions", "inferencepools.inference.networking.k8s.io"),
        # The GAIE file's other CRDs, applied from it: deleted with it.
        ("customresourcedefinitions", "inferencepools.inference.networking.x-k8s.io"),
        ("customresourcedefinitions", "inferenceobjectives.inference.networking.x-k8s.io"),
        ("secrets", "sh.helm.release.v1.mp-lws.v1"),
        # What its hooks left goes right after the release, before what it
        # depends on (cert-manager).
        ("secrets", "sh.helm.release.v1.mp-gateway-helm.v1"),
        *((resource, name) for _, resource, name in HOOKS_LEFT),
        ("secrets", "sh.helm.release.v1.mp-cert-manager.v1"),
        ("namespaces", NS),
    ]
    deleted = _deletions(harness.tmp / AUDIT_LOG)
    positions = [deleted.index(step) if step in deleted else -1 for step in order]
    assert all(p >= 0 for p in positions), (dict(zip(order, positions, strict=True)), deleted)
    assert positions == sorted(positions), deleted


def _deletions(audit_log: Path) -> list[tuple[str, str]]:
    """(resource, name) of every deletion the API server carried out, in the order it did."""
    out: list[tuple[str, str]] = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref, code = event.get("objectRef") or {}, (event.get("responseStatus") or {}).get("code")
        if event.get("verb") == "delete" and code is not None and code < 300:
            out.append((ref.get("resource", ""), ref.get("name", "")))
    return out


def _namespace_deleting(h: Harness) -> bool:
    # A bare API server has no namespace controller: Terminating is as far
    # as a namespace gets here.
    try:
        ns = h.target.get(Namespace, NS)
    except ApiError as err:
        return err.status.code == 404
    return ns.metadata is not None and ns.metadata.deletionTimestamp is not None


def _deployed(h: Harness) -> dict[str, str]:
    return {n: r["revision"] for n, r in h.helm_releases().items() if r["status"] == "deployed"}


def test_operator_killed_mid_install_finishes_without_duplicates(harness: Harness) -> None:
    dynamo = {
        f"mp-{c.chart.chart}"
        for c in catalog.components_of_stack(catalog.Stack.DYNAMO)
        if c.chart is not None
    }
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"stack": "Dynamo"})
    harness.start()
    # A deployed release, so there is something that must not be installed again.
    wait_for("a first deployed release", lambda: _deployed(harness), deadline=120)
    harness.kill()
    before_kill = _deployed(harness)
    # Releases that wait for others come in a later round: the kill landed mid-install.
    assert before_kill and set(before_kill) < dynamo, before_kill

    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)
    releases = harness.helm_releases()
    assert set(releases) == dynamo
    assert all(r["status"] == "deployed" for r in releases.values())
    # Releases deployed before the kill were not installed again.
    assert {name: releases[name]["revision"] for name in before_kill} == before_kill


def test_unreachable_target_turns_ready_false_then_recovers(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)

    harness.target_env.stop()
    c = harness.wait_condition("Ready", "False", "TargetUnreachable", deadline=60)
    assert "cannot reach the target" in c["message"]

    server = harness.target_env.server
    harness.target_env.start()
    assert harness.target_env.server == server, "the target came back elsewhere"
    harness.wait_condition("Ready", "True", deadline=60)


@pytest.mark.parametrize(
    ("secret", "reason", "words"),
    [
        (None, "SecretNotFound", "does not exist"),
        ({"other": "x"}, "SecretKeyMissing", "has no key 'kubeconfig'"),
        ({"kubeconfig": "clusters: [unclosed"}, "KubeconfigRefused", "not valid YAML"),
        ("exec", "KubeconfigRefused", "'exec'"),
        ("file", "KubeconfigRefused", "a path on the operator's disk"),
    ],
    ids=["missing-secret", "missing-key", "not-yaml", "exec-plugin", "file-path"],
)
def test_bad_credentials_get_a_clear_condition(
    harness: Harness, secret: Any, reason: str, words: str
) -> None:
    kubeconfig = dict(harness.target_env.kubeconfig)
    if secret == "exec":
        kubeconfig["users"][0]["user"] = {
            "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}
        }
        secret = {"kubeconfig": yaml.safe_dump(kubeconfig)}
    elif secret == "file":
        kubeconfig["users"][0]["user"] = {
            "client-certificate": "/etc/passwd",
            "client-key": "/etc/shadow",
        }
        secret = {"kubeconfig": yaml.safe_dump(kubeconfig)}
    if secret is not None:
        harness.put_secret(secret)
    harness.create({})
    harness.start()
    c = harness.wait_condition("Ready", "False", reason, deadline=60)
    assert words in c["message"]
    # Nothing was installed with credentials the operator refused.
    assert harness.helm_releases() == {}
    # No credential reaches status, events or the log.
    token = harness.target_env.token
    assert token not in json.dumps(harness.status())
    assert token not in harness.log.read_text()
    events = harness.hub_env.http_client().get(f"/api/v1/namespaces/{harness.ns}/events").text
    assert token not in events


def test_cloud_identity_is_refused_not_silently_ignored(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create(
        {
            "secrets": [
                {"type": "Kubeconfig", "name": "target-kubeconfig", "key": "kubeconfig"},
                {
                    "type": "GoogleApplicationCredentials",
                    "name": "sa",
                    "key": "key.json",
                    "namespace": "crossplane-system",
                },
            ]
        }
    )
    harness.start()
    # The identity's Secret, in another namespace, does not exist: the stack
    # is refused (as for one that does not grant it, so nothing tells which)
    # rather than fall back to the kubeconfig's own (working) credentials.
    c = harness.wait_condition("Ready", "False", "CrossNamespaceRefDenied", deadline=90)
    assert "crossplane-system/sa" in c["message"]
    assert "GoogleApplicationCredentials" in c["message"]
    assert harness.helm_releases() == {}


@dataclass(frozen=True)
class Counts:
    """The operator's reconciles and the requests both API servers served, at one moment."""

    reconciles: int
    hub_writes: dict[tuple[str, str], float]
    target_writes: dict[tuple[str, str], float]
    # GETs of /apis (aggregated discovery): each reconcile starts with one, and
    # nothing else asks the target for it here (the API server's own periodic
    # GETs, of its lease for one, would make a count of all reads go up anyway).
    target_discovery: float

    @classmethod
    def of(cls, h: Harness) -> Counts:
        # Reconciles first: a reconcile is counted before it writes its status,
        # so every write of the reconciles counted here but the last is in the
        # writes read after.
        reconciles = h.reconciles()
        return cls(
            reconciles,
            h.hub_env.write_requests(),
            h.target_env.write_requests(),
            h.target_env.request_total(verb="GET", subresource="apis"),
        )

    def writes(self) -> tuple[object, ...]:
        return (self.hub_writes, self.target_writes)


def _after_reconciles(h: Harness, start: Counts, n: int) -> Counts:
    wait_for(
        f"{n} reconciles after the {start.reconciles}th",
        lambda: h.reconciles() >= start.reconciles + n,
        deadline=60,
    )
    return Counts.of(h)


def test_noop_resync_writes_nothing(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "1")
    harness.wait_condition("Ready", "True", deadline=120)

    # What the install left in flight (kopf posts events after the reconcile
    # that emitted them) lands first: a baseline is taken once two whole
    # reconciles pass without a write to either API server.
    def quiet() -> Counts | None:
        first = Counts.of(harness)
        second = _after_reconciles(harness, first, 2)
        return second if second.writes() == first.writes() else None

    base = wait_for("two reconciles that write nothing", quiet, deadline=120)
    after = _after_reconciles(harness, base, 4)
    # The reconciles in the window re-planned from the watches' copy: no CRD
    # changed, so not even discovery was read again (issue 12, part 3).
    assert after.target_discovery == base.target_discovery
    assert after.target_writes == base.target_writes
    assert after.hub_writes == base.hub_writes


def _apply_crds(h: Harness, crds: list[Any]) -> None:
    from tests.integration.substrate import crd

    for spec in crds:
        h.target.apply(CustomResourceDefinition.from_dict(crd(*spec)), field_manager="owner")


# A real CA certificate: the models parse every clientCAs entry.
CA_PEM = (Path(__file__).parents[1] / "fixtures" / "client-cas" / "fleet-a.pem").read_text()


def test_provided_mode_installs_nothing_and_applies_config_once_served(
    harness: Harness,
) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create(
        {
            "components": "Provided",
            "gateway": {
                "hostname": "west.example.com",
                "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
            },
        }
    )
    harness.start()
    c = harness.wait_condition("RequirementsMet", "False", "RequirementsUnmet", deadline=90)
    # Every unmet requirement is listed, not just the first.
    for component in catalog.components_of_stack(catalog.Stack.STANDARD):
        for requirement in component.requirements:
            if isinstance(requirement, CRDServes):
                named = requirement.crd
            else:
                assert isinstance(requirement, ObjectExists), requirement
                named = requirement.name
            assert named in c["message"], named
    assert harness.condition("Ready")["status"] == "False"
    components = {x["name"]: x for x in harness.status()["components"]}
    assert components["cert-manager"]["mode"] == "Provided"
    assert components["cert-manager"]["state"] == "Unmet"
    assert _absent(harness, GATEWAY, GATEWAY_NAME, NS)

    # The cluster owner brings the substrate; nothing is installed for them.
    _apply_crds(harness, provided_crd_specs())
    harness.target.apply(_device_class(), field_manager="owner")
    harness.wait_condition("RequirementsMet", "True", deadline=90)
    harness.wait_condition("Ready", "True", deadline=90)
    assert harness.helm_releases() == {}
    gw = harness.target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    assert [listener["name"] for listener in gw["spec"]["listeners"]] == ["http", "https"]
    policy = create_namespaced_resource(
        "gateway.envoyproxy.io", "v1alpha1", "ClientTrafficPolicy", "clienttrafficpolicies"
    )
    assert harness.target.get(policy, "cluster-gateway-client-auth", namespace=NS)
    cas = harness.target.get(ConfigMap, "modelplane-fleet-gateway-cas", namespace=NS)
    assert (cas.data or {})["ca.crt"] == CA_PEM

    # Provided substrate is never touched on delete; only the configuration goes.
    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        "the ServingStack to be gone", lambda: stack_gone(harness.hub, harness.ns), deadline=60
    )
    assert len(list(harness.target.list(CustomResourceDefinition))) == len(provided_crd_specs())
    assert _absent(harness, GATEWAY, GATEWAY_NAME, NS)


def _absent(h: Harness, res: Any, name: str, namespace: str | None) -> bool:
    # An API that is not served answers a bare 404 that lightkube does not
    # turn into an ApiError.
    try:
        h.target.get(res, name, namespace=namespace)
    except (ApiError, httpx2.HTTPStatusError) as err:
        code = err.status.code if isinstance(err, ApiError) else err.response.status_code
        return code == 404
    return False


def _device_class() -> Any:
    from lightkube.generic_resource import create_global_resource

    dc = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")
    return dc.from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": catalog.GPU_DEVICE_CLASS},
            "spec": {},
        }
    )


def test_switch_to_provided_never_uninstalls(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)
    installed = set(harness.helm_releases())

    harness.create({"components": "Provided"})
    harness.wait_condition("RequirementsMet", "True", generation=2, deadline=90)
    harness.wait_condition("Ready", "True", generation=2, deadline=90)
    components = {x["name"]: x["mode"] for x in harness.status()["components"]}
    assert components["cert-manager"] == "Provided"
    harness.hub.delete(SS, "stack", namespace=harness.ns)
    wait_for(
        "the ServingStack to be gone", lambda: stack_gone(harness.hub, harness.ns), deadline=60
    )
    assert set(harness.helm_releases()) == installed


def _watches(env: TestEnv, resource: str) -> float:
    """Watches of ``resource`` open on the API server right now."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(env.metrics_text())
        for sample in family.samples
        if sample.name == "apiserver_longrunning_requests"
        and sample.labels.get("verb") == "WATCH"
        and sample.labels.get("resource") == resource
    )


def test_gateway_address_and_ca_reach_status_through_target_watches(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({"gateway": {"hostname": "west.example.com"}})
    # The API server watches ConfigMaps itself; only more than that is ours.
    own_configmap_watches = _watches(harness.target_env, "configmaps")
    # A resync period far beyond the waits' deadlines below: a change that
    # reaches status before them came through the target watches. How fast it
    # comes is measured by bench/bench_operator.py, not asserted here.
    harness.start("--resync", "600")
    harness.wait_condition("Ready", "True", deadline=120)
    # The watches start after the reconcile that reports Ready. A change made
    # before their first LIST is folded into it and wakes nothing, so it waits
    # for the resync (a race in modelplane.operator.watch, about 1 run in 8
    # here when the patch came right after Ready). This test is about changes
    # once the watches run.
    wait_for(
        "the operator's Gateway and ConfigMap watches on the target",
        lambda: (
            _watches(harness.target_env, "gateways") >= 1
            and _watches(harness.target_env, "configmaps") > own_configmap_watches
        ),
        deadline=60,
    )

    harness.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )
    wait_for(
        "the address in status",
        lambda: (harness.status().get("gateway") or {}).get("address") == "203.0.113.10",
        deadline=60,
    )

    # trust-manager's part, played by hand: the CA ConfigMap from the Bundle.
    # A real certificate (the target's own CA will do): only certificates
    # that parse are published.
    ca_pem = harness.target_env.ca_pem.decode()
    harness.target.create(
        ConfigMap.from_dict(
            {
                "metadata": {"name": "modelplane-cluster-ca", "namespace": NS},
                "data": {"ca.crt": ca_pem},
            }
        )
    )
    wait_for(
        "the CA in status",
        lambda: (harness.status().get("gateway") or {}).get("caCertificate") == ca_pem,
        deadline=60,
    )


def test_failed_upgrade_is_reported_and_keeps_what_works(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create({})
    harness.start()
    harness.wait_condition("Ready", "True", deadline=120)
    before = _revisions(harness)

    # A version the repository does not have: helm fails, nothing is undone.
    harness.create({"versions": {"prometheus": "99.0.0"}})
    c = harness.wait_condition("Ready", "False", "ActionFailed", generation=2, deadline=90)
    assert "mp-kube-prometheus-stack" in c["message"]
    components = {x["name"]: x for x in harness.status()["components"]}
    assert components["kube-prometheus-stack"]["state"] == "Failed"
    releases = harness.helm_releases()
    assert releases["mp-kube-prometheus-stack"]["status"] == "deployed"
    assert _revisions(harness) == before
    events = (
        harness.hub_env.http_client().get(f"/api/v1/namespaces/{harness.ns}/events").json()["items"]
    )
    assert any(e["reason"] == "ActionFailed" and e["type"] == "Warning" for e in events)
    assert any(e["reason"] == "InstallSucceeded" for e in events)

    # Putting the pin back recovers without anything reinstalled.
    harness.create({"versions": {"prometheus": "84.4.0"}})
    harness.wait_condition("Ready", "True", generation=3, deadline=60)
    assert _revisions(harness) == before
