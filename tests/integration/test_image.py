"""The operator image, run the way deploy/chart runs it, against the test hub and a target.

The chart is installed into the hub test API server with the real helm, so
its ServiceAccount, Role and Lease permissions are there. A bare API server
runs no kubelet, so podman stands in for it: the container is started from
the Deployment as the installed release rendered it (``helm get manifest``,
the release's ``helm template``), its command, args and env, the pod's and
the container's securityContext (user and group, read-only root, every
capability dropped, no privilege escalation) and its volumes (``/tmp`` an
emptyDir: a tmpfs here, of the chart's size limit).

The hub is reached as a pod reaches it, in-cluster: a token of the chart's
ServiceAccount (the TokenRequest API), the hub's CA and the namespace are
mounted at ``/var/run/secrets/kubernetes.io/serviceaccount``, and
``KUBERNETES_SERVICE_HOST``/``PORT`` name the API server. What differs from
a pod: those two name the hub's loopback address rather than a Service IP,
the container shares the host's network (``--network host``; the substrate's
chart repository and both API servers listen on loopback), so the metrics
and health ports are free ones, set through the chart's ``metrics.port`` and
``health.port``; the probes are
run by the test, from inside the container, not by a kubelet; and the token
is not rotated.

Asserted: the container runs as uid 65532 with no capability and cannot
write its root; a Managed stack (helm in the image installing the
substrate's charts on the target) reaches Ready; ``/healthz``, ``/readyz``
answer inside the container, and ``/metrics`` there over HTTPS to a
ServiceAccount the chart's ``metrics.readers`` binds (the operator reviews
its token with the chart's own grants); on SIGTERM it exits 0 and
leaves the Lease released.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ServiceAccount
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.conftest import Helm
from tests.integration.hubs import SS, Harness, free_port, service_account_token
from tests.testenv import TestEnv
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
BUILD = ROOT / "hack" / "build-image.sh"
CONTAINERS_CONF = ROOT / "hack" / "containers.conf"
RELEASE = "mp"
SERVICE_ACCOUNT = f"{RELEASE}-modelplane"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# A ServiceAccount the chart binds to its metrics-reader role, as a Prometheus's.
SCRAPER = "scraper"
INSTALL = (
    "run 'bash hack/test-deps.sh --image' as root, which installs podman & co. from Debian's "
    "packages "
    "and builds the image, or: apt-get install podman buildah runc skopeo mmdebstrap uidmap "
    "fuse-overlayfs && bash hack/build-image.sh"
)
# Bytes of a probe's answer kept: enough for /metrics, bounded all the same.
PROBE_LIMIT = 4 * 1024 * 1024


def _podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        env=_podman_env(),
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The image hack/build-image.sh built from the tree as it is; fails if there is none."""
    if shutil.which("podman") is None:
        pytest.fail(f"podman is not installed: {INSTALL}", pytrace=False)
    name = subprocess.run(
        ["bash", str(BUILD), "--print"], capture_output=True, text=True, check=True
    ).stdout.strip()
    check = subprocess.run(
        ["bash", str(BUILD), "--check"], capture_output=True, text=True, env=_podman_env()
    )
    if check.returncode != 0:
        pytest.fail(check.stderr.strip(), pytrace=False)  # it says how to build it
    return name


@dataclass
class Pod:
    """The chart's Deployment, as podman runs it: one container."""

    harness: Harness
    release_namespace: str
    spec: dict[str, Any]  # the pod template's spec
    container: dict[str, Any]
    name: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def port(self, name: str) -> int:
        (port,) = [p["containerPort"] for p in self.container["ports"] if p["name"] == name]
        return int(port)

    def probe(self, path: str) -> tuple[int, str]:
        """GET ``path`` on the health port from inside the container: status and body."""
        return self._get(f"http://127.0.0.1:{self.port('health')}{path}", "")

    def scrape(self, token: str) -> tuple[int, str]:
        """GET /metrics from inside the container, as a scraper holding ``token``."""
        return self._get(f"https://127.0.0.1:{self.port('metrics')}/metrics", token)

    def _get(self, url: str, token: str) -> tuple[int, str]:
        # The operator's certificate is its own self-signed one: not verified,
        # as the chart's ServiceMonitor does not verify it by default.
        script = (
            "import ssl, sys, urllib.error, urllib.request\n"
            "headers = {'Authorization': 'Bearer ' + sys.argv[2]} if sys.argv[2] else {}\n"
            "context = ssl._create_unverified_context()\n"
            "try:\n"
            "    r = urllib.request.urlopen(\n"
            "        urllib.request.Request(sys.argv[1], headers=headers), timeout=5,\n"
            "        context=context)\n"
            "except urllib.error.HTTPError as e:\n"
            "    r = e\n"
            f"body = r.read({PROBE_LIMIT}).decode()\n"
            "print(r.status)\n"
            "sys.stdout.write(body)\n"
        )
        out = podman("exec", self.name, "python3", "-c", script, url, token).stdout
        status, _, body = out.partition("\n")
        return int(status), body

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, check=False)


def _service_account_dir(directory: Path, hub_env: TestEnv, namespace: str) -> Path:
    """What the kubelet projects into a pod of the chart's ServiceAccount."""
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)  # whatever the umask: uid 65532 reads it
    for name, data in (
        ("token", service_account_token(hub_env, namespace, SERVICE_ACCOUNT)),
        ("ca.crt", hub_env.ca_pem.decode()),
        ("namespace", namespace),
    ):
        (directory / name).write_text(data)
        (directory / name).chmod(0o644)
    return directory


def podman_run_args(pod: Pod, image: str, hub_env: TestEnv, service_account: Path) -> list[str]:
    """``podman run`` for the pod's one container, from its spec and nothing else."""
    spec, c = pod.spec, pod.container
    security = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
    assert security.get("runAsNonRoot") is True and security["runAsUser"] != 0, security
    args = ["run", "--rm", "--name", pod.name, "--pull=never", "--network", "host"]
    # A pod's hostname is its name: it is the Lease holder's identity prefix.
    args += ["--hostname", pod.name]
    args += ["--user", f"{security['runAsUser']}:{security['runAsGroup']}"]
    if "fsGroup" in security:
        args += ["--group-add", str(security["fsGroup"])]
    if security.get("readOnlyRootFilesystem"):
        # Only what the pod mounts is writable: no tmpfs of podman's own.
        args += ["--read-only", "--read-only-tmpfs=false"]
    for cap in security.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap.lower()]
    assert not security.get("capabilities", {}).get("add"), security
    assert not security.get("privileged"), security
    if security.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    assert security.get("seccompProfile") == {"type": "RuntimeDefault"}, security  # podman's own

    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in c.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        assert set(volume) == {"name", "emptyDir"}, f"a volume this test cannot stand in: {volume}"
        size = volume["emptyDir"].get("sizeLimit", "1Gi").replace("Gi", "g").replace("Mi", "m")
        args += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-size={size}"]
    if spec.get("automountServiceAccountToken", True):
        args += ["--volume", f"{service_account}:{SA_DIR}:ro"]
        host, port = hub_env.server.removeprefix("https://").rsplit(":", 1)
        args += [
            "--env",
            f"KUBERNETES_SERVICE_HOST={host}",
            "--env",
            f"KUBERNETES_SERVICE_PORT={port}",
        ]

    for var in c.get("env", []):
        if "value" in var:
            value = var["value"]
        else:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, var
            value = pod.release_namespace
        args += ["--env", f"{var['name']}={value}"]
    if c.get("command"):
        args += ["--entrypoint", json.dumps(c["command"])]
    return [*args, image, *c.get("args", [])]


@pytest.fixture
def pod(
    image: str, harness: Harness, hub: Client, hub_env: TestEnv, helm: Helm, tmp_path: Path
) -> Iterator[Pod]:
    release_namespace = f"{harness.ns[:40]}-op"
    hub_kubeconfig = ["--kubeconfig", str(hub_env.kubeconfig_path)]
    s = harness.substrate
    helm.run(
        "install",
        RELEASE,
        str(CHART),
        *hub_kubeconfig,
        "--namespace",
        release_namespace,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{harness.ns}}}",
        "--set",
        f"metrics.port={free_port()}",
        "--set",
        f"health.port={free_port()}",
        "--set",
        "metrics.readers[0].kind=ServiceAccount",
        "--set",
        f"metrics.readers[0].name={SCRAPER}",
        "--set",
        f"metrics.readers[0].namespace={release_namespace}",
        "--set",
        "operator.resync=30",
        "--set",
        "operator.helmTimeout=60",
        "--set",
        f"operator.chartRepository={s.chart_repository}",
        "--set",
        f"operator.gaieManifestsUrl={s.manifests_base}/gaie-crds",
        "--set",
        f"operator.manifestsUrlFor.modelexpress-crds={s.manifests_base}/modelexpress-crds",
    )
    manifest = helm.run("get", "manifest", RELEASE, *hub_kubeconfig, "-n", release_namespace)
    (deployment,) = [
        d for d in yaml.safe_load_all(manifest.stdout) if d and d["kind"] == "Deployment"
    ]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    name = f"mp-{uuid.uuid4().hex[:8]}"
    p = Pod(harness, release_namespace, spec, container, name, tmp_path / "container.log")
    harness.log = p.log  # what wait_condition quotes when it times out
    try:
        yield p
    finally:
        podman("rm", "--force", "--time", "5", name, check=False)
        if p.proc is not None:
            p.proc.wait(30)
        for stack in hub.list(SS, namespace=harness.ns):
            hub.patch(
                SS,
                stack.metadata.name,
                {"metadata": {"finalizers": None}},
                namespace=harness.ns,
                patch_type=PatchType.MERGE,
            )
        helm.run("uninstall", RELEASE, *hub_kubeconfig, "--namespace", release_namespace)


def _proc_status(pod: Pod) -> dict[str, str]:
    out = pod.exec("cat", "/proc/1/status").stdout
    return dict(line.split(":\t", 1) for line in out.splitlines() if ":\t" in line)


def test_the_image_run_as_the_chart_runs_it_makes_a_stack_ready(
    pod: Pod, image: str, hub_env: TestEnv, tmp_path: Path
) -> None:
    h = pod.harness
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({"gateway": {"hostname": "west.example.com"}})
    service_account = _service_account_dir(
        tmp_path / "serviceaccount", hub_env, pod.release_namespace
    )
    argv = podman_run_args(pod, image, hub_env, service_account)
    assert "--leader-elect" in pod.container["args"]
    start = time.monotonic()
    pod.proc = subprocess.Popen(
        ["podman", *argv], stdout=pod.log.open("wb"), stderr=subprocess.STDOUT, env=_podman_env()
    )

    h.wait_condition("Ready", "True", deadline=180, generation=1)
    print(f"container: the stack Ready {time.monotonic() - start:.1f}s after podman run")

    # As the chart runs it: uid and gid 65532, no capability, a root it cannot write.
    status = _proc_status(pod)
    assert status["Uid"].split() == ["65532"] * 4, status["Uid"]
    assert status["Gid"].split() == ["65532"] * 4, status["Gid"]
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0, status
    assert status["NoNewPrivs"].strip() == "1", status
    refused = pod.exec("touch", "/opt/modelplane/written")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    assert pod.exec("touch", "/tmp/written").returncode == 0

    # The probes the chart points the kubelet at, and the scrape, from inside.
    for probe in ("livenessProbe", "readinessProbe"):
        path = pod.container[probe]["httpGet"]["path"]
        assert pod.container[probe]["httpGet"]["port"] == "health"
        answer = wait_for(
            f"{path} to answer 200", lambda p=path: (a := pod.probe(p))[0] == 200 and a, deadline=30
        )
        assert answer == (200, "ok\n"), answer
    assert pod.scrape("")[0] == 401
    h.hub.create(ServiceAccount(metadata=ObjectMeta(name=SCRAPER, namespace=pod.release_namespace)))
    code, text = pod.scrape(service_account_token(hub_env, pod.release_namespace, SCRAPER))
    assert code == 200, text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("modelplane_leader", ())] == 1
    ready = ("modelplane_stack_ready", (("name", "stack"), ("namespace", h.ns)))
    assert samples[ready] == 1

    # It holds the chart's Lease, in the release namespace, as this pod.
    lease_name = next(
        a.split("=", 1)[1]
        for a in pod.container["args"]
        if a.startswith("--leader-election-lease=")
    )
    lease = h.hub.get(Lease, lease_name, namespace=pod.release_namespace)
    assert lease.spec is not None and (lease.spec.holderIdentity or "").startswith(f"{pod.name}_")

    # SIGTERM, as the kubelet stops a pod: it exits cleanly and hands the Lease back.
    podman("kill", "--signal", "TERM", pod.name)
    assert pod.proc.wait(30) == 0, pod.log.read_text()[-3000:]
    released = h.hub.get(Lease, lease_name, namespace=pod.release_namespace)
    assert released.spec is not None and released.spec.holderIdentity is None, released.spec
    assert released.spec.leaseDurationSeconds == 1
    log = pod.log.read_text()
    assert f"released Lease {pod.release_namespace}/{lease_name}" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
