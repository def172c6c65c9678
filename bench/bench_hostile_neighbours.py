"""Benchmark: a healthy stack beside hostile targets on the same shard (issue 40, findings 2 to 7).

One operator process (one shard) against a real hub, twice: ``baseline``,
one healthy Provided stack whose target is a real kube-apiserver with the
substrate's CRDs; ``hostile``, the same with, on the same shard, a stack
for each kind of bench/hostile_targets.py (``--copies`` of each, and
``--tarpits`` tarpits), each on a hostile server on loopback:

- (2) ``release-bomb``: a Managed stack whose release namespaces hold Helm
  Secrets that decode to 23 MiB of ``{},`` (60 MiB is refused by the
  inflate bound before any parse);
- (3) ``big-body``, ``gzip-body``: the claim Lease GET answered with 200 MiB,
  plain or gzip-coded;
- (4) ``big-page``: every LIST a 44 MiB page of ``[],``, inside the wire budget;
- (5) ``trickle`` (one byte a second), ``h2-one-stream`` and ``h2-no-limit``
  (HTTP/2 with MAX_CONCURRENT_STREAMS 1, or none, never answering);
- (6) ``empty-data``, ``empty-settings``: endless HTTP/2 frames that carry nothing;
- (7) ``tarpit``: TLS handshakes that never finish.

The hostile stacks are created first and given ``--warmup`` seconds to be
at their worst; then the healthy stack is created. Printed side by side for
the two runs: the healthy stack's time from create to Ready=True; its
follow latency, from a change on its target (the Gateway's address, written
to its status as Envoy Gateway would) to ``status.gateway.address`` on the
hub, median and max over ``--changes`` changes; the operator's peak RSS
(VmHWM) and CPU seconds; and, for the hostile run, each hostile stack's
Ready reason. The goal is hostile ≈ baseline. Each run starts its own hub
and target (testbin binaries, as the other benches), at ``--resync 300``.

    python bench/bench_hostile_neighbours.py [--changes 10] [--copies 1] [--tarpits 8]
        [--kinds all|release-bomb,big-body,...] [--warmup 20] [--keep DIR]

Measured (2 cores shared with other work, load average about 3; one run of
the defaults: 9 hostile kinds and 8 tarpits, 17 hostile stacks):

                                baseline         hostile
    create to Ready               0.54 s          0.47 s
    follow, median                 57 ms           62 ms
    follow, max                    82 ms           88 ms
    operator peak RSS             105 MiB         218 MiB
    operator CPU                   1.5 s           8.6 s
    hostile servers' CPU           0.0 s           3.2 s

Every hostile stack ended refused, none stalled the shard: the bombs as
"would build about 2476 MiB in memory, over the limit of 96 MiB", the
claim GETs as over the answer bound or coded, the page as
TargetCollectionTooLarge, the trickle and the HTTP/2 servers as
TargetUnreachable (deadline, ReadTimeout, RemoteProtocolError), the tarpits
as ConnectTimeout. The peak RSS is the bounds at work (the cut-off 32 MiB
answers, the metered pages), not a leak.

With ``--read-slots 4`` (fewer --max-concurrent-target-reads slots than
slow hostile stacks, as 50 such stacks would be at the default of 50) the
slot was taken from one pool, and each retry of an unreachable target held
one for its connect or read timeout, so a new healthy stack queued behind
them. Since "Read unreachable targets from a pool of their own", a target
last found unreachable reads from a pool a tenth the size. The same
command, ``--read-slots 4 --changes 5 --warmup 60``, before (d69afb8) and
after, run back to back:

                                before           after       (baseline)
    create to Ready              13.53 s          0.94 s          2.51 s
    follow, median                 56 ms           91 ms           55 ms
    follow, max                    90 ms          103 ms           60 ms

With ``--warmup 20`` the healthy stack still waits (18.6 s) behind the
hostile stacks' *first* reconciles: a stack never seen before, or whose
hub status shows no failure, has no history that sets it apart, and its
first connect holds a shared slot until it times out (5 s for a tarpit).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Secret

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
# The operator process imports this tree's modelplane, whatever is installed.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
)

from bench.bench_fleet_healthy import move_gateway_address  # noqa: E402
from bench.hostile_targets import FINDING, KINDS  # noqa: E402
from tests.integration.substrate import Substrate, provide_substrate, run_operator  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.env import _free_port  # noqa: E402

from modelplane.api.crd import servingstack_crd  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL  # noqa: E402
from modelplane.catalog.configuration import GATEWAY_NAME  # noqa: E402
from modelplane.catalog.configuration import NS as TARGET_NS  # noqa: E402
from modelplane.kube.discovery import AGGREGATED_ACCEPT  # noqa: E402

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
NS = "bench"
HEALTHY = "healthy"
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    label: str
    to_ready: float = 0.0
    follow: list[float] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    cpu_seconds: float = 0.0
    hostile_cpu: float = 0.0
    hostile_stacks: dict[str, str] = field(default_factory=dict)


def _until(what: str, check: Callable[[], bool], timeout: float, every: float = 0.02) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def _proc_status(pid: int, key: str) -> float:
    """A ``/proc/<pid>/status`` figure in MiB (VmHWM, VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _ready(hub: Client, name: str) -> dict[str, Any]:
    status = hub.get(SS, name, namespace=NS).to_dict().get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def _address(hub: Client) -> Any:
    status = hub.get(SS, HEALTHY, namespace=NS).to_dict().get("status") or {}
    return (status.get("gateway") or {}).get("address")


def _secret(name: str, kubeconfig: dict[str, Any]) -> Secret:
    data = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    return Secret.from_dict(
        {"metadata": {"name": name, "namespace": NS}, "data": {"kubeconfig": data}}
    )


def _stack(name: str, mode: str) -> Any:
    return SS.from_dict(
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "components": mode,
                "secrets": [{"type": "Kubeconfig", "name": name, "key": "kubeconfig"}],
            },
        }
    )


def _record_discovery(target_env: TestEnv, path: Path) -> None:
    """What the real target answers to aggregated discovery, for the scripted servers."""
    found = {}
    with target_env.http_client() as http:
        for where in ("/api", "/apis"):
            answer = http.get(where, headers={"Accept": AGGREGATED_ACCEPT})
            answer.raise_for_status()
            found[where] = {"type": answer.headers["content-type"], "body": answer.text}
    path.write_text(json.dumps(found))


def _start_hostile(tmp: Path, kinds: list[str], copies: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "hostile_targets.py"),
            str(tmp),
            *("--kinds", ",".join(kinds), "--copies", str(copies)),
        ],
        stdout=(tmp / "hostile.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    _until("hostile servers up", lambda: (tmp / "targets.json").exists(), 120, 0.2)
    return proc


def _follow(hub: Client, target: Client, changes: int, gap: float) -> list[float]:
    _until("the Gateway on the target", lambda: _has_gateway(target), 120, 0.2)
    out = []
    for n in range(changes):
        t0 = time.monotonic()
        ip = move_gateway_address(target, n)
        _until("the address on the hub", lambda ip=ip: _address(hub) == ip, 120)
        out.append(time.monotonic() - t0)
        time.sleep(gap)
    return out


def _has_gateway(target: Client) -> bool:
    try:
        target.get(GATEWAY, GATEWAY_NAME, namespace=TARGET_NS)
    except Exception:  # not there yet (404), or its CRD not yet served
        return False
    return True


def run(label: str, kinds: list[str], args: argparse.Namespace, tmp: Path) -> Run:
    tmp.mkdir(parents=True, exist_ok=True)
    out = Run(label)
    hub_env, target_env = TestEnv(tmp / "hub"), TestEnv(tmp / "target")
    procs: list[subprocess.Popen[bytes]] = []
    hostile: subprocess.Popen[bytes] | None = None
    operator: subprocess.Popen[bytes] | None = None
    try:
        hub_env.start()
        target_env.start()
        hub = Client(KubeConfig.from_dict(hub_env.kubeconfig), field_manager="bench")
        target = Client(KubeConfig.from_dict(target_env.kubeconfig), field_manager="bench")
        hub.apply(CustomResourceDefinition.from_dict(servingstack_crd()))
        hub.apply(Namespace.from_dict({"metadata": {"name": NS}}))
        provide_substrate(target)
        targets: list[dict[str, Any]] = []
        if kinds:
            _record_discovery(target_env, tmp / "discovery.json")
            hostile = _start_hostile(tmp, kinds, args.copies)
            procs.append(hostile)
            targets = json.loads((tmp / "targets.json").read_text())
        hub.create(_secret(HEALTHY, target_env.kubeconfig))
        names = []
        for i, t in enumerate(targets):
            name = f"{t['kind']}-{i}"
            names.append(name)
            hub.create(_secret(name, t["kubeconfig"]))
        _until(
            "ServingStacks served",
            lambda: (
                hub_env.http_client().get(f"/apis/{API_GROUP}/{API_VERSION}").status_code == 200
            ),
            60,
            0.5,
        )
        # No chart is ever fetched: the healthy stack is Provided, and the
        # Managed bomb stack never gets as far as an install.
        nowhere = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", tmp)
        operator = run_operator(
            hub_env.kubeconfig_path,
            nowhere,
            NS,
            tmp / "op.log",
            "--resync",
            "300",
            "--metrics-port",
            str(_free_port()),
            "--metrics-address",
            "127.0.0.1",
            *(["--max-concurrent-target-reads", str(args.read_slots)] if args.read_slots else []),
        )
        procs.append(operator)
        _until(
            "operator up",
            lambda: "authentication has finished" in (tmp / "op.log").read_text(),
            120,
            0.2,
        )
        for name, t in zip(names, targets, strict=True):
            mode = "Managed" if t["kind"] == "release-bomb" else "Provided"
            hub.create(_stack(name, mode))
        if names:
            time.sleep(args.warmup)
        hostile_cpu0 = _cpu_seconds(hostile.pid) if hostile else 0.0
        t0 = time.monotonic()
        hub.create(_stack(HEALTHY, "Provided"))
        _until(
            "the healthy stack Ready",
            lambda: _ready(hub, HEALTHY).get("status") == "True",
            args.ready_timeout,
        )
        out.to_ready = time.monotonic() - t0
        out.follow = _follow(hub, target, args.changes, args.gap)
        out.peak_rss_mib = _proc_status(operator.pid, "VmHWM")
        out.cpu_seconds = _cpu_seconds(operator.pid)
        if hostile is not None:
            out.hostile_cpu = _cpu_seconds(hostile.pid) - hostile_cpu0
        for name in names:
            ready = _ready(hub, name)
            out.hostile_stacks[name] = (
                f"{ready.get('status', '-')} {ready.get('reason', '')}: "
                f"{str(ready.get('message', ''))[:110]}"
            )
        if operator.poll() is not None:
            out.hostile_stacks["operator"] = f"exited {operator.returncode}"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        hub_env.stop()
        target_env.stop()
    return out


def _ms(samples: list[float], pick: Callable[[list[float]], float]) -> str:
    return f"{pick(samples) * 1000:.0f} ms" if samples else "-"


def table(runs: list[Run]) -> None:
    rows = [
        ("create to Ready", [f"{r.to_ready:.2f} s" for r in runs]),
        ("follow, median", [_ms(r.follow, statistics.median) for r in runs]),
        ("follow, max", [_ms(r.follow, max) for r in runs]),
        ("operator peak RSS", [f"{r.peak_rss_mib:.0f} MiB" for r in runs]),
        ("operator CPU", [f"{r.cpu_seconds:.1f} s" for r in runs]),
        ("hostile servers' CPU", [f"{r.hostile_cpu:.1f} s" for r in runs]),
    ]
    print(f"{'':24}" + "".join(f"{r.label:>16}" for r in runs))
    for name, cells in rows:
        print(f"{name:24}" + "".join(f"{c:>16}" for c in cells))
    for r in runs:
        for name, said in r.hostile_stacks.items():
            kind = name.rsplit("-", 1)[0]
            print(f"  {r.label} {name} (finding {FINDING.get(kind, '?')}): Ready {said}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=20, help="target changes to follow")
    parser.add_argument(
        "--gap", type=float, default=2.0, help="seconds between changes: the hostile stacks retry"
    )
    parser.add_argument("--copies", type=int, default=1, help="stacks of each hostile kind")
    parser.add_argument("--tarpits", type=int, default=8, help="TLS tarpit stacks")
    parser.add_argument("--kinds", default="all", help=f"of {','.join(KINDS)}")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before the healthy")
    parser.add_argument(
        "--read-slots", type=int, help="--max-concurrent-target-reads (the operator's default: 50)"
    )
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    parser.add_argument("--only", choices=("baseline", "hostile"), help="one of the two runs")
    args = parser.parse_args()
    kinds = [k for k in KINDS if k != "tarpit"] if args.kinds == "all" else args.kinds.split(",")
    kinds = [k for k in kinds if k != "tarpit"]
    hostile_kinds = kinds + ["tarpit"] * (args.tarpits // max(args.copies, 1))
    with tempfile.TemporaryDirectory(prefix="mp-hostile-neighbours-") as tmp_s:
        tmp = args.keep or Path(tmp_s)
        runs = []
        if args.only in (None, "baseline"):
            runs.append(run("baseline", [], args, tmp / "baseline"))
        if args.only in (None, "hostile"):
            runs.append(run("hostile", hostile_kinds, args, tmp / "hostile"))
        table(runs)


if __name__ == "__main__":
    main()
