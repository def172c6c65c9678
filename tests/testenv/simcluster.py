"""A simulated GPU cluster on top of a :class:`TestEnv`.

``SimCluster(env).start(nodes=..., crds=..., gateway_controllers=...)`` adds,
in that order:

- kube-controller-manager and kube-scheduler (built from the k8s.io/kubernetes
  module kube-apiserver is built from) and kwok, which keeps the layout's
  nodes Ready and runs their pods without a kubelet, so Deployments and
  DaemonSets become Available and ``helm install --wait`` returns;
- the CRDs and DeviceClasses of ``--crds`` paths, Established;
- the real Envoy Gateway and trust-manager controllers as processes against
  the API server, configured as Managed mode configures their charts.

``stop()`` stops exactly the processes ``start()`` started (by the pids it
recorded under the data directory, and only while their command line still
names it).
"""

from __future__ import annotations

import base64
import datetime
import functools
import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import Client
from pydantic import BaseModel, ConfigDict
from tests.testenv import kube
from tests.testenv.controllers import (
    ENVOY_GATEWAY_VERSION,
    KUBE_CONTROLLERS,
    Processes,
    find_controller,
    kwok_stages,
)
from tests.testenv.env import TestEnv, TestEnvError, _free_port, _write
from tests.testenv.nodes import (
    KWOK_ANNOTATION,
    KWOK_ANNOTATION_VALUE,
    NodeLayout,
    resource_slice,
)
from tests.testenv.nodes import h200 as gpu_hardware
from tests.testenv.nodes import node as node_body
from tests.waiting import WaitTimeout, wait_for

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog import components as catalog

# Stopped in this order: the controllers first, while the API server still answers.
PROCESSES: tuple[str, ...] = (
    "trust-manager",
    "envoy-gateway",
    "kwok",
    "kube-scheduler",
    "kube-controller-manager",
)
STATE_FILE = "simcluster.json"

ENVOY_GATEWAY_CONFIGMAP = "envoy-gateway-config"
ENVOY_GATEWAY_CONFIG_KEY = "envoy-gateway.yaml"
# Envoy Gateway v1.8.3 binds these on every address, whatever its configuration
# says (internal/xds/bootstrap, internal/provider/kubernetes): one Envoy Gateway
# per machine, so a second is refused up front rather than crash-looping.
ENVOY_GATEWAY_FIXED_PORTS = (18000, 18001, 18002, 8081)
ENVOY_GATEWAY_READYZ = "http://127.0.0.1:8081/readyz"
# The v1.8.3 server reads its xDS certificate from this fixed path when its
# provider is Kubernetes (internal/xds/runner/runner.go, xdsTLSCertFilepath).
ENVOY_GATEWAY_CERT_DIR = Path("/certs")

# The chart defaults gateway-helm merges config.envoyGateway into
# (upstream-facts §7, charts/gateway-helm/values.tmpl.yaml at v1.8.3).
_GATEWAY_HELM_DEFAULTS: dict[str, Any] = {
    "gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
    "provider": {"type": "Kubernetes"},
    "logging": {"level": {"default": "info"}},
}


class SimOptions(BaseModel):
    """What ``start`` added, recorded in the data directory."""

    model_config = ConfigDict(frozen=True)

    nodes: str | None = None
    crds: list[str] = []
    gateway_controllers: bool = False


def envoy_gateway_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The EnvoyGateway document the gateway-helm chart renders in Managed mode.

    The chart defaults with ``config.envoyGateway`` from the catalog merged
    over them; ``overrides`` (a test's miswiring) replace top-level keys.
    """
    spec = ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "testenv", "key": "kubeconfig"}]}
    )
    values = catalog.BY_NAME["envoy-gateway"].values(spec)
    config: dict[str, Any] = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyGateway",
        **_GATEWAY_HELM_DEFAULTS,
        **values["config"]["envoyGateway"],
        **(overrides or {}),
    }
    return config


class SimCluster:
    """The processes and objects that make a :class:`TestEnv` a simulated cluster."""

    def __init__(self, env: TestEnv) -> None:
        self.env = env
        self.data_dir = env.data_dir
        self.procs = Processes(self.data_dir, PROCESSES)

    @property
    def _state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def options(self) -> SimOptions | None:
        try:
            return SimOptions.model_validate_json(self._state_path.read_text())
        except (OSError, ValueError):
            return None

    def pids(self) -> dict[str, int]:
        return self.procs.pids()

    # ---- lifecycle -------------------------------------------------------------

    def start(
        self,
        *,
        nodes: NodeLayout | None = None,
        crds: Sequence[Path] = (),
        gateway_controllers: bool = False,
        timeout: float = 180.0,
    ) -> SimCluster:
        """Add what was asked; the env must be running."""
        if not self.env.is_running():
            raise TestEnvError(f"the API server in {self.data_dir} is not running")
        preflight(nodes=nodes, crds=crds, gateway_controllers=gateway_controllers)
        self.stop()  # leftovers of an earlier start on this directory
        options = SimOptions(
            nodes=str(nodes) if nodes else None,
            crds=[str(Path(p).resolve()) for p in crds],
            gateway_controllers=gateway_controllers,
        )
        _write(self._state_path, options.model_dump_json(indent=2).encode() + b"\n", 0o644)
        try:
            if nodes is not None:
                self._start_nodes(nodes, timeout)
            if crds:
                kube.apply_crds(self.env, [Path(p) for p in crds], deadline=timeout)
            if gateway_controllers:
                self.start_envoy_gateway(timeout=timeout)
                self._start_trust_manager(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.procs.stop(PROCESSES, timeout)

    # ---- nodes -----------------------------------------------------------------

    def _kubeconfig(self) -> str:
        return str(self.env.kubeconfig_path)

    def _start_nodes(self, layout: NodeLayout, timeout: float) -> None:
        pki = self.env.pki_dir
        kcm_port, sched_port = _free_port(), _free_port()
        while sched_port == kcm_port:
            sched_port = _free_port()
        self.procs.spawn(
            "kube-controller-manager",
            [
                str(find_controller("kube-controller-manager")),
                f"--kubeconfig={self._kubeconfig()}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.data_dir / 'kcm-certs'}",
                "--leader-elect=false",
                # Pods get the ServiceAccount tokens and CA a kubelet would mount.
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--v=0",
            ],
        )
        self.procs.spawn(
            "kube-scheduler",
            [
                str(find_controller("kube-scheduler")),
                f"--kubeconfig={self._kubeconfig()}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--cert-dir={self.data_dir / 'scheduler-certs'}",
                "--leader-elect=false",
                "--v=0",
            ],
        )
        self.procs.spawn(
            "kwok",
            [
                str(find_controller("kwok")),
                f"--kubeconfig={self._kubeconfig()}",
                f"--config={kwok_stages()}",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
                # Pod IPs outside the API server's Service range (10.0.0.0/24).
                "--cidr=10.244.0.1/16",
                "--node-ip=10.243.0.1",
                "--node-lease-duration-seconds=40",
            ],
        )
        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", sched_port)):
            self._wait_healthy(name, port, timeout)
        # Read only when there are GPU nodes: CPU nodes need no profile, and
        # a clone without ../shared starts them all the same.
        gpu = gpu_hardware() if layout.gpu else None
        with kube.client(self.env) as client:
            for name, is_gpu in layout.names():
                kube.apply(client, node_body(name, gpu=gpu if is_gpu else None))
                if is_gpu:
                    assert gpu is not None  # read above: the layout has GPU nodes
                    kube.apply(client, resource_slice(name, gpu))
            for name, _ in layout.names():
                self.procs.check("kwok")
                kube.poll(
                    f"node {name} Ready and untainted by the node lifecycle controller",
                    functools.partial(_schedulable, client, name),
                    deadline=timeout,
                    log=self.procs.log("kwok"),
                )

    def _wait_healthy(self, name: str, port: int, timeout: float) -> None:
        def healthy() -> bool:
            self.procs.check(name)
            # Serving certificates are self-signed into --cert-dir; only liveness matters.
            resp = httpx2.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)
            return resp.status_code == 200

        kube.poll(f"{name} /healthz", healthy, deadline=timeout, log=self.procs.log(name))

    # ---- Envoy Gateway ---------------------------------------------------------

    def start_envoy_gateway(
        self, *, overrides: dict[str, Any] | None = None, timeout: float = 180.0
    ) -> None:
        """(Re)start Envoy Gateway with the catalog's configuration (plus ``overrides``).

        The configuration is also written where the chart puts it, ConfigMap
        ``envoy-gateway-config`` in its namespace, so the advisories read the
        configuration this process runs with.
        """
        self.procs.stop(["envoy-gateway"])
        for port in ENVOY_GATEWAY_FIXED_PORTS:
            if not _port_frees(port):
                raise TestEnvError(
                    f"port {port} is in use: Envoy Gateway {ENVOY_GATEWAY_VERSION} binds it on "
                    "every address, so only one simulated cluster per machine runs the "
                    "gateway controllers"
                )
        namespace = catalog.ENVOY_GATEWAY_NAMESPACE
        home = self.data_dir / "envoy-gateway"
        home.mkdir(exist_ok=True)
        config = envoy_gateway_config(overrides)
        text = yaml.safe_dump(config, sort_keys=False)
        config_path = home / ENVOY_GATEWAY_CONFIG_KEY
        _write(config_path, text.encode(), 0o644)
        binary = find_controller("envoy-gateway")
        environ = {
            **os.environ,
            "KUBECONFIG": self._kubeconfig(),
            "ENVOY_GATEWAY_NAMESPACE": namespace,
        }
        with kube.client(self.env) as client:
            kube.apply(client, kube.namespace(namespace))
            kube.apply(
                client,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": ENVOY_GATEWAY_CONFIGMAP, "namespace": namespace},
                    "data": {ENVOY_GATEWAY_CONFIG_KEY: text},
                },
            )
            certs = self._envoy_gateway_certs(client, binary, environ, home)
        if not ENVOY_GATEWAY_CERT_DIR.is_dir():
            # An empty mount point; each Envoy Gateway sees its own certificates
            # there, bind-mounted in a private mount namespace.
            try:
                ENVOY_GATEWAY_CERT_DIR.mkdir(mode=0o755)
            except OSError as exc:
                raise TestEnvError(
                    f"Envoy Gateway {ENVOY_GATEWAY_VERSION} reads its xDS certificate from "
                    f"{ENVOY_GATEWAY_CERT_DIR}, which does not exist and cannot be created "
                    f"({exc}); create that empty directory once (sudo mkdir "
                    f"{ENVOY_GATEWAY_CERT_DIR})"
                ) from None
        unshare = shutil.which("unshare")
        if unshare is None:
            raise TestEnvError("Envoy Gateway needs util-linux's unshare on PATH (see above)")
        user_ns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        self.procs.spawn(
            "envoy-gateway",
            [
                unshare,
                *user_ns,
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                'mount --bind "$1" "$2" && shift 2 && exec "$@"',
                "sh",
                str(certs),
                str(ENVOY_GATEWAY_CERT_DIR),
                str(binary),
                "server",
                f"--config-path={config_path}",
            ],
            env=environ,
        )

        def ready() -> bool:
            self.procs.check("envoy-gateway")
            return httpx2.get(ENVOY_GATEWAY_READYZ, timeout=2).status_code == 200

        kube.poll(
            "Envoy Gateway /readyz", ready, deadline=timeout, log=self.procs.log("envoy-gateway")
        )

    def _envoy_gateway_certs(
        self, client: Client, binary: Path, environ: dict[str, str], home: Path
    ) -> Path:
        """The control-plane certificates, made as the chart's certgen Job makes them.

        ``envoy-gateway certgen`` writes them as Secrets in Envoy Gateway's
        namespace (the infrastructure it creates mounts them from there); the
        server reads its own from files, so the ``envoy-gateway`` Secret is
        copied into a directory of this environment.
        """
        proc = subprocess.run(
            [str(binary), "certgen", "--disable-topology-injector"],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise TestEnvError(f"envoy-gateway certgen failed:\n{proc.stderr[-2000:]}")
        secret = kube.get(client, "v1", "Secret", "envoy-gateway", catalog.ENVOY_GATEWAY_NAMESPACE)
        if secret is None:
            raise TestEnvError("envoy-gateway certgen made no Secret envoy-gateway")
        certs = home / "certs"
        certs.mkdir(mode=0o700, exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            _write(certs / key, base64.b64decode(secret["data"][key]))
        return certs

    # ---- trust-manager ---------------------------------------------------------

    def _start_trust_manager(self, timeout: float) -> None:
        home = self.data_dir / "trust-manager"
        tls = home / "tls"
        tls.mkdir(parents=True, exist_ok=True)
        _self_signed(tls, "trust-manager")
        webhook, metrics, readyz = _free_port(), _free_port(), _free_port()
        with kube.client(self.env) as client:
            # The trust namespace must exist before trust-manager starts.
            kube.apply(client, kube.namespace(catalog.MODELPLANE_NAMESPACE))
        self.procs.spawn(
            "trust-manager",
            [
                str(find_controller("trust-manager")),
                f"--kubeconfig={self._kubeconfig()}",
                f"--trust-namespace={catalog.MODELPLANE_NAMESPACE}",
                "--leader-elect=false",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={webhook}",
                f"--webhook-certificate-dir={tls}",
                f"--metrics-port={metrics}",
                f"--readiness-probe-port={readyz}",
            ],
        )

        def ready() -> bool:
            self.procs.check("trust-manager")
            return httpx2.get(f"http://127.0.0.1:{readyz}/readyz", timeout=2).status_code == 200

        kube.poll(
            "trust-manager /readyz", ready, deadline=timeout, log=self.procs.log("trust-manager")
        )


def preflight(*, nodes: NodeLayout | None, crds: Sequence[Path], gateway_controllers: bool) -> None:
    """Refuse, before anything starts, what ``start`` would fail on part way.

    A binary that was never built, and a ``--crds`` path that cannot be read.
    """
    wanted = [*KUBE_CONTROLLERS, "kwok"] if nodes is not None else []
    wanted += ["envoy-gateway", "trust-manager"] if gateway_controllers else []
    for name in wanted:
        find_controller(name)
    if nodes is not None:
        kwok_stages()
    for path in crds:
        kube.yaml_files(Path(path))


def _schedulable(client: Client, name: str) -> bool:
    node = kube.get(client, "v1", "Node", name)
    # Ready, and the controller-manager has lifted the not-ready taint it puts
    # on new nodes, so pods created after start() schedule at once.
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return kube.condition_true(node, "Ready") and not any(
        t.get("key", "").startswith("node.kubernetes.io/") for t in taints
    )


def _port_frees(port: int, within: float = 10.0) -> bool:
    """Whether ``port`` is free, or becomes so within ``within`` s (a restart's old listener)."""
    try:
        wait_for(f"port {port} free", lambda: _port_free(port), deadline=within)
    except WaitTimeout:
        return False
    return True


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As Go's listeners do: connections of a stopped server lingering in
        # TIME_WAIT do not keep the next one from binding.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _self_signed(directory: Path, name: str) -> None:
    """A serving certificate for 127.0.0.1 (a webhook nothing is configured to call)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    _write(directory / "tls.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(
        directory / "tls.key",
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def describe(cluster: SimCluster) -> str:
    """One line for the command line: what runs, by pid."""
    pids = cluster.pids()
    return ", ".join(f"{name} {pid}" for name, pid in pids.items()) or "nothing"


__all__ = [
    "PROCESSES",
    "SimCluster",
    "SimOptions",
    "describe",
    "envoy_gateway_config",
    "preflight",
]
