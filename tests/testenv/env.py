"""A real kube-apiserver + etcd on loopback, for integration tests (like envtest).

Nothing here talks to a real cluster: every process listens on 127.0.0.1 only,
on ports picked free at start, with its data under one directory.  The admin
kubeconfig embeds the CA certificate and a bearer token inline, so it carries
no references to local files.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client.parser import text_string_to_metric_families
from tests.waiting import WaitTimeout, wait_for

# The one place the testbin versions are named (besides the go.mod pins that
# build them: hack/build-testbin.sh checks the two agree before building).
TESTBIN_KEY = "k8s-v1.34.4_etcd-v3.6.16_helm-v3.19.5"
BINARIES: tuple[str, ...] = ("kube-apiserver", "etcd", "helm")

SETUP_HINT = "run hack/test-deps.sh (or hack/build-testbin.sh) from the modelplane repository"

ADMIN_USER = "modelplane-testenv-admin"
ADMIN_GROUP = "system:masters"
STATE_FILE = "testenv.json"
KUBECONFIG_FILE = "kubeconfig"

_LOOPBACK = "127.0.0.1"

# Only Leases are audited: the log stays small, and every other read is
# counted from the metrics.
_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources:
      - group: coordination.k8s.io
        resources: [leases]
  - level: None
"""


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
# Create-only requests the API server answers and stores nothing of.
REVIEWS = frozenset({"tokenreviews", "subjectaccessreviews"})


class TestbinMissingError(RuntimeError):
    """The kube-apiserver / etcd / helm binaries have not been built."""

    __test__ = False


class TestEnvError(RuntimeError):
    """A test environment failed to start or stop."""

    __test__ = False


# --------------------------------------------------------------------------
# Binary resolution (mirrored by hack/build-testbin.sh)
# --------------------------------------------------------------------------


def cache_root() -> Path:
    """Where hack/build-testbin.sh caches binaries, one subdirectory per version key."""
    env = os.environ.get("MODELPLANE_TESTBIN_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "modelplane" / "testbin"


def _has_all(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in BINARIES)


def resolve_bin_dir() -> Path:
    """The directory that holds (or should hold) the three binaries.

    ``$MODELPLANE_TESTBIN`` when it holds all three, else the cache directory
    keyed by :data:`TESTBIN_KEY`.  The directory is not checked to exist.
    """
    override = os.environ.get("MODELPLANE_TESTBIN")
    if override and _has_all(Path(override).expanduser()):
        return Path(override).expanduser()
    return cache_root() / TESTBIN_KEY


def find_binaries() -> dict[str, Path]:
    """Map each binary name to its path; raise :class:`TestbinMissingError` if any is missing."""
    directory = resolve_bin_dir()
    missing = [name for name in BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        where = str(directory)
        override = os.environ.get("MODELPLANE_TESTBIN")
        if override:
            where += f" (MODELPLANE_TESTBIN={override} does not hold all of {', '.join(BINARIES)})"
        raise TestbinMissingError(
            f"integration test binaries missing: {', '.join(missing)} not found in {where}; "
            f"{SETUP_HINT}"
        )
    return {name: directory / name for name in BINARIES}


# --------------------------------------------------------------------------
# PKI
# --------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _generate_pki(pki: Path) -> None:
    """CA, serving cert for 127.0.0.1/localhost, service-account key, admin token."""
    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=3650)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelplane-testenv-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.IPv4Address(_LOOPBACK)),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = ec.generate_private_key(ec.SECP256R1())
    token = secrets.token_urlsafe(32)

    _write(pki / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(pki / "ca.key", _pem_key(ca_key))
    _write(pki / "apiserver.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(pki / "apiserver.key", _pem_key(key))
    _write(pki / "sa.key", _pem_key(sa_key))
    _write(
        pki / "sa.pub",
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        0o644,
    )
    # token,user,uid,"group1,group2"
    _write(pki / "tokens.csv", f'{token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n'.encode())


_PKI_FILES = ("ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub", "tokens.csv")


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


# How many times a start is tried on new ports when a server found its port
# taken (by Go's net package: "bind: address already in use").
_START_ATTEMPTS = 3
_PORT_TAKEN = "address already in use"


def _free_port(preferred: int | None = None) -> int:
    if preferred:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # Connections of the previous run may linger in TIME_WAIT; the
            # servers bind with SO_REUSEADDR, so the probe must too, or a
            # restart would move to a new port and strand every kubeconfig.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((_LOOPBACK, preferred))
            except OSError:
                pass
            else:
                return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def _proc_cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # pid (comm) STATE ...; comm may contain spaces/parens, so split at the last ')'.
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _alive(pid: int, marker: str) -> bool:
    """Is ``pid`` running and is it ours (its command line mentions ``marker``)?"""
    cmdline = _proc_cmdline(pid)
    if cmdline is None or marker not in cmdline:
        return False
    if _is_zombie(pid):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _terminate(pids: list[int], marker: str, timeout: float) -> None:
    """SIGTERM the live ones, wait up to ``timeout``, then SIGKILL what remains."""
    live = [p for p in pids if _alive(p, marker)]
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    live = _outlive(live, marker, timeout)
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _outlive(live, marker, 5.0)


def start_logged(
    data_dir: Path, name: str, args: Sequence[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args`` in ``data_dir``, logging to ``NAME.log`` and recording ``NAME.pid``.

    A session of its own, so it outlives us (``stop`` finds it by its pid
    file) and no terminal signal reaches it.
    """
    log = open(data_dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data_dir,
            env=None if env is None else dict(env),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    (data_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc


def _outlive(pids: list[int], marker: str, timeout: float) -> list[int]:
    """Reap ``pids`` as they exit, for up to ``timeout``; the ones still alive."""
    live = list(pids)

    def all_gone() -> bool:
        for pid in live:
            _reap(pid)
        live[:] = [p for p in live if _alive(p, marker)]
        return not live

    with contextlib.suppress(WaitTimeout):
        wait_for("the processes to exit", all_gone, deadline=timeout, interval=0.05)
    return live


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class _State:
    server: str
    etcd_client_port: int
    etcd_peer_port: int
    apiserver_port: int
    etcd_pid: int | None
    apiserver_pid: int | None

    @classmethod
    def load(cls, path: Path) -> _State | None:
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        _write(path, json.dumps(self.__dict__, indent=2).encode() + b"\n", 0o644)


# --------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------


class TestEnv:
    """etcd + kube-apiserver on loopback with data under ``data_dir``.

    ``start()`` returns once ``/readyz`` answers and the server's bootstrap
    writes are done (the ``kubernetes`` Service exists in ``default``); the
    processes run in their own session, so they outlive the Python process
    that started them until ``stop()`` (or ``TestEnv(dir).stop()`` from
    another process, or ``python -m tests.testenv stop DIR``).
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        bin_dir: Path | None = None,
        extra_apiserver_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._bin_dir = bin_dir
        # Appended to kube-apiserver's own (a token webhook, for one).
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self._state: _State | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.start_seconds: float | None = None

    # ---- paths / credentials -------------------------------------------------

    @property
    def kubeconfig_path(self) -> Path:
        return self.data_dir / KUBECONFIG_FILE

    @property
    def pki_dir(self) -> Path:
        return self.data_dir / "pki"

    @property
    def _state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def _loaded_state(self) -> _State:
        if self._state is None:
            self._state = _State.load(self._state_path)
        if self._state is None:
            raise TestEnvError(f"no test environment state in {self.data_dir} (not started?)")
        return self._state

    @property
    def server(self) -> str:
        """``https://127.0.0.1:PORT``."""
        return self._loaded_state().server

    @property
    def etcd_url(self) -> str:
        """``http://127.0.0.1:PORT``: etcd's client URL (its v3 JSON gateway too)."""
        return f"http://{_LOOPBACK}:{self._loaded_state().etcd_client_port}"

    @property
    def token(self) -> str:
        line = (self.pki_dir / "tokens.csv").read_text().splitlines()[0]
        return line.split(",", 1)[0]

    @property
    def ca_pem(self) -> bytes:
        return (self.pki_dir / "ca.crt").read_bytes()

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """The admin kubeconfig: server, CA and token all inline, no file references."""
        name = "modelplane-testenv"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": name,
                    "context": {"cluster": name, "user": ADMIN_USER, "namespace": "default"},
                }
            ],
            "current-context": name,
            "preferences": {},
        }

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def http_client(self, timeout: float = 10.0) -> httpx2.Client:
        """An httpx2 client for the API server, authenticated as the admin."""
        return httpx2.Client(
            base_url=self.server,
            verify=self.ssl_context(),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=timeout,
        )

    # ---- metrics ---------------------------------------------------------------

    def metrics_text(self) -> str:
        """The API server's ``/metrics`` (Prometheus text format)."""
        with self.http_client() as client:
            resp = client.get("/metrics")
            resp.raise_for_status()
            return resp.text

    def request_total(self, **labels: str) -> float:
        """Sum of ``apiserver_request_total`` over the series matching ``labels``.

        E.g. ``env.request_total(verb="LIST", resource="configmaps")``; labels
        include verb, resource, group, version, scope, code, component, dry_run.
        """
        total = 0.0
        for family in text_string_to_metric_families(self.metrics_text()):
            if family.name not in ("apiserver_request", "apiserver_request_total"):
                continue
            for sample in family.samples:
                if sample.name != "apiserver_request_total":
                    continue
                if all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request for a Lease, one JSON event per line."""
        return self.data_dir / "audit.log"

    def client_lease_requests(self, verbs: Collection[str]) -> float:
        """Requests for Leases with one of ``verbs`` that clients, not the server, made so far.

        The server renews its own identity Lease, and on a failed renewal
        reads it back; those requests are its own and are left out.
        """
        try:
            lines = self.audit_log.read_text().splitlines()
        except FileNotFoundError:
            return 0.0
        total = 0.0
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line, half written
            if (
                event.get("stage") == "ResponseComplete"
                and event.get("verb", "").upper() in {v.upper() for v in verbs}
                and (event.get("user") or {}).get("username") != "system:apiserver"
            ):
                total += 1
        return total

    def write_requests(self) -> dict[tuple[str, str], float]:
        """Write requests served so far by (verb, resource), from one scrape.

        The API server's renewals of its own identity lease are left out: they
        are its writes, not a client's; so are dry runs and reviews,
        which store nothing.
        One scrape, so the figures agree with each other.
        """
        out: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                labels = sample.labels
                if (
                    sample.name == "apiserver_request_total"
                    and labels.get("verb") in WRITE_VERBS
                    and labels.get("resource") != "leases"
                    # A dry run (drift asks one) stores nothing.
                    and not labels.get("dry_run")
                    # Nor does a review: the operator's /metrics asks one of the
                    # hub for each caller it has no answer cached for (30 s), so
                    # a test that polls the metrics makes them on a slow machine.
                    and labels.get("resource") not in REVIEWS
                ):
                    key = (labels["verb"], labels.get("resource", ""))
                    out[key] = out.get(key, 0.0) + sample.value
        return out

    # ---- lifecycle -------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        """The recorded pids of processes that are still running."""
        state = _State.load(self._state_path)
        if state is None:
            return {}
        out: dict[str, int] = {}
        marker = f"{self.data_dir}/"
        if state.etcd_pid and _alive(state.etcd_pid, marker):
            out["etcd"] = state.etcd_pid
        if state.apiserver_pid and _alive(state.apiserver_pid, marker):
            out["kube-apiserver"] = state.apiserver_pid
        return out

    def is_running(self) -> bool:
        return len(self.pids()) == 2

    def start(self, timeout: float = 90.0) -> TestEnv:
        """Start etcd and kube-apiserver (if not already running) and wait until ready."""
        t0 = time.monotonic()
        binaries = (
            find_binaries()
            if self._bin_dir is None
            else {name: self._bin_dir / name for name in BINARIES}
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.is_running():
            self._state = _State.load(self._state_path)
            self._wait_ready(timeout)
            self._write_kubeconfig()
            self.start_seconds = time.monotonic() - t0
            return self
        self.stop()  # half-running leftovers from an earlier start

        if not all((self.pki_dir / f).exists() for f in _PKI_FILES):
            _generate_pki(self.pki_dir)

        previous = _State.load(self._state_path)
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_servers(binaries, previous, timeout - (time.monotonic() - t0))
                break
            except TestEnvError as err:
                self.stop()
                # A port is picked free, then bound by the server a moment
                # later: another process can take it between. New ports.
                if _PORT_TAKEN not in str(err) or attempt == _START_ATTEMPTS:
                    raise
                previous = None
            except BaseException:
                self.stop()
                raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_servers(
        self, binaries: Mapping[str, Path], previous: _State | None, timeout: float
    ) -> None:
        """etcd then kube-apiserver on free ports (``previous``'s where free), until ready."""
        etcd_client = _free_port(previous.etcd_client_port if previous else None)
        etcd_peer = _free_port(previous.etcd_peer_port if previous else None)
        while etcd_peer == etcd_client:
            etcd_peer = _free_port()
        api_port = _free_port(previous.apiserver_port if previous else None)
        while api_port in (etcd_client, etcd_peer):
            api_port = _free_port()

        state = _State(
            server=f"https://{_LOOPBACK}:{api_port}",
            etcd_client_port=etcd_client,
            etcd_peer_port=etcd_peer,
            apiserver_port=api_port,
            etcd_pid=None,
            apiserver_pid=None,
        )
        self._state = state
        t0 = time.monotonic()
        etcd = self._spawn("etcd", self._etcd_args(binaries["etcd"], state))
        state.etcd_pid = etcd.pid
        state.save(self._state_path)
        self._wait_etcd(state, etcd, timeout)

        kas = self._spawn("kube-apiserver", self._apiserver_args(binaries, state))
        state.apiserver_pid = kas.pid
        state.save(self._state_path)
        self._write_kubeconfig()
        self._wait_ready(timeout - (time.monotonic() - t0))

    def compact_etcd(self) -> int:
        """Compact etcd past every resourceVersion a watch now holds; returns the revision.

        A watch from version V asks for the revisions after V, so compacting at
        V + 1 leaves it be: two writes first (to a key outside the API server's
        /registry) put the compaction beyond the newest version anyone saw.
        """
        key = base64.b64encode(b"/modelplane-testenv/compaction").decode()
        with httpx2.Client(base_url=self.etcd_url, trust_env=False, timeout=30.0) as http:
            for n in range(2):
                value = base64.b64encode(str(n).encode()).decode()
                http.post("/v3/kv/put", json={"key": key, "value": value}).raise_for_status()
            answer = http.post("/v3/kv/range", json={"key": key})
            answer.raise_for_status()
            revision = int(answer.json()["header"]["revision"])
            http.post(
                "/v3/kv/compaction", json={"revision": str(revision), "physical": True}
            ).raise_for_status()
        return revision

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM kube-apiserver then etcd; SIGKILL after ``timeout``.  Keeps all files."""
        state = _State.load(self._state_path)
        marker = f"{self.data_dir}/"
        if state is not None:
            if state.apiserver_pid:
                _terminate([state.apiserver_pid], marker, timeout)
            if state.etcd_pid:
                _terminate([state.etcd_pid], marker, timeout)
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()

    def __enter__(self) -> TestEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals -------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        proc = start_logged(self.data_dir, name, args)
        self._procs[name] = proc
        return proc

    def _etcd_args(self, etcd: Path, s: _State) -> list[str]:
        client = f"http://{_LOOPBACK}:{s.etcd_client_port}"
        peer = f"http://{_LOOPBACK}:{s.etcd_peer_port}"
        return [
            str(etcd),
            "--name=testenv",
            f"--data-dir={self.data_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testenv={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _audit_policy(self) -> Path:
        path = self.data_dir / "audit-policy.yaml"
        path.write_text(_AUDIT_POLICY)
        return path

    def _apiserver_args(self, binaries: Mapping[str, Path], s: _State) -> list[str]:
        pki = self.pki_dir
        return [
            str(binaries["kube-apiserver"]),
            f"--etcd-servers=http://{_LOOPBACK}:{s.etcd_client_port}",
            f"--bind-address={_LOOPBACK}",
            f"--advertise-address={_LOOPBACK}",
            f"--secure-port={s.apiserver_port}",
            f"--cert-dir={self.data_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No controller-manager runs, so nothing would create the default
            # ServiceAccount that this admission plugin insists pods reference.
            "--disable-admission-plugins=ServiceAccount",
            # resource.k8s.io/v1 (DRA) is GA and served by default since 1.34; the
            # integration tests assert it, so a version bump that drops it shows up.
            # The "kubernetes" Service's endpoints may not be loopback addresses:
            # without this the reconciler logs an error every few seconds.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=0",
            # Who read a Lease is not in the metrics, and the server reads its
            # own identity Lease when a renewal fails under load: the audit log
            # tells a client's reads of the claim from the server's own.
            f"--audit-policy-file={self._audit_policy()}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
            *self.extra_apiserver_args,
        ]

    def _wait_etcd(self, s: _State, proc: subprocess.Popen[bytes], timeout: float) -> None:
        url = f"http://{_LOOPBACK}:{s.etcd_client_port}/health"
        log = self.data_dir / "etcd.log"

        def healthy() -> bool:
            if proc.poll() is not None:
                raise TestEnvError(f"etcd exited with {proc.returncode}:\n{_log_tail(log)}")
            return httpx2.get(url, timeout=2).status_code == 200

        self._wait("etcd healthy", healthy, timeout, log, interval=0.05)

    def _wait_ready(self, timeout: float) -> None:
        kas = self._procs.get("kube-apiserver")
        log = self.data_dir / "kube-apiserver.log"
        with self.http_client(timeout=5) as client:

            def ready() -> bool:
                if kas is not None and kas.poll() is not None:
                    raise TestEnvError(
                        f"kube-apiserver exited with {kas.returncode}:\n{_log_tail(log)}"
                    )
                readyz = client.get("/readyz")
                if readyz.status_code != 200:
                    return False
                # The server's own bootstrap writes (the default namespace,
                # then the kubernetes Service and its IPAddress) are done once
                # the Service exists: tests that count writes must not count those.
                svc = client.get("/api/v1/namespaces/default/services/kubernetes")
                return svc.status_code == 200

            self._wait(f"kube-apiserver at {self.server} ready", ready, max(timeout, 1.0), log)

    @staticmethod
    def _wait(
        what: str, check: Callable[[], bool], timeout: float, log: Path, interval: float = 0.1
    ) -> None:
        """``wait_for`` as a start fails: a ``TestEnvError`` with the log's tail."""
        try:
            wait_for(
                what,
                check,
                deadline=timeout,
                interval=interval,
                detail=lambda: _log_tail(log),
                not_yet=(httpx2.HTTPError,),
            )
        except WaitTimeout as err:
            raise TestEnvError(str(err)) from None

    def _write_kubeconfig(self) -> None:
        _write(self.kubeconfig_path, yaml.safe_dump(self.kubeconfig, sort_keys=False).encode())


def helm_environ(
    home: str | os.PathLike[str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for running helm with its config/cache/data under ``home`` (nothing in ~)."""
    root = Path(home)
    env = dict(os.environ if base is None else base)
    env.update(
        HELM_CONFIG_HOME=str(root / "config"),
        HELM_CACHE_HOME=str(root / "cache"),
        HELM_DATA_HOME=str(root / "data"),
    )
    env.pop("KUBECONFIG", None)
    return env
