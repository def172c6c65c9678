"""Air-gapped Managed installs on the simulated GPU cluster: every pod pulls from the mirror.

The fixture charts (tests/integration/substrate.py, ``workloads=True``) set
their images at the values paths the real charts use, with the real charts'
defaults, and build each reference as the real chart's template does; they
are written from shared/docs/images.md, not from the catalog's image data. So
what the operator installs with ``--image-registry-mirror`` shows, pod spec by
pod spec, whether the catalog names every place the real charts take an image
and a pull secret; ``render`` with the same flags must list what runs.

Pods pull either with the pod's own imagePullSecrets or with their
ServiceAccount's: trust-manager's chart puts its pull secrets only on the
ServiceAccount, so its pods are the ones checked that way. (The simulated
cluster's API server runs without the ServiceAccount admission plugin, which
would otherwise copy them onto the pods.)
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import DaemonSet, Deployment, ReplicaSet, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret, ServiceAccount
from lightkube.types import CascadeType
from tests.integration.hubs import SS, Harness, stack_body, stack_gone
from tests.integration.substrate import (
    RUNTIME_IMAGE_ENV,
    RUNTIME_IMAGE_FLAGS,
    RUNTIME_PULL_SECRET_FLAGS,
    Helm,
    Substrate,
    stand_in_for,
    write_chart,
)
from tests.testenv import TestEnv
from tests.waiting import WaitTimeout, wait_for

from modelplane.api.models import ServingStack
from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import MODELEXPRESS_NAME, MODELEXPRESS_NAMESPACE, NS
from modelplane.pins import Stack
from modelplane.plan import plan

MIRROR = "mirror.internal"
PULL_SECRET = "regcred"
ENVOY_PROXY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
# The one chart whose pull secrets reach its pods only through the ServiceAccount.
THROUGH_SERVICE_ACCOUNT = {(catalog.MODELPLANE_NAMESPACE, "trust-manager")}


# ---- what the target runs ------------------------------------------------------


@dataclass(frozen=True)
class PodSpec:
    """One pod spec on the target: a Pod's, or the template of a workload."""

    kind: str
    namespace: str
    name: str
    owner: str  # "Deployment ns/name" of what it comes from (itself for a workload)
    spec: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def containers(self) -> list[dict[str, Any]]:
        return [
            *(self.spec.get("initContainers") or []),
            *(self.spec.get("containers") or []),
            *(self.spec.get("ephemeralContainers") or []),
        ]

    def images(self) -> list[str]:
        return [str(c["image"]) for c in self.containers()]


WORKLOAD_KINDS: tuple[type[Any], ...] = (Deployment, DaemonSet, StatefulSet, ReplicaSet, Job)


def _top_owner(target: Client, kind: str, namespace: str, name: str, refs: list[Any]) -> str:
    # A Pod's owner is a ReplicaSet for a Deployment: name the Deployment.
    for ref in refs:
        if ref.kind == "ReplicaSet":
            rs = target.get(ReplicaSet, ref.name, namespace=namespace)
            owners = rs.metadata.ownerReferences or []  # type: ignore[union-attr]
            return _top_owner(target, "ReplicaSet", namespace, ref.name, owners)
        return f"{ref.kind} {namespace}/{ref.name}"
    return f"{kind} {namespace}/{name}"


def pod_specs(target: Client) -> list[PodSpec]:
    """Every pod spec on the target: each Pod, and each workload's pod template."""
    out: list[PodSpec] = []
    for pod in target.list(Pod, namespace="*"):
        meta = pod.metadata
        assert meta is not None and meta.namespace and meta.name
        owner = _top_owner(target, "Pod", meta.namespace, meta.name, meta.ownerReferences or [])
        out.append(PodSpec("Pod", meta.namespace, meta.name, owner, pod.to_dict()["spec"]))
    for kind in WORKLOAD_KINDS:
        for obj in target.list(kind, namespace="*"):
            meta = obj.metadata
            assert meta is not None and meta.namespace and meta.name
            body = obj.to_dict()
            owner = _top_owner(
                target, kind.__name__, meta.namespace, meta.name, meta.ownerReferences or []
            )
            spec = body["spec"]["template"]["spec"]
            out.append(PodSpec(kind.__name__, meta.namespace, meta.name, owner, spec))
    return out


def pull_secrets(target: Client, spec: PodSpec) -> tuple[set[str], set[str]]:
    """The Secret names the pod pulls with: its own, and its ServiceAccount's."""
    own = {str(s["name"]) for s in spec.spec.get("imagePullSecrets") or []}
    account = spec.spec.get("serviceAccountName") or "default"
    try:
        sa = target.get(ServiceAccount, account, namespace=spec.namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise
        return own, set()
    return own, {str(s.name) for s in sa.imagePullSecrets or []}


def flag_values(spec: PodSpec, flags: tuple[str, ...]) -> dict[str, list[str]]:
    """``--flag=value`` args of the pod's containers, by flag."""
    out: dict[str, list[str]] = {}
    for c in spec.containers():
        for arg in c.get("args") or []:
            flag, eq, value = str(arg).partition("=")
            if eq and flag in flags:
                out.setdefault(flag, []).append(value)
    return out


def env_values(spec: PodSpec, names: tuple[str, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in spec.containers():
        for e in c.get("env") or []:
            if e.get("name") in names and "value" in e:
                out.setdefault(str(e["name"]), []).append(str(e["value"]))
    return out


def _is_ready(kind: str, body: dict[str, Any]) -> bool:
    status = body.get("status") or {}
    if kind == "DaemonSet":
        want = status.get("desiredNumberScheduled", 0)
        return bool(want) and status.get("numberReady") == want
    return bool(status.get("readyReplicas", 0) == body["spec"].get("replicas", 1))


def _not_ready(target: Client, namespaces: set[str]) -> list[str]:
    """Workloads in ``namespaces`` not yet ready (kwok makes their pods ready)."""
    out = []
    for kind in (Deployment, DaemonSet, StatefulSet):
        for obj in target.list(kind, namespace="*"):
            body = obj.to_dict()
            where = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            if body["metadata"]["namespace"] in namespaces and not _is_ready(kind.__name__, body):
                out.append(f"{kind.__name__} {where}")
    return out


# ---- the install ---------------------------------------------------------------


def stack_namespaces(stack: Stack) -> set[str]:
    """Where the stack's pods run: each component's namespace, and ModelExpress's."""
    out = {c.namespace for c in catalog.components_of_stack(stack) if c.namespace}
    if stack is Stack.DYNAMO:
        out.add(MODELEXPRESS_NAMESPACE)
    return out


def _usable(target: Client, namespace: str) -> bool:
    try:
        ns = target.get(Namespace, namespace)
    except ApiError as err:
        if err.status.code == 404:
            return True
        raise
    return ns.status is None or ns.status.phase != "Terminating"


def put_pull_secret(target: Client, namespaces: set[str]) -> None:
    """``regcred`` in each namespace, as a cluster owner puts it there beforehand."""
    config = {"auths": {MIRROR: {"auth": base64.b64encode(b"puller:not-a-secret").decode()}}}
    for ns in sorted(namespaces):
        # A stack deleted before this one takes its modelplane-system with it.
        wait_for(f"namespace {ns} not terminating", lambda ns=ns: _usable(target, ns), deadline=120)
        target.apply(Namespace.from_dict({"metadata": {"name": ns}}), field_manager="test")
        target.apply(
            Secret.from_dict(
                {
                    "metadata": {"name": PULL_SECRET, "namespace": ns},
                    "type": "kubernetes.io/dockerconfigjson",
                    "data": {
                        ".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()
                    },
                }
            ),
            field_manager="test",
            force=True,
        )


def _exited(h: Harness) -> bool:
    return h.proc is not None and h.proc.poll() is not None


@contextlib.contextmanager
def installed(
    hub: Client,
    hub_env: TestEnv,
    target_env: TestEnv,
    substrate: Substrate,
    tmp_path: Path,
    name: str,
    stack: Stack,
    rules: tuple[str, ...],
) -> Iterator[tuple[Harness, list[PodSpec]]]:
    """A Managed ``stack`` installed with the mirror ``rules`` and ``regcred``, Ready.

    Yields every pod spec on the target once the workloads run, but for
    namespaces that ran something of another test's before; the stack is
    deleted afterwards, so the next install on the session's target starts clean.
    """
    h = Harness(hub, hub_env, target_env, substrate, tmp_path, name)
    namespaces = stack_namespaces(stack)
    ok = False
    try:
        # The session's target may hold other tests' workloads: their
        # namespaces are not this install's to answer for.
        foreign = {s.namespace for s in pod_specs(h.target)} - namespaces
        put_pull_secret(h.target, namespaces)
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({"stack": stack.value})
        mirror = [arg for rule in rules for arg in ("--image-registry-mirror", rule)]
        h.start(*mirror, "--image-pull-secret", PULL_SECRET)
        # An operator that refuses its flags exits: say so now, not at the deadline.
        wait_for(
            "Ready, or the operator gone",
            lambda: _exited(h) or h.condition("Ready").get("status") == "True",
            deadline=600,
            detail=lambda: str(h.condition("Ready")),
        )
        assert not _exited(h), f"the operator exited:\n{h.log.read_text()[-3000:]}"
        wait_for(
            "the stack's workloads ready",
            lambda: _not_ready(h.target, namespaces) == [],
            deadline=300,
            detail=lambda: ", ".join(_not_ready(h.target, namespaces)),
        )
        yield h, [s for s in pod_specs(h.target) if s.namespace not in foreign]
        ok = True
    finally:
        with contextlib.suppress(ApiError):
            h.hub.delete(SS, "stack", namespace=h.ns)
        # Torn down even when the test failed: a stack left behind keeps
        # the session's target claimed, and every later module on it fails.
        try:
            wait_for("the ServingStack gone", lambda: stack_gone(h.hub, h.ns), deadline=300)
        except WaitTimeout:
            if ok:
                raise
        if ok:
            clean_up_hooks(h.target, namespaces)
        h.stop()


def _left(target: Client, namespaces: set[str]) -> list[str]:
    return [
        f"{kind.__name__} {obj.metadata.namespace}/{obj.metadata.name}"  # type: ignore[union-attr]
        for kind in (Pod, *WORKLOAD_KINDS)
        for obj in target.list(kind, namespace="*")
        if obj.metadata.namespace in namespaces  # type: ignore[union-attr]
    ]


def clean_up_hooks(target: Client, namespaces: set[str]) -> None:
    """Delete the hook Jobs uninstall leaves, and wait until the namespaces run nothing.

    Helm does not uninstall hooks; the real charts delete theirs once they
    succeed, the stand-ins keep them to be read (substrate.py). So the next
    install on the session's target sees only what it installed.
    """
    for job in target.list(Job, namespace="*"):
        meta = job.metadata
        assert meta is not None and meta.name and meta.namespace
        if meta.namespace in namespaces:
            # A Job's pods are orphaned unless the deletion says otherwise.
            target.delete(Job, meta.name, namespace=meta.namespace, cascade=CascadeType.BACKGROUND)
    wait_for(
        "the stack's namespaces empty",
        lambda: _left(target, namespaces) == [],
        deadline=120,
        detail=lambda: ", ".join(_left(target, namespaces)),
    )


def envoy_gateway_config(target: Client) -> dict[str, Any]:
    """The EnvoyGateway configuration the gateway-helm release rendered."""
    cm = target.get(ConfigMap, "envoy-gateway-config", namespace=catalog.ENVOY_GATEWAY_NAMESPACE)
    config = yaml.safe_load((cm.data or {})["envoy-gateway.yaml"])
    assert isinstance(config, dict)
    return config


def envoy_proxies(target: Client) -> list[dict[str, Any]]:
    return [p.to_dict() for p in target.list(ENVOY_PROXY, namespace=NS)]


def rendered_images(
    tmp_path: Path, stack: Stack, rules: tuple[str, ...]
) -> tuple[set[str], set[str]]:
    """What ``render`` says the stack pulls with the same flags, offline.

    Every image it lists (after the rules), and those it says a release
    always runs or runs as a hook, with the product's own workloads' images.
    """
    manifest = tmp_path / "stack.yaml"
    manifest.write_text(yaml.safe_dump(stack_body("render", spec={"stack": stack.value})))
    mirror = [arg for rule in rules for arg in ("--image-registry-mirror", rule)]
    proc = subprocess.run(
        [
            sys.executable, "-m", "modelplane.cli.main", "render", "-f", str(manifest),
            "-o", "json", *mirror, "--image-pull-secret", PULL_SECRET,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rendered = json.loads(proc.stdout)
    listed: set[str] = set()
    running: set[str] = set()
    for release in rendered["releases"]:
        for use in release["images"]:
            image = use["mirrored"] or use["image"]
            listed.add(image)
            if use["runs"] in ("always", "hook"):
                running.add(image)
    for obj in rendered["objects"]:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            pod = obj["spec"]["template"]["spec"]
            for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
                listed.add(c["image"])
                running.add(c["image"])
    return listed, running


def assert_render_agrees(specs: list[PodSpec], listed: set[str], running: set[str]) -> None:
    """The target runs what render lists, and all render says always runs."""
    on_target = {image for s in specs for image in s.images()}
    flagged = {
        v for s in specs for values in flag_values(s, RUNTIME_IMAGE_FLAGS).values() for v in values
    }
    assert sorted((on_target | flagged) - listed) == []
    assert sorted(running - on_target) == []


# ---- the tests -----------------------------------------------------------------


def reading_no_pull_secret(stack: Stack) -> set[str]:
    """The namespaces of the stack's charts reading none of their pull-secret values at the pin."""
    out = set()
    for c in catalog.components_of_stack(stack):
        pull = c.images.pull_secrets if c.images is not None else None
        reads = c.chart.reads_at(c.version) if c.chart is not None else None
        if pull is not None and reads is not None and not any(reads.reads(p) for p in pull.paths):
            out.add(c.namespace)
    return out


@pytest.mark.parametrize("stack", [Stack.STANDARD, Stack.DYNAMO])
def test_every_pod_spec_pulls_from_the_mirror_with_the_pull_secret(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
    stack: Stack,
) -> None:
    with installed(
        hub,
        hub_env,
        sim_nodes_target,
        workload_substrate,
        tmp_path,
        f"air-all-{stack.value.lower()}",
        stack,
        (f"*={MIRROR}",),
    ) as (h, specs):
        # Not vacuous: every namespace of the stack runs something.
        namespaces = stack_namespaces(stack)
        assert {s.namespace for s in specs} >= namespaces, sorted(specs, key=str)
        if stack is Stack.DYNAMO:
            assert any(s.name == MODELEXPRESS_NAME for s in specs)

        elsewhere = [f"{s}: {image}" for s in specs for image in s.images()]
        elsewhere = [line for line in elsewhere if f": {MIRROR}/" not in line]
        assert elsewhere == []

        # The pull secret: on the pod, or (trust-manager) on its ServiceAccount;
        # none where the pinned chart reads no pull-secret value (grove at its
        # pin), which the plan says instead of setting a value nothing reads.
        lacking, through_account = set(), set()
        for s in specs:
            own, account = pull_secrets(h.target, s)
            if PULL_SECRET in own:
                continue
            if PULL_SECRET in account:
                through_account.add(s.owner)
            else:
                lacking.add(s.namespace)
        assert lacking == reading_no_pull_secret(stack)
        assert through_account == {
            f"Deployment {ns}/{name}" for ns, name in THROUGH_SERVICE_ACCOUNT
        }

        # Images a controller runs later, and the secrets it gives their pods.
        flags: dict[str, list[str]] = {}
        env: dict[str, list[str]] = {}
        for s in specs:
            for flag, values in flag_values(s, RUNTIME_IMAGE_FLAGS).items():
                flags.setdefault(flag, []).extend(values)
            for var, values in env_values(s, RUNTIME_IMAGE_ENV).items():
                env.setdefault(var, []).extend(values)
            for values in flag_values(s, RUNTIME_PULL_SECRET_FLAGS).values():
                assert all(PULL_SECRET in v.split(";") for v in values), (str(s), values)
        assert set(flags) == set(RUNTIME_IMAGE_FLAGS)
        expected_env = {"IMAGE_NAME"}
        if stack is Stack.DYNAMO:
            expected_env |= {"GROVE_INIT_CONTAINER_IMAGE", "MS_REPOSITORY"}
        assert set(env) == expected_env
        unmoved = [
            f"{k}={v}"
            for k, vs in [*flags.items(), *env.items()]
            for v in vs
            if not v.startswith(f"{MIRROR}/")
        ]
        assert unmoved == []

        # The Envoy proxy is started by Envoy Gateway from our EnvoyProxy,
        # which replaces the chart's defaults: its image must be set there.
        proxies = envoy_proxies(h.target)
        assert proxies
        for proxy in proxies:
            deployment = proxy["spec"]["provider"]["kubernetes"].get("envoyDeployment") or {}
            image = str((deployment.get("container") or {}).get("image", ""))
            assert image.startswith(f"{MIRROR}/envoyproxy/envoy:"), proxy["spec"]
            secrets = (deployment.get("pod") or {}).get("imagePullSecrets") or []
            assert {"name": PULL_SECRET} in secrets, proxy["spec"]

        # The images Envoy Gateway gives the pods it starts: the shutdown
        # manager in each proxy pod, and the rate-limit Deployment.
        provider = envoy_gateway_config(h.target)["provider"]["kubernetes"]
        assert provider["shutdownManager"]["image"].startswith(f"{MIRROR}/"), provider
        rate_limit = provider["rateLimitDeployment"]
        assert rate_limit["container"]["image"].startswith(f"{MIRROR}/"), provider
        assert {"name": PULL_SECRET} in rate_limit["pod"]["imagePullSecrets"], provider

        # render, with the same flags, shows the same images.
        assert_render_agrees(specs, *rendered_images(tmp_path, stack, (f"*={MIRROR}",)))


# Images the Standard stack runs from other registries than quay.io, at
# their chart defaults (images.md): a quay.io rule must leave them as they are.
UNTOUCHED = {
    "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
    "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1",
    "registry.k8s.io/lws/lws:v0.8.0",
    # kube-prometheus-stack runs these beside its quay.io images: the chart's
    # global.imageRegistry would move them too.
    "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.18.0",
    "ghcr.io/jkroepke/kube-webhook-certgen:1.8.2",
    "docker.io/envoyproxy/gateway:v1.8.4",
    "docker.io/envoyproxy/ai-gateway-controller:v1.1.0",
}
MOVED = {
    "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2",
    "mirror.internal/quay/jetstack/cert-manager-webhook:v1.20.2",
    "mirror.internal/quay/jetstack/trust-manager:v0.25.0",
    "mirror.internal/quay/prometheus-operator/prometheus-operator:v0.90.1",
    "mirror.internal/quay/prometheus-operator/prometheus-config-reloader:v0.90.1",
    "mirror.internal/quay/prometheus/prometheus:v3.11.3",
    "mirror.internal/quay/prometheus/node-exporter:v1.11.1",
}


def test_a_per_registry_rule_moves_that_registry_only(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
) -> None:
    rule = f"quay.io={MIRROR}/quay"
    with installed(
        hub,
        hub_env,
        sim_nodes_target,
        workload_substrate,
        tmp_path,
        "air-quay",
        Stack.STANDARD,
        (rule,),
    ) as (h, specs):
        images = {image for s in specs for image in s.images()}
        assert images >= UNTOUCHED | MOVED, sorted(images)
        left_on_quay = sorted(i for i in images if i.startswith("quay.io/"))
        assert left_on_quay == []
        wrongly_moved = sorted(
            i for i in images if i.startswith(f"{MIRROR}/") and not i.startswith(f"{MIRROR}/quay/")
        )
        assert wrongly_moved == []
        # Everything else is exactly as its chart has it.
        assert {i for i in images if not i.startswith(f"{MIRROR}/")} == UNTOUCHED
        # The pull Secret is the mirror's: a component none of whose images
        # moved (NFD, lws, the DRA driver: one namespace each) is not given
        # it. Charts take pull Secrets whole, so a component that moves one
        # image (kube-prometheus-stack) gives them to all its pods.
        moved_in = {
            s.namespace for s in specs if any(i.startswith(f"{MIRROR}/") for i in s.images())
        }
        unmoved = {s.namespace for s in specs} - moved_in
        assert unmoved >= {
            catalog.BY_NAME["node-feature-discovery"].namespace,
            catalog.BY_NAME["leader-worker-set"].namespace,
        }, sorted(unmoved)
        unmoved_with_secret = sorted(
            str(s)
            for s in specs
            if s.namespace in unmoved and PULL_SECRET in pull_secrets(h.target, s)[0]
        )
        assert unmoved_with_secret == []
        flags = {
            f"{flag}={v}"
            for s in specs
            for flag, values in flag_values(s, RUNTIME_IMAGE_FLAGS).items()
            for v in values
        }
        assert flags == {
            f"--acme-http01-solver-image={MIRROR}/quay/jetstack/cert-manager-acmesolver:v1.20.2",
            f"--prometheus-config-reloader={MIRROR}/quay/prometheus-operator/"
            "prometheus-config-reloader:v0.90.1",
            f"--thanos-default-base-image={MIRROR}/quay/thanos/thanos:v0.41.0",
            "--extProcImage=docker.io/envoyproxy/ai-gateway-extproc:v1.1.0",
        }
        # No rule names docker.io: the proxy image is left to Envoy Gateway's default.
        for proxy in envoy_proxies(h.target):
            deployment = proxy["spec"]["provider"]["kubernetes"].get("envoyDeployment") or {}
            image = str((deployment.get("container") or {}).get("image", ""))
            assert not image.startswith(f"{MIRROR}/"), proxy["spec"]

        assert_render_agrees(specs, *rendered_images(tmp_path, Stack.STANDARD, (rule,)))


# ---- the stand-ins against images.md -------------------------------------------

REPO = Path(__file__).resolve().parents[2]
LIST_HEADING = "## Consolidated default image list"
# On images.md's list, but in no pod spec of a stand-in, and why.
NOT_IN_A_POD_SPEC = {
    # Started by Envoy Gateway from the EnvoyProxy / its configuration:
    # checked there by the air-gapped case.
    "docker.io/envoyproxy/envoy:distroless-v1.38.3",
    "docker.io/envoyproxy/ratelimit:1e50889b",
    # Off with the product's values (alertmanager, grafana, trust-manager's
    # default package).
    "quay.io/prometheus/alertmanager:v0.32.0",
    "docker.io/grafana/grafana:13.0.1",
    "quay.io/kiwigrid/k8s-sidecar:2.7.1",
    "quay.io/jetstack/trust-pkg-debian-trixie:20250419.1",
    # Started later: KAI's binder for GPU sharing, cert-manager's solver for
    # an ACME challenge (its image is in a flag, checked as one).
    "ghcr.io/kai-scheduler/kai-scheduler/resourcereservation:v0.16.8",
    # Grove's env entry holds the repository; the tag is the operator's own.
    "ghcr.io/ai-dynamo/grove/grove-initc:v0.1.0-alpha.12-rc2",
    # The product's own Deployment, not a chart's.
    "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.4.1",
}
# In a stand-in's pod spec, but on images.md's optional list: the Prometheus
# Operator's flag for Thanos sidecars, which the product does not configure.
OPTIONAL_BUT_NAMED = {"quay.io/thanos/thanos:v0.41.0"}


def documented_images() -> set[str]:
    """images.md's consolidated default list, read where it lies (beside the repository)."""
    env = os.environ.get("MODELPLANE_SHARED_DOCS")
    path = (Path(env) if env else REPO.parent / "shared" / "docs") / "images.md"
    if not path.exists():
        pytest.skip(f"no shared image list at {path} (set MODELPLANE_SHARED_DOCS)")
    _, found, rest = path.read_text().partition(LIST_HEADING)
    assert found, f"{path} has no {LIST_HEADING!r} section"
    fenced = re.search(r"^```[^\n]*\n(.*?)^```", rest, re.S | re.M)
    assert fenced, f"{path}'s image list is not fenced"
    lines = (line.split("#", 1)[0].strip() for line in fenced.group(1).splitlines())
    return {line for line in lines if line}


def standin_images(helm: Helm, root: Path, stack: Stack) -> set[str]:
    """Every image in the stand-ins' pod specs (and image flags) with the product's values."""
    body = stack_body("render", spec={"stack": stack.value})
    releases = plan(ServingStack.model_validate(body)).releases
    out: set[str] = set()
    for release in releases:
        component = catalog.BY_NAME[release.component]
        chart = write_chart(
            root / stack.value, release.chart, release.version, stand_in_for(component)
        )
        values = root / f"{stack.value}-{release.chart}.yaml"
        values.write_text(yaml.safe_dump(release.values))
        rendered = helm.run("template", release.name, str(chart), "--values", str(values))
        for doc in yaml.safe_load_all(rendered.stdout):
            template = (doc or {}).get("spec", {}).get("template")
            if not template:
                continue
            spec = PodSpec(doc["kind"], "", doc["metadata"]["name"], "", template["spec"])
            out |= set(spec.images())
            out |= {v for vs in flag_values(spec, RUNTIME_IMAGE_FLAGS).values() for v in vs}
    return out


def test_the_stand_ins_run_images_md_defaults_with_the_product_values(
    helm: Helm, tmp_path: Path
) -> None:
    listed = documented_images()
    run = standin_images(helm, tmp_path, Stack.STANDARD) | standin_images(
        helm, tmp_path, Stack.DYNAMO
    )
    assert sorted(run - listed) == sorted(OPTIONAL_BUT_NAMED)
    assert sorted(listed - run) == sorted(NOT_IN_A_POD_SPEC)
