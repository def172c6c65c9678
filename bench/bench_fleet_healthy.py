"""Benchmark: N healthy targets over S shards, each shard its own operator process.

The targets are the simulated fleet (tests/testenv/fleet.py, bench/fleet_server):
one process per shard answers for all of its targets, each at its own server URL, seeded with
what a real, healthy Provided Standard target serves. The hub is a real
kube-apiserver from the testbin. With ``--crds real`` (the default when
``../shared/fixtures/upstream`` is there) every target carries the upstream
CRDs of a real Standard target, 6.2 MB of JSON each. Every ServingStack is Provided mode, labelled
with its shard; shard s runs ``modelplane run --selector bench.modelplane.ai/shard=s``
at the default resync.

Prints, per shard:
- RSS and CPU seconds idle (the operator up, no stack) and settled (every
  stack Ready, then --settle seconds), and the peak RSS (the kernel's
  high-water mark, bringing the targets up included);
- open connections (the operator's sockets, from /proc) and the watches and
  connections the fleet server counts on the shard's targets;
- the time from the first ServingStack created until every stack of the
  shard is Ready;
- the time from a change on one target (its Gateway's address, written to its
  status as Envoy Gateway would) to the hub's ``status.gateway.address``, p50
  and max over --changes changes, on a target of each shard;
- requests per minute once settled, over --window seconds: the hub's
  (apiserver_request_total, every shard together, the leader Leases left
  out) and the targets' (the fleet server's counts, per shard).

    python bench/bench_fleet_healthy.py --targets 100 --shards 1
    python bench/bench_fleet_healthy.py --targets 10000 --shards 4
    python bench/bench_fleet_healthy.py --targets 10000 --shards 4 --stagger

With ``--stagger`` each shard's operator starts once the shard before it has
every stack Ready, and the figures are read once all of them run: a machine
with fewer cores than shards (one each to bring its targets up, as a real
shard's pod has) cannot start them all at once without each starving the
others and the hub; settled, they share it. A later shard's "idle" figures
are then read with its stacks already on the hub (10 s after it is up).

The file-descriptor limit is raised for this process and what it starts
(root may raise the hard limit; otherwise the soft one goes to it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.substrate import Substrate, run_operator  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.env import _free_port  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402

from modelplane.api.crd import servingstack_crd  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL  # noqa: E402
from modelplane.catalog.configuration import GATEWAY_NAME  # noqa: E402
from modelplane.catalog.configuration import NS as TARGET_NS  # noqa: E402

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
NS = "fleet"
SHARD_LABEL = "bench.modelplane.ai/shard"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
NOFILE = 1_048_576


def _create(http: httpx2.Client, path: str, body: dict[str, Any], tries: int = 10) -> None:
    """POST ``body``, again after a timeout or a 5xx or 429 from a hub the shards keep busy.

    At 10,000 stacks the shards' status writes take the hub's two cores too,
    and a create now and then outlasts its 60 s (504). A 409 after a retry is
    the earlier try's create, which went through.
    """
    for attempt in range(tries):
        try:
            answer = http.post(path, json=body)
        except httpx2.TransportError:
            time.sleep(2**attempt)
            continue
        if answer.status_code == 409 and attempt > 0:
            return
        if answer.status_code < 500 and answer.status_code != 429:
            answer.raise_for_status()
            return
        time.sleep(2**attempt)
    raise RuntimeError(f"POST {path}: no answer after {tries} tries")


def create_stacks(
    http: httpx2.Client, stacks: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]
) -> None:
    """Create each stack's kubeconfig Secret, then the stack: (name, kubeconfig, stack body).

    Eight at a time, as fast as the hub takes them; each POST retried as ``_create`` says.
    """

    def create(one: tuple[str, dict[str, Any], dict[str, Any]]) -> None:
        name, kubeconfig, body = one
        _create(http, f"/api/v1/namespaces/{NS}/secrets", _secret(name, kubeconfig))
        _create(http, f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NS}/{PLURAL}", body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, stacks))


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (NOFILE, hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
            return want
    return soft


def _rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def _peak_rss_mib(pid: int) -> float:
    """The process's resident high-water mark (VmHWM): its peak, bring-up included."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith("socket:"):
                count += 1
    return count


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def _secret(name: str, kubeconfig: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    }


def _stack(name: str, shard: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": NS, "labels": {SHARD_LABEL: str(shard)}},
        "spec": {
            "components": "Provided",
            "secrets": [{"type": "Kubeconfig", "name": name, "key": "kubeconfig"}],
        },
    }


def _hub_requests(env: TestEnv) -> tuple[float, float, dict[str, float]]:
    """Reads (GET, LIST) and writes on the hub so far, the leader Leases left out.

    The third is the writes by verb and resource, to tell what a shard still
    writes once its stacks are Ready.
    """
    from prometheus_client.parser import text_string_to_metric_families

    reads = writes = 0.0
    by_kind: dict[str, float] = {}
    for family in text_string_to_metric_families(env.metrics_text()):
        for s in family.samples:
            if s.name != "apiserver_request_total" or s.labels.get("resource") == "leases":
                continue
            verb = s.labels.get("verb", "")
            if verb in ("GET", "LIST"):
                reads += s.value
            elif verb in ("POST", "PUT", "PATCH", "DELETE", "APPLY"):
                writes += s.value
                what = "/".join(
                    p for p in (verb, s.labels.get("resource"), s.labels.get("subresource")) if p
                )
                by_kind[what] = by_kind.get(what, 0.0) + s.value
    return reads, writes, by_kind


def forget_statuses(http: httpx2.Client, names: Sequence[str], unready: Callable[[], bool]) -> None:
    """Clear the stacks' statuses, and wait until ``unready()`` says none is Ready.

    A benchmark that runs one code after another over the same stacks
    needs it: otherwise the next code's stacks are Ready from the moment it
    starts, by the status the code before wrote, and a Provided target,
    written to by neither, looks settled at once.
    """

    def one(name: str) -> None:
        answer = http.patch(
            f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NS}/{PLURAL}/{name}/status",
            content=json.dumps({"status": None}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        answer.raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    _until("every status cleared", unready, 300)


def _until(what: str, check: Callable[[], bool], timeout: float, every: float = 0.5) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def _is_ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class _ReadyWatch:
    """name -> Ready of the hub's stacks, kept by one LIST and then a WATCH.

    Polled instead, a LIST of 10,000 stacks every few seconds was a load of
    its own on the hub the operators write to (and half a core here).
    """

    def __init__(self, env: TestEnv) -> None:
        self.ready: dict[str, bool] = {}
        self._env = env
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        path = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NS}/{PLURAL}"
        with self._env.http_client(timeout=120) as http:
            while not self._stop.is_set():
                try:
                    rv = self._list(http, path)
                    self._watch(http, path, rv)
                except (httpx2.HTTPError, ValueError, KeyError):
                    time.sleep(1)

    def _list(self, http: httpx2.Client, path: str) -> str:
        cont, seen = "", {}
        while True:
            params = {"limit": "500", **({"continue": cont} if cont else {})}
            response = http.get(path, params=params)
            response.raise_for_status()
            doc = response.json()
            for item in doc.get("items") or []:
                seen[item["metadata"]["name"]] = _is_ready(item)
            cont = (doc.get("metadata") or {}).get("continue") or ""
            if not cont:
                self.ready = seen
                return str(doc["metadata"]["resourceVersion"])

    def _watch(self, http: httpx2.Client, path: str, rv: str) -> None:
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "300"}
        with http.stream("GET", path, params=params, timeout=None) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # 410 Gone: listed again
                item = event.get("object") or {}
                name = item["metadata"]["name"]
                if event.get("type") == "DELETED":
                    self.ready.pop(name, None)
                else:
                    self.ready[name] = _is_ready(item)


def _hub_address(hub: Client, name: str) -> Any:
    status = hub.get(SS, name, namespace=NS).to_dict().get("status") or {}
    return (status.get("gateway") or {}).get("address")


def move_gateway_address(target: Client, n: int) -> str:
    """Write the nth of a run of alternating addresses into the Gateway's status, as Envoy would."""
    ip = f"203.0.113.{n % 250 + 1}" if n % 2 == 0 else f"198.51.100.{n % 250 + 1}"
    target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": ip}]}},
        namespace=TARGET_NS,
        patch_type=PatchType.MERGE,
    )
    return ip


def serve_servingstacks(env: TestEnv) -> Client:
    """A client of the hub ``env`` once it serves ServingStacks, in namespace ``NS``."""
    hub = Client(KubeConfig.from_dict(env.kubeconfig), field_manager="bench")
    hub.apply(CustomResourceDefinition.from_dict(servingstack_crd()))
    hub.apply(Namespace.from_dict({"metadata": {"name": NS}}))
    with env.http_client() as http:
        _until(
            "ServingStacks served",
            lambda: http.get(f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}").status_code == 200,
            60,
        )
    return hub


def _change_latencies(
    hub: Client, fleet: FleetServer, target: int, name: str, changes: int
) -> list[float]:
    client = fleet.client(target)
    out = []
    for n in range(changes):
        t0 = time.monotonic()
        ip = move_gateway_address(client, n)
        _until("the address on the hub", lambda ip=ip: _hub_address(hub, name) == ip, 60, 0.01)
        out.append(time.monotonic() - t0)
        time.sleep(0.2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--ready-timeout", type=float, default=3600.0)
    parser.add_argument("--seed", type=Path, help="a seed file to reuse (tests/testenv/fleet.py)")
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    parser.add_argument(
        "--stagger",
        action="store_true",
        help="start each shard's operator once the one before has every stack Ready",
    )
    add_crds_option(parser)
    parser.add_argument("operator_args", nargs="*", help="more arguments to modelplane run")
    args = parser.parse_args()
    nofile = _raise_nofile()
    print(f"targets {args.targets}, shards {args.shards}, open files limit {nofile}")

    with tempfile.TemporaryDirectory(prefix="mp-fleet-healthy-") as tmp_s:
        tmp = args.keep or Path(tmp_s)
        tmp.mkdir(parents=True, exist_ok=True)
        # One fleet server per shard: a process may hold at most the open
        # files limit of connections, and a shard's targets are all it serves.
        names = [f"t{i:05d}" for i in range(args.targets)]
        shard_of = {name: i % args.shards for i, name in enumerate(names)}
        # name -> (its shard's fleet server, its index there)
        where: dict[str, tuple[int, int]] = {}
        for i, name in enumerate(names):
            where[name] = (shard_of[name], i // args.shards)
        sizes = [sum(1 for n in names if shard_of[n] == s) for s in range(args.shards)]
        fleets: list[FleetServer] = []
        hub_env = TestEnv(tmp / "hub")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            seed, crds = args.seed, crds_for(args.crds)
            for s in range(args.shards):
                fleet = FleetServer(tmp / f"fleet-{s}", sizes[s], seed=seed, crds=crds)
                fleets.append(fleet.start())
                seed = fleets[-1].seed
            hub_env.start()
            hub = serve_servingstacks(hub_env)
            nowhere = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", tmp)
            idle: dict[int, tuple[float, float]] = {}
            started: dict[int, float] = {}

            def start(s: int) -> None:
                """Shard ``s``'s operator, up and idle (its figures read 10 s after it is)."""
                procs.append(
                    run_operator(
                        hub_env.kubeconfig_path,
                        nowhere,
                        NS,
                        tmp / f"op-{s}.log",
                        "--resync",
                        "300",
                        "--selector",
                        f"{SHARD_LABEL}={s}",
                        "--metrics-port",
                        str(_free_port()),
                        "--metrics-address",
                        "127.0.0.1",
                        *args.operator_args,
                    )
                )
                _until(
                    f"operator {s} up",
                    lambda: "authentication has finished" in (tmp / f"op-{s}.log").read_text(),
                    180,
                )
                started[s] = time.monotonic()
                time.sleep(10)
                idle[s] = (_rss_mib(procs[s].pid), _cpu_seconds(procs[s].pid))

            for s in range(1 if args.stagger else args.shards):
                start(s)

            # The fleet's Secrets and stacks, created as fast as the hub takes them.
            t0 = time.monotonic()
            with hub_env.http_client(timeout=60) as http, _ReadyWatch(hub_env) as watch:
                create_stacks(
                    http,
                    [
                        (
                            name,
                            fleets[where[name][0]].kubeconfig(where[name][1]),
                            _stack(name, shard_of[name]),
                        )
                        for name in names
                    ],
                )
                created = time.monotonic() - t0
                print(f"created {args.targets} Secrets and ServingStacks in {created:.0f} s")
                ready_at: dict[int, float] = {}
                while len(ready_at) < args.shards:
                    time.sleep(2)
                    ready = dict(watch.ready)
                    now = time.monotonic() - t0
                    for s in range(len(procs)):
                        if s not in ready_at and all(
                            ready.get(n) for n in names if shard_of[n] == s
                        ):
                            ready_at[s] = now
                            took = now - (started[s] - t0)
                            print(f"shard {s} Ready {took:.0f} s after its operator was up")
                            if len(procs) < args.shards:
                                start(len(procs))
                    if now > args.ready_timeout:
                        missing = [n for n in names if not ready.get(n)]
                        print(hub.get(SS, missing[0], namespace=NS).to_dict().get("status"))
                        raise TimeoutError(f"{len(missing)} not Ready, e.g. {missing[:5]}")
            print(f"every stack Ready {max(ready_at.values()):.0f} s after the first was created")
            time.sleep(args.settle)

            settled = [(_rss_mib(p.pid), _cpu_seconds(p.pid)) for p in procs]
            peaks = [_peak_rss_mib(p.pid) for p in procs]
            stats0 = [f.stats(detail=True)["perTarget"] for f in fleets]
            hub0 = _hub_requests(hub_env)
            cpu0 = [_cpu_seconds(p.pid) for p in procs]
            time.sleep(args.window)
            cpu1 = [_cpu_seconds(p.pid) for p in procs]
            hub1 = _hub_requests(hub_env)
            stats1 = [f.stats(detail=True)["perTarget"] for f in fleets]
            per_minute = 60.0 / args.window
            sockets = [_sockets(p.pid) for p in procs]

            latencies: dict[int, list[float]] = {}
            for s in range(args.shards):
                name = next(n for n in names if shard_of[n] == s)
                latencies[s] = _change_latencies(hub, fleets[s], where[name][1], name, args.changes)

            print(f"load average (1, 5, 15 min) at the end: {_load()}")
            grown = ", ".join(
                f"{k} {(v - hub0[2].get(k, 0.0)) * per_minute:.0f}"
                for k, v in sorted(hub1[2].items())
                if v != hub0[2].get(k, 0.0)
            )
            print(
                f"hub, every shard together, settled: reads {(hub1[0] - hub0[0]) * per_minute:.0f}"
                f"/min, writes {(hub1[1] - hub0[1]) * per_minute:.0f}/min"
                + (f" ({grown})" if grown else "")
            )
            for s in range(args.shards):
                mine = [n for n in names if shard_of[n] == s]

                def total(stats: list[dict[str, Any]], what: str, s: int = s) -> int:
                    return sum(int(v[what]) for v in stats[s].values())

                conns, watches = total(stats1, "Conns"), total(stats1, "Watches")
                reads = (total(stats1, "Reads") - total(stats0, "Reads")) * per_minute
                writes = (total(stats1, "Writes") - total(stats0, "Writes")) * per_minute
                lat = latencies[s]
                print(
                    f"shard {s} ({len(mine)} targets): "
                    f"RSS idle {idle[s][0]:.0f} MiB, settled {settled[s][0]:.0f} MiB, "
                    f"peak {peaks[s]:.0f} MiB; "
                    f"CPU s idle {idle[s][1]:.1f}, settled {settled[s][1]:.1f}, "
                    f"{(cpu1[s] - cpu0[s]) * per_minute:.1f}/min in the window; "
                    f"operator sockets {sockets[s]}, target connections {conns} "
                    f"({conns / len(mine):.1f} each), watches {watches} "
                    f"({watches / len(mine):.1f} each); "
                    f"all Ready at {ready_at[s]:.0f} s; "
                    f"change to hub p50 {statistics.median(lat) * 1000:.0f} ms, "
                    f"max {max(lat) * 1000:.0f} ms over {len(lat)}; "
                    f"target reads {reads:.0f}/min, writes {writes:.0f}/min"
                )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in fleets:
                f.stop()
            hub_env.stop()


if __name__ == "__main__":
    main()
