"""A real image registry on loopback, for the mirror preflight's tests and bench.

Debian's ``docker-registry`` (the CNCF distribution registry) serves HTTPS
with a certificate of the test CA, and Basic auth from an htpasswd file
(``htpasswd -B``, from apache2-utils), as a private mirror does; images
are put in with ``skopeo copy`` from a one-layer OCI layout written here.
``hack/test-deps.sh`` installs all three; a missing one fails the test
that needs it, naming the package.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import socket
import ssl
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.testenv.env import _generate_pki
from tests.waiting import wait_for

USER = "mirror-user"
PASSWORD = "mirror-pass-3e1f"
# What each tool is, and the Debian package hack/test-deps.sh installs it from.
TOOLS = {"docker-registry": "docker-registry", "skopeo": "skopeo", "htpasswd": "apache2-utils"}
START_SECONDS = 30.0


def missing_tools() -> list[str]:
    return [f"{tool} (package {pkg})" for tool, pkg in TOOLS.items() if not shutil.which(tool)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def oci_layout(root: Path) -> Path:
    """A minimal image (a config and one empty layer) as an OCI layout; its root."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w"):
        pass
    layer = blob(gzip.compress(raw.getvalue(), mtime=0))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    config = blob(
        json.dumps(
            {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers",
             "diff_ids": [diff_id]}, "config": {}}
        ).encode()
    )  # fmt: skip
    manifest = blob(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}],
            }
        ).encode()
    )
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest}],
    }
    (root / "index.json").write_text(json.dumps(index))
    return root


@dataclass
class LoopbackRegistry:
    host: str  # 127.0.0.1:PORT
    ca: Path
    layout: Path

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def push(self, repository: str) -> None:
        """Copy the test image in as ``repository:tag`` (no registry host)."""
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
             f"--dest-creds={USER}:{PASSWORD}", f"oci:{self.layout}",
             f"docker://{self.host}/{repository}"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def docker_config(self) -> dict[str, object]:
        """The ``.dockerconfigjson`` a pull Secret for this registry holds."""
        return {"auths": {self.host: {"username": USER, "password": PASSWORD}}}


@contextmanager
def loopback_registry(work: Path) -> Iterator[LoopbackRegistry]:
    """A registry on a free loopback port, with TLS and htpasswd auth; stopped after."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"not on PATH: {', '.join(missing)}; hack/test-deps.sh installs them")
    _generate_pki(work / "pki")
    htpasswd = subprocess.run(
        ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True
    ).stdout
    (work / "htpasswd").write_text(htpasswd)
    port = _free_port()
    (work / "config.yml").write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(work / "store")}},
                "http": {
                    "addr": f"127.0.0.1:{port}",
                    "tls": {"certificate": str(work / "pki" / "apiserver.crt"),
                            "key": str(work / "pki" / "apiserver.key")},
                },
                "auth": {"htpasswd": {"realm": "mirror", "path": str(work / "htpasswd")}},
            }
        )
    )  # fmt: skip
    log = open(work / "registry.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(work / "config.yml")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(port, proc, work / "registry.log")
        layout = oci_layout(work / "img")
        yield LoopbackRegistry(f"127.0.0.1:{port}", work / "pki" / "ca.crt", layout)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_for(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the registry accepts connections; its log when it exits or never does."""

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_for(
        "docker-registry to listen",
        listening,
        deadline=START_SECONDS,
        detail=lambda: log.read_text()[-2000:],
    )
