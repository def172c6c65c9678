"""The simulated fleet: one process that answers for many targets (bench/fleet_server).

``FleetServer`` builds the server if its binary is not in the cache
(hack/build-fleet-server.sh; setup builds it), writes its seed, starts it for
N targets and gives each target's kubeconfig: ``https://127.0.0.1:PORT/t/<i>``
with the server's own CA. The seed is what a real, healthy Provided Standard
target serves: a real kube-apiserver from the testbin is started, given what
a cluster owner brings in Provided mode (the Standard stack's CRDs and the
GPU DeviceClass) and GPU nodes built from the H200 profile, each Ready with
its ResourceSlice as kwok and the DRA driver leave them; its discovery
documents (aggregated and legacy) and every object of every listable
resource are dumped. Events are left out: the API server's own noise.

With ``crds`` (``real_crds()``: the upstream CRDs of ``../shared/fixtures``)
the seed server is given the real CRDs a Standard target carries, schemas
and all, instead of the project's small stand-ins: what a real target's CRD
watch lists, and what the operator's memory per target is measured with.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from tests.shared_fixtures import PROVIDED_STANDARD, upstream_dir
from tests.testenv.env import TestEnv
from tests.testenv.kube import apply_crds
from tests.testenv.nodes import h200, node, resource_slice

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "build-fleet-server.sh"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
RESOURCE_SLICE = create_global_resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
# Written by the API server itself, changing on their own: not a target's state.
LEFT_OUT = {"/v1/events", "events.k8s.io/v1/events"}
TOKEN = "fleet-token"


def fleet_binary() -> Path:
    """The server's binary, built now if the cache does not hold this source's."""
    out = subprocess.run(["bash", str(BUILD)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def real_crds() -> tuple[list[Path], str]:
    """The upstream CRD folders of a Standard target, or none and why not."""
    root = upstream_dir()
    if not root.is_dir():
        return [], f"no upstream fixtures at {root}: the targets carry the fixture CRDs"
    return [root / f for f in PROVIDED_STANDARD], f"the targets carry the upstream CRDs of {root}"


def add_crds_option(parser: argparse.ArgumentParser) -> None:
    """A bench's ``--crds`` option, read by ``crds_for``."""
    parser.add_argument(
        "--crds",
        choices=("real", "fixture"),
        default="real",
        help="the targets' CRDs: the upstream ones (when ../shared is there) or the fixtures",
    )


def crds_for(choice: str) -> list[Path]:
    """A bench's ``--crds`` choice: ``real`` (when the fixtures are there) or ``fixture``."""
    if choice == "fixture":
        return []
    folders, why = real_crds()
    print(why, flush=True)
    return folders


def healthy_target(client: Client, gpu_nodes: int = 2, *, substrate: bool = True) -> None:
    """What a healthy Provided Standard target holds: CRDs, DeviceClass, Ready GPU nodes.

    ``substrate=False``: the CRDs and DeviceClass are there already (the real ones).
    """
    from tests.integration.substrate import provide_substrate

    if substrate:
        provide_substrate(client)
    gpu = h200()
    for i in range(gpu_nodes):
        name = f"gpu-{i}"
        client.create(Node.from_dict(node(name, gpu=gpu)))
        client.patch(
            Node.Status,
            name,
            {
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "allocatable": {"cpu": "128", "memory": "2Ti", "pods": "110"},
                    "capacity": {"cpu": "128", "memory": "2Ti", "pods": "110"},
                }
            },
            patch_type=PatchType.MERGE,
        )
        client.create(RESOURCE_SLICE.from_dict(resource_slice(name, gpu)))


def dump(env: TestEnv) -> dict[str, Any]:
    """Discovery documents and every listed object of the server at ``env``, as a seed."""
    out: dict[str, Any] = {"discovery": [], "objects": []}
    with env.http_client() as http:

        def doc(path: str, aggregated: bool) -> Any:
            answer = http.get(
                path, headers={"Accept": AGGREGATED if aggregated else "application/json"}
            )
            answer.raise_for_status()
            body = answer.json()
            out["discovery"].append(
                {
                    "path": path,
                    "aggregated": aggregated,
                    "contentType": answer.headers["content-type"],
                    "body": body,
                }
            )
            return body

        doc("/api", True)
        doc("/apis", True)
        paths = [f"/api/{v}" for v in doc("/api", False)["versions"]]
        for group in doc("/apis", False)["groups"]:
            paths += [f"/apis/{v['groupVersion']}" for v in group["versions"]]
        for path in paths:
            listing = doc(path, False)
            group_version = listing["groupVersion"]
            group, _, version = group_version.rpartition("/")
            for res in listing["resources"]:
                key = f"{group}/{version}/{res['name']}"
                if "/" in res["name"] or "list" not in res["verbs"] or key in LEFT_OUT:
                    continue
                for item in http.get(f"{path}/{res['name']}").json().get("items") or []:
                    item.setdefault("apiVersion", group_version)
                    item.setdefault("kind", res["kind"])
                    out["objects"].append({"resource": key, "object": item})
    return out


def wait_for_discovery(env: TestEnv, deadline: float = 60.0) -> None:
    """Until the aggregated discovery serves every version of every CRD the server holds.

    The aggregated document lags a new CRD by a moment after the legacy one
    lists it; a seed dumped in that moment serves targets whose discovery
    misses the last CRDs applied, and the benchmark's stacks never get Ready.
    """
    with env.http_client() as http:
        crds = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json()
        wanted = {
            (c["spec"]["group"], v["name"])
            for c in crds.get("items") or []
            for v in c["spec"]["versions"]
            if v.get("served")
        }
        end = time.monotonic() + deadline
        while True:
            body = http.get("/apis", headers={"Accept": AGGREGATED}).json()
            served = {
                (g["metadata"]["name"], v["version"])
                for g in body.get("items") or []
                for v in g.get("versions") or []
            }
            missing = wanted - served
            if not missing:
                return
            if time.monotonic() > end:
                raise RuntimeError(f"aggregated discovery never served {sorted(missing)}")
            time.sleep(0.1)


def write_seed(path: Path, work: Path, crds: Sequence[Path] = ()) -> Path:
    """A seed from a real API server started under ``work``, written to ``path``.

    ``crds``: folders of the CRDs (and DeviceClasses) the target carries
    instead of the fixture ones.
    """
    # Its DeviceClass resource first: the one ``apply_crds`` would make
    # from the file is of another signature, which lightkube then refuses.
    import tests.integration.substrate  # noqa: F401

    env = TestEnv(work / "seed-target")
    env.start()
    try:
        if crds:
            apply_crds(env, crds)
        client = Client(KubeConfig.from_dict(env.kubeconfig), field_manager="seed")
        healthy_target(client, substrate=not crds)
        wait_for_discovery(env)
        path.write_text(json.dumps(dump(env)))
    finally:
        env.stop()
    return path


class FleetServer:
    """The fleet server for ``targets`` targets, run from ``directory``.

    ``crds``: the CRD folders a seed written here gives every target (``real_crds()``).
    """

    def __init__(
        self,
        directory: Path,
        targets: int,
        *,
        seed: Path | None = None,
        crds: Sequence[Path] = (),
    ) -> None:
        self.directory = directory
        self.targets = targets
        self.seed = seed
        self.crds = list(crds)
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self, *extra: str) -> FleetServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        binary = fleet_binary()
        if self.seed is None:
            self.seed = write_seed(self.directory / "seed.json", self.directory, self.crds)
        (self.directory / "address").unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                str(binary),
                "-seed",
                str(self.seed),
                "-targets",
                str(self.targets),
                "-dir",
                str(self.directory),
                *extra,
            ],
            stdout=(self.directory / "fleet.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not (self.directory / "address").is_file() or not self.address_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the fleet server did not start: "
                    + (self.directory / "fleet.log").read_text()[-2000:]
                )
            time.sleep(0.05)
        self.address = self.address_text()
        return self

    def address_text(self) -> str:
        return (self.directory / "address").read_text().strip()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    @property
    def ca_pem(self) -> bytes:
        return (self.directory / "ca.crt").read_bytes()

    def server(self, i: int) -> str:
        return f"https://{self.address}/t/{i}"

    def kubeconfig(self, i: int) -> dict[str, Any]:
        """Target ``i``'s kubeconfig: its own path on the server, the server's CA, a token."""
        name = f"fleet-{i}"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": self.server(i),
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
            "current-context": name,
        }

    def client(self, i: int) -> Client:
        return Client(KubeConfig.from_dict(self.kubeconfig(i)), field_manager="fleet")

    def http(self, timeout: float = 10.0) -> httpx2.Client:
        import ssl

        return httpx2.Client(
            base_url=f"https://{self.address}",
            verify=ssl.create_default_context(cadata=self.ca_pem.decode()),
            timeout=timeout,
        )

    def stats(self, detail: bool = False) -> dict[str, Any]:
        with self.http() as http:
            params = {"detail": "1"} if detail else {}
            return dict(http.get("/control/stats", params=params).json())

    def compact(self, i: int) -> str:
        """Drop target ``i``'s event log; returns its resourceVersion now."""
        with self.http() as http:
            return str(
                http.post("/control/compact", params={"target": str(i)}).json()["resourceVersion"]
            )

    def __enter__(self) -> FleetServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
