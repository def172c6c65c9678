"""Benchmark: one operator, one hub, a fleet of ServingStacks that mostly fail.

Real kube-apiservers on loopback (a hub and --real fresh targets) and the
real operator process. The failing stacks are split three ways: a
kubeconfig Secret that does not exist, a target on a closed loopback port
(refused at once), and a target on a loopback listener that never answers
(each try runs into the operator's target timeout). Nothing is sent to any
address but 127.0.0.1.

Phases:
1. the operator with no stack: RSS;
2. --real stacks on an idle operator: time from create to Ready, each;
   then those stacks are let go (skip-teardown) and their targets stopped;
3. --stacks - --real failing stacks, RSS once the first 100 have a status
   and once all have;
4. --real stacks on fresh targets while the rest keep failing: time to
   Ready, next to phase 2's;
5. a settled window of --window seconds: CPU seconds, hub writes (from the
   hub's apiserver_request_total, the operator's own Lease left out) and
   hub reads, TCP connections and watches open on each real target.

    python bench/bench_fleet.py [--stacks 1000] [--real 4] [--window 60]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Secret
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.substrate import Helm, run_operator, serve_substrate  # noqa: E402
from tests.testenv import TestEnv, find_binaries  # noqa: E402

from modelplane.api.crd import servingstack_crd  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL  # noqa: E402

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
NS = "fleet"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _until(what: str, check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.25)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def _rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _established_to(port: int) -> int:
    """ESTABLISHED TCP connections on this machine whose far end is ``port`` on loopback."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def _watches(env: TestEnv) -> float:
    total = 0.0
    for family in text_string_to_metric_families(env.metrics_text()):
        for sample in family.samples:
            if sample.name == "apiserver_longrunning_requests" and sample.labels.get("verb") in (
                "WATCH",
                "watch",
            ):
                total += sample.value
    return total


def _hub_writes(env: TestEnv) -> float:
    return sum(env.write_requests().values())


def _hub_reads(env: TestEnv) -> float:
    return sum(env.request_total(verb=v) for v in ("GET", "LIST"))


def _secret(name: str, kubeconfig: dict[str, Any]) -> Secret:
    text = yaml.safe_dump(kubeconfig).encode()
    return Secret.from_dict(
        {
            "metadata": {"name": name, "namespace": NS},
            "data": {"kubeconfig": base64.b64encode(text).decode()},
        }
    )


def _with_server(kubeconfig: dict[str, Any], server: str) -> dict[str, Any]:
    out = dict(kubeconfig)
    out["clusters"] = [
        {**c, "cluster": {**c["cluster"], "server": server}} for c in kubeconfig["clusters"]
    ]
    return out


def _stack(name: str, secret: str, annotations: dict[str, str] | None = None) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        metadata["annotations"] = annotations
    return SS.from_dict(
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": metadata,
            "spec": {"secrets": [{"type": "Kubeconfig", "name": secret, "key": "kubeconfig"}]},
        }
    )


def _conditions(obj: Any) -> dict[str, dict[str, Any]]:
    status = obj.to_dict().get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


@contextlib.contextmanager
def _silent_listener() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)
        yield int(sock.getsockname()[1])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready_times(hub: Client, names: list[str], timeout: float) -> dict[str, float]:
    start = time.monotonic()
    out: dict[str, float] = {}
    while len(out) < len(names):
        for name in names:
            if name not in out:
                c = _conditions(hub.get(SS, name, namespace=NS)).get("Ready", {})
                if c.get("status") == "True":
                    out[name] = time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not Ready within {timeout:.0f} s: {set(names) - set(out)}")
        time.sleep(0.25)
    return out


def _start_targets(tmp: Path, tag: str, n: int) -> list[TestEnv]:
    envs = [TestEnv(tmp / f"target-{tag}-{i}") for i in range(n)]
    for env in envs:
        env.start()
    return envs


def _create_real(hub: Client, targets: list[TestEnv], tag: str) -> list[str]:
    names = []
    for i, env in enumerate(targets):
        hub.apply(_secret(f"real-{tag}-{i}", env.kubeconfig), field_manager="bench", force=True)
        names.append(f"real-{tag}-{i}")
    for name in names:
        hub.create(_stack(name, name))
    return names


def _let_go(hub: Client, names: list[str]) -> None:
    for name in names:
        hub.patch(
            SS,
            name,
            {"metadata": {"annotations": {"modelplane.ai/skip-teardown": "true"}}},
            namespace=NS,
            patch_type=PatchType.MERGE,
        )
        hub.delete(SS, name, namespace=NS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stacks", type=int, default=1000)
    parser.add_argument("--real", type=int, default=4)
    parser.add_argument("--window", type=float, default=60.0, help="settled window, seconds")
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds to wait after the last status"
    )
    args = parser.parse_args()
    failing = args.stacks - args.real

    with tempfile.TemporaryDirectory(prefix="mp-fleet-") as tmp_s, _silent_listener() as silent:
        tmp = Path(tmp_s)
        hub_env = TestEnv(tmp / "hub")
        hub_env.start()
        substrate_gen = serve_substrate(
            Helm(find_binaries()["helm"], tmp / "helm"), tmp / "substrate"
        )
        substrate = next(substrate_gen)
        proc = None
        targets: list[TestEnv] = []
        try:
            hub = Client(KubeConfig.from_dict(hub_env.kubeconfig), field_manager="bench")
            hub.apply(CustomResourceDefinition.from_dict(servingstack_crd()))
            hub.apply(Namespace.from_dict({"metadata": {"name": NS}}))
            _until(
                "ServingStacks served",
                lambda: _served(hub_env),
                60,
            )
            closed = _closed_port()
            hub.apply(
                _secret("closed", _with_server(hub_env.kubeconfig, f"https://127.0.0.1:{closed}")),
                field_manager="bench",
            )
            hub.apply(
                _secret("silent", _with_server(hub_env.kubeconfig, f"https://127.0.0.1:{silent}")),
                field_manager="bench",
            )
            # The default resync, as a hub would run it.
            proc = run_operator(
                hub_env.kubeconfig_path, substrate, NS, tmp / "op.log", "--resync", "300"
            )
            _until(
                "the operator up",
                lambda: "authentication has finished" in (tmp / "op.log").read_text(),
                120,
            )
            time.sleep(5)
            print(f"RSS with 0 stacks: {_rss_mib(proc.pid):.0f} MiB")

            # 2. the real targets on an idle operator
            targets = _start_targets(tmp, "idle", args.real)
            idle = _ready_times(hub, _create_real(hub, targets, "idle"), 600)
            print(
                f"Ready on an idle operator ({args.real} stacks at once): "
                + ", ".join(f"{t:.1f}" for t in sorted(idle.values()))
                + " s"
            )
            _let_go(hub, list(idle))
            for env in targets:
                env.stop()
            targets = []

            # 3. the failing fleet
            kinds = ["missing", "closed", "silent"]
            names = [f"fail-{i:04d}" for i in range(failing)]
            t0 = time.monotonic()
            for i, name in enumerate(names):
                hub.create(_stack(name, kinds[i % 3]))
                if i + 1 == min(100, failing):
                    first = i + 1
                    _until(
                        "the first failing stacks with a status",
                        lambda first=first: _statused(hub) >= first,
                        300,
                    )
                    time.sleep(args.settle / 3)
                    print(f"RSS with {first} stacks: {_rss_mib(proc.pid):.0f} MiB")
            print(f"created {failing} failing stacks in {time.monotonic() - t0:.0f} s")
            _until("every failing stack with a status", lambda: _statused(hub) >= failing, 900)
            print(f"every failing stack had a status {time.monotonic() - t0:.0f} s after the first")

            # 4. the real targets while the rest fail
            targets = _start_targets(tmp, "loaded", args.real)
            baseline = {env.server: _watches(env) for env in targets}
            loaded = _ready_times(hub, _create_real(hub, targets, "loaded"), 900)
            print(
                f"Ready while {failing} fail ({args.real} stacks at once): "
                + ", ".join(f"{t:.1f}" for t in sorted(loaded.values()))
                + f" s (median {statistics.median(loaded.values()):.1f} s against "
                f"{statistics.median(idle.values()):.1f} s idle)"
            )
            time.sleep(args.settle)
            print(f"RSS with {args.stacks} stacks: {_rss_mib(proc.pid):.0f} MiB")

            # 5. the settled window
            cpu0, w0, r0 = _cpu_seconds(proc.pid), _hub_writes(hub_env), _hub_reads(hub_env)
            writes0 = hub_env.write_requests()
            time.sleep(args.window)
            cpu = _cpu_seconds(proc.pid) - cpu0
            writes = _hub_writes(hub_env) - w0
            reads = _hub_reads(hub_env) - r0
            per_minute = 60.0 / args.window
            print(
                f"settled, over {args.window:.0f} s: {cpu * per_minute:.1f} CPU s per minute; "
                f"hub writes {writes * per_minute:.0f}/min, reads {reads * per_minute:.0f}/min"
            )
            after = hub_env.write_requests()
            by_kind = {k: after[k] - writes0.get(k, 0.0) for k in after}
            print("  hub writes by verb and resource:", {k: v for k, v in by_kind.items() if v})
            for env in targets:
                port = int(env.server.rsplit(":", 1)[1])
                print(
                    f"target {env.server}: {_established_to(port)} TCP connections, "
                    f"{_watches(env) - baseline[env.server]:.0f} watches from the operator"
                )
            print(f"operator log: {len((tmp / 'op.log').read_text().splitlines())} lines")
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(60)
                except Exception:
                    proc.kill()
            next(substrate_gen, None)
            for env in targets:
                env.stop()
            hub_env.stop()


def _served(env: TestEnv) -> bool:
    with env.http_client() as http:
        try:
            return http.get(f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}").status_code == 200
        except httpx2.HTTPError:
            return False


def _statused(hub: Client) -> int:
    return sum(1 for s in hub.list(SS, namespace=NS) if _conditions(s).get("Ready"))


if __name__ == "__main__":
    main()
