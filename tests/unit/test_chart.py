"""The operator's Helm chart (deploy/chart), rendered by the real helm.

The chart's CRD must be what ``modelplane crds`` prints, and its RBAC exactly
what the operator calls on the hub: namespaced when it watches named
namespaces, cluster-wide only for all of them. tests/integration/
test_chart_rbac.py proves the rules suffice by running the operator with them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.testenv import TestbinMissingError, find_binaries, helm_environ
from typer.testing import CliRunner

from modelplane.api.crd import servingstack_crd
from modelplane.cli.main import app

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart"
GROUP = "infrastructure.modelplane.ai"

# (apiGroups, resources, resourceNames, verbs) the operator needs in each
# watched namespace.
STACK_RULES = {
    ((GROUP,), ("servingstacks",), (), ("list", "watch", "patch")),
    ((GROUP,), ("servingstacks/status",), (), ("patch",)),
    (("",), ("secrets",), (), ("get",)),
    (("",), ("events",), (), ("create",)),
}
# What operator/leader.py calls, in the release namespace: get, then create
# (a missing Lease) or a replace at the version read (update). Create cannot
# be held to a name by RBAC; the rest is held to the release's own Lease.
LEASES = {
    (("coordination.k8s.io",), ("leases",), (), ("create",)),
    (("coordination.k8s.io",), ("leases",), ("mp-modelplane",), ("get", "update")),
}


@pytest.fixture(scope="module")
def helm_binary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    try:
        binary = find_binaries()["helm"]
    except TestbinMissingError as err:
        pytest.fail(str(err), pytrace=False)
    return binary, helm_environ(tmp_path_factory.mktemp("helm-home"))


def _helm(helm: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    binary, env = helm
    return subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def render(helm: tuple[Path, dict[str, str]], *sets: str) -> list[dict[str, Any]]:
    args = ["template", "mp", str(CHART), "--namespace", "modelplane"]
    for value in sets:
        args += ["--set", value]
    proc = _helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def rules(doc: dict[str, Any]) -> set[tuple[tuple[str, ...], ...]]:
    return {
        (
            tuple(r.get("apiGroups", ())),
            tuple(r.get("resources", r.get("nonResourceURLs", ()))),
            tuple(r.get("resourceNames", ())),
            tuple(r["verbs"]),
        )
        for r in doc["rules"]
    }


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def stack_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Roles on ServingStacks, one per watched namespace (not leader election's)."""
    return [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "mp-modelplane"]


def test_chart_crd_is_what_modelplane_crds_prints() -> None:
    chart_copy = list(yaml.safe_load_all((CHART / "crds" / "servingstacks.yaml").read_text()))
    assert chart_copy == [servingstack_crd()], "run hack/chart-crds.sh"
    # And the command itself, byte for byte, as the script writes it.
    printed = CliRunner().invoke(app, ["crds"])
    assert printed.exit_code == 0
    assert (CHART / "crds" / "servingstacks.yaml").read_text() == printed.stdout


def test_helm_lint_passes_in_both_namespace_modes(helm_binary: tuple[Path, dict[str, str]]) -> None:
    for extra in (
        [],
        ["--set", "watchNamespaces={platform}"],
        ["--set", "replicaCount=1", "--set", "leaderElection.enabled=false"],
    ):
        proc = _helm(helm_binary, "lint", "--strict", str(CHART), *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


# The one cluster-wide grant a namespaced install holds, while crds.manage is
# on: reading and patching the ServingStack CRD, and no other.
CRD_RULES = {
    (
        ("apiextensions.k8s.io",),
        ("customresourcedefinitions",),
        ("servingstacks.infrastructure.modelplane.ai",),
        ("get", "patch"),
    )
}


def crd_grant(docs: list[dict[str, Any]]) -> list[Any]:
    """The ClusterRole of the CRD's upkeep, with its rules, and the binding's roleRef."""
    roles = [
        r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] == "mp-modelplane-crd"
    ]
    bindings = [
        b
        for b in of_kind(docs, "ClusterRoleBinding")
        if b["metadata"]["name"] == "mp-modelplane-crd"
    ]
    return [rules(r) for r in roles] + [b["roleRef"]["name"] for b in bindings]


def test_named_namespaces_get_a_role_each_and_nothing_cluster_wide_but_crd_and_metrics(
    helm_binary: tuple[Path, dict[str, str]],
) -> None:
    docs = render(helm_binary, "watchNamespaces={platform,west}", "replicaCount=1")
    assert [r["metadata"]["name"] for r in of_kind(docs, "ClusterRole")] == [
        "mp-modelplane-crd",
        *METRICS_ROLES,
    ]
    assert crd_grant(docs) == [CRD_RULES, "mp-modelplane-crd"]
    assert "--no-manage-crd" not in container(docs)["args"]
    # Beside the leader election Role in the release namespace (below).
    roles = {r["metadata"]["namespace"]: r for r in of_kind(docs, "Role") if r in stack_roles(docs)}
    assert set(roles) == {"platform", "west"}
    assert all(rules(role) == STACK_RULES for role in roles.values())
    bindings = {
        b["metadata"]["namespace"]: b
        for b in of_kind(docs, "RoleBinding")
        if b["metadata"]["name"] == "mp-modelplane"
    }
    assert set(bindings) == {"platform", "west"}
    for binding in bindings.values():
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "mp-modelplane", "namespace": "modelplane"}
        ]
        assert binding["roleRef"]["kind"] == "Role"
    args = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=platform" in args and "--namespace=west" in args
    assert "--all-namespaces" not in args


def test_all_namespaces_get_one_cluster_role(helm_binary: tuple[Path, dict[str, str]]) -> None:
    docs = render(helm_binary, "replicaCount=1")
    assert stack_roles(docs) == []
    # The one namespaced grant: leader election's, in the release namespace.
    assert [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in of_kind(docs, "Role")] == [
        ("modelplane", "mp-modelplane-leader-election")
    ]
    (cluster_role,) = [
        r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] == "mp-modelplane"
    ]
    assert rules(cluster_role) == STACK_RULES
    assert crd_grant(docs) == [CRD_RULES, "mp-modelplane-crd"]
    (binding,) = [
        b for b in of_kind(docs, "ClusterRoleBinding") if b["metadata"]["name"] == "mp-modelplane"
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "mp-modelplane",
    }
    args = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" in args


@pytest.mark.parametrize("watch", [[], ["watchNamespaces={platform}"]])
def test_crds_manage_off_leaves_the_crd_alone_and_grants_nothing_for_it(
    helm_binary: tuple[Path, dict[str, str]], watch: list[str]
) -> None:
    docs = render(helm_binary, "replicaCount=1", "crds.manage=false", *watch)
    assert crd_grant(docs) == []
    assert "--no-manage-crd" in container(docs)["args"]
    if watch:
        # Only the reviews of /metrics callers, which are cluster-scoped.
        assert [r["metadata"]["name"] for r in of_kind(docs, "ClusterRole")] == METRICS_ROLES
        assert [b["metadata"]["name"] for b in of_kind(docs, "ClusterRoleBinding")] == [
            "mp-modelplane-metrics-auth"
        ]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(docs, "Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


@pytest.mark.parametrize("replicas", ["1", "2"])
@pytest.mark.parametrize("watch", [[], ["watchNamespaces={platform}"]])
def test_leader_election_is_on_and_granted_what_leader_py_calls(
    helm_binary: tuple[Path, dict[str, str]], replicas: str, watch: list[str]
) -> None:
    # One replica elects too: a rolling update runs the new pod beside the old.
    docs = render(helm_binary, f"replicaCount={replicas}", *watch)
    args = container(docs)["args"]
    assert "--leader-elect" in args
    assert "--leader-election-lease=mp-modelplane" in args
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    (deployment,) = of_kind(docs, "Deployment")
    assert "strategy" not in deployment["spec"]  # the default rolling update

    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in of_kind(docs, "Role")}
    assert rules(roles[("modelplane", "mp-modelplane-leader-election")]) == LEASES
    bindings = {
        (b["metadata"]["namespace"], b["metadata"]["name"]): b for b in of_kind(docs, "RoleBinding")
    }
    binding = bindings[("modelplane", "mp-modelplane-leader-election")]
    assert binding["roleRef"]["name"] == "mp-modelplane-leader-election"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mp-modelplane", "namespace": "modelplane"}
    ]
    # The stack rules are untouched and nothing of kopf's peering is granted:
    # kopf runs standalone under the Lease.
    if watch:
        assert rules(roles[("platform", "mp-modelplane")]) == STACK_RULES
    else:
        assert rules(of_kind(docs, "ClusterRole")[0]) == STACK_RULES
    every_rule = [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    assert not [r for r in every_rule if "kopf.dev" in r.get("apiGroups", ())]


def test_leader_election_off_means_one_replica_recreated(
    helm_binary: tuple[Path, dict[str, str]],
) -> None:
    docs = render(helm_binary, "replicaCount=1", "leaderElection.enabled=false")
    args = container(docs)["args"]
    assert not [a for a in args if a.startswith("--leader-elect")]
    assert of_kind(docs, "Role") == []
    (deployment,) = of_kind(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}

    refused = _helm(
        helm_binary,
        "template",
        "mp",
        str(CHART),
        "--set",
        "replicaCount=2",
        "--set",
        "leaderElection.enabled=false",
    )
    assert refused.returncode != 0
    assert "replicaCount > 1 needs leaderElection.enabled" in refused.stderr


def test_extra_rules_reach_every_role(helm_binary: tuple[Path, dict[str, str]]) -> None:
    docs = render(
        helm_binary,
        "watchNamespaces={platform}",
        "replicaCount=1",
        "rbac.extraRules[0].apiGroups={}",
        "rbac.extraRules[0].resources={configmaps}",
        "rbac.extraRules[0].verbs={get}",
    )
    (role,) = stack_roles(docs)
    assert (("",), ("configmaps",), (), ("get",)) in rules(role)


def test_deployment_is_locked_down_and_probed(helm_binary: tuple[Path, dict[str, str]]) -> None:
    (deployment,) = of_kind(render(helm_binary), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # The probes in plain HTTP on a port of their own; /metrics on another, over HTTPS.
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8443, "health": 8081}
    args = container["args"]
    assert "--metrics-address=0.0.0.0" in args and "--metrics-port=8443" in args
    assert "--health-port=8081" in args
    assert not [a for a in args if a.startswith("--metrics-cert-dir")]
    # helm's homes live under TMPDIR (actions/helm.py): the one writable mount.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TMPDIR"] == "/tmp" and env["HOME"] == "/tmp"
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]


def test_operator_values_become_flags(helm_binary: tuple[Path, dict[str, str]]) -> None:
    docs = render(
        helm_binary,
        "operator.chartRepository=https://mirror.example/charts",
        "operator.chartRepositoryFor.grove=oci://mirror.example/grove",
        "operator.gaieManifestsUrl=https://mirror.example/gaie",
        "operator.manifestsUrlFor.modelexpress-crds=https://mirror.example/mx",
        "operator.allowUnsafeKubeconfig=true",
        "operator.allowOperatorIdentity=true",
        "operator.noCrossNamespaceRefs=true",
        "operator.resync=60",
        "operator.denyTargetCIDRs={default,10.96.0.0/12}",
        "operator.imageRegistryMirrors={*=mirror.internal,quay.io/jetstack=mirror.internal/js}",
        "operator.imagePullSecrets={pull,other}",
    )
    args = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    for flag in (
        "--chart-repository=https://mirror.example/charts",
        "--chart-repository-for=grove=oci://mirror.example/grove",
        "--gaie-manifests-url=https://mirror.example/gaie",
        "--manifests-url-for=modelexpress-crds=https://mirror.example/mx",
        "--allow-unsafe-kubeconfig",
        "--allow-operator-identity",
        "--no-cross-namespace-refs",
        "--resync=60",
        "--deny-target-cidr=default",
        "--deny-target-cidr=10.96.0.0/12",
        "--image-registry-mirror=*=mirror.internal",
        "--image-registry-mirror=quay.io/jetstack=mirror.internal/js",
        "--image-pull-secret=pull",
        "--image-pull-secret=other",
    ):
        assert flag in args, flag
    defaults = of_kind(render(helm_binary), "Deployment")[0]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    for opt_in in (
        "--allow-unsafe-kubeconfig",
        "--allow-operator-identity",
        "--no-cross-namespace-refs",
    ):
        assert opt_in not in defaults, opt_in
    assert not [a for a in defaults if a.startswith("--image-")]


def test_service_monitor_only_when_asked(helm_binary: tuple[Path, dict[str, str]]) -> None:
    assert of_kind(render(helm_binary), "ServiceMonitor") == []
    (service,) = of_kind(render(helm_binary), "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    (monitor,) = of_kind(
        render(helm_binary, "metrics.serviceMonitor.enabled=true"), "ServiceMonitor"
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    # Prometheus's own token, sent over TLS to the self-signed certificate.
    assert endpoint == {
        "port": "metrics",
        "path": "/metrics",
        "scheme": "https",
        "interval": "30s",
        "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "tlsConfig": {"insecureSkipVerify": True},
    }
    (monitor,) = of_kind(
        render(
            helm_binary,
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.authorization.credentials.name=scraper",
            "metrics.serviceMonitor.authorization.credentials.key=token",
        ),
        "ServiceMonitor",
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"] == {"credentials": {"name": "scraper", "key": "token"}}
    assert "bearerTokenFile" not in endpoint


# The two ClusterRoles of /metrics: the operator's reviews, and the reader's get.
METRICS_ROLES = ["mp-modelplane-metrics-auth", "mp-modelplane-metrics-reader"]
METRICS_AUTH_RULES = {
    (("authentication.k8s.io",), ("tokenreviews",), (), ("create",)),
    (("authorization.k8s.io",), ("subjectaccessreviews",), (), ("create",)),
}


@pytest.mark.parametrize("watch", [[], ["watchNamespaces={platform}"]])
def test_metrics_are_read_through_the_hubs_rbac(
    helm_binary: tuple[Path, dict[str, str]], watch: list[str]
) -> None:
    docs = render(helm_binary, *watch)
    roles = {r["metadata"]["name"]: r for r in of_kind(docs, "ClusterRole")}
    assert rules(roles["mp-modelplane-metrics-auth"]) == METRICS_AUTH_RULES
    assert roles["mp-modelplane-metrics-reader"]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    bindings = {b["metadata"]["name"]: b for b in of_kind(docs, "ClusterRoleBinding")}
    assert bindings["mp-modelplane-metrics-auth"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "mp-modelplane", "namespace": "modelplane"}
    ]
    # Nobody reads the metrics until bound to the reader role.
    assert "mp-modelplane-metrics-reader" not in bindings
    prometheus = {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    docs = render(
        helm_binary,
        *watch,
        *(f"metrics.readers[0].{k}={v}" for k, v in prometheus.items()),
    )
    bindings = {b["metadata"]["name"]: b for b in of_kind(docs, "ClusterRoleBinding")}
    assert bindings["mp-modelplane-metrics-reader"]["subjects"] == [prometheus]
    assert bindings["mp-modelplane-metrics-reader"]["roleRef"]["name"] == (
        "mp-modelplane-metrics-reader"
    )


def test_a_metrics_certificate_secret_is_mounted_and_named(
    helm_binary: tuple[Path, dict[str, str]],
) -> None:
    docs = render(helm_binary, "metrics.certSecret=metrics-tls")
    args = container(docs)["args"]
    assert "--metrics-cert-dir=/etc/modelplane/metrics-certs" in args
    assert {
        "name": "metrics-certs",
        "mountPath": "/etc/modelplane/metrics-certs",
        "readOnly": True,
    } in container(docs)["volumeMounts"]
    (deployment,) = of_kind(docs, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["metrics-certs"]["secret"]["secretName"] == "metrics-tls"


def test_the_charts_image_mirror_flags_reach_the_operators_sources(
    helm_binary: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rendered arguments, given to `modelplane run` as the container
    # would: a rule with '*' and '=' in it survives Helm's quoting.
    from modelplane.operator import process
    from modelplane.operator.options import OperatorOptions

    docs = render(
        helm_binary,
        "operator.imageRegistryMirrors={*=mirror.internal}",
        "operator.imagePullSecrets={pull}",
    )
    args = container(docs)["args"]
    seen: list[OperatorOptions] = []

    async def operator(options: OperatorOptions) -> None:
        seen.append(options)

    monkeypatch.setattr(process, "run", operator)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [options] = seen
    sources = options.sources()
    assert [str(rule) for rule in sources.image_mirrors] == ["*=mirror.internal"]
    assert sources.image_pull_secrets == ("pull",)


def test_the_chart_passes_release_drift_to_run(helm_binary: tuple[Path, dict[str, str]]) -> None:
    def args(*sets: str) -> list[str]:
        docs = render(helm_binary, *sets)
        container = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        return list(container["args"])

    assert "--release-drift=correct" in args()
    assert "--release-drift=warn" in args("operator.releaseDrift=warn")


def test_the_chart_passes_the_mirror_preflight_to_run(
    helm_binary: tuple[Path, dict[str, str]],
) -> None:
    def args(*sets: str) -> list[str]:
        docs = render(helm_binary, *sets)
        container = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        return list(container["args"])

    assert "--mirror-preflight=warn" in args()
    assert "--mirror-preflight=require" in args("operator.mirrorPreflight=require")


def _options_run_with(
    helm_binary: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    *renders: tuple[str, ...],
) -> list[Any]:
    """The operator options ``run`` is given by the chart's args, one per set of values."""
    from modelplane.operator import process
    from modelplane.operator.options import OperatorOptions

    seen: list[OperatorOptions] = []

    async def operator(options: OperatorOptions) -> None:
        seen.append(options)

    monkeypatch.setattr(process, "run", operator)
    for sets in renders:
        result = CliRunner().invoke(app, container(render(helm_binary, *sets))["args"])
        assert result.exit_code == 0, result.output
    return seen


def test_the_charts_rollout_values_reach_the_operators_policy(
    helm_binary: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    seen = _options_run_with(
        helm_binary,
        monkeypatch,
        (),
        (
            "operator.maxConcurrentUpgrades=3",
            "operator.canaryNamespaces={ring-a,ring-b}",
            "operator.upgradeReadyTimeout=90s",
            "operator.schedulerProbeTimeout=off",
        ),
    )
    assert [o.scheduler_probe_seconds for o in seen] == [120.0, 0.0]
    default, staged = (o.rollout_policy() for o in seen)
    assert (default.max_concurrent, default.canary_namespaces) == (1, frozenset())
    assert default.ready_timeout == timedelta(minutes=10)
    assert (staged.max_concurrent, staged.canary_namespaces) == (3, {"ring-a", "ring-b"})
    assert staged.ready_timeout == timedelta(seconds=90)


def test_the_chart_refuses_the_old_canary_selector(
    helm_binary: tuple[Path, dict[str, str]],
) -> None:
    """A stack's labels are its owner's: the chart says what replaced them, not a silent no-op."""
    out = _helm(helm_binary, "template", "mp", str(CHART), "--set", "operator.canarySelector=a=b")
    assert out.returncode != 0
    assert "operator.canaryNamespaces" in out.stderr


def test_the_charts_target_reads_value_reaches_the_operator(
    helm_binary: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _options_run_with(helm_binary, monkeypatch, (), ("operator.maxConcurrentTargetReads=7",))
    assert [o.max_concurrent_target_reads for o in seen] == [50, 7]
