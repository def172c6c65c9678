"""Benchmark: what a large target's Node heartbeats cost the event loop, before and after.

Issue 42: every Node event recomputed the parts of the whole Node
collection (``gpu_watch.fingerprint``) to find that a heartbeat changed
nothing; 5,000 Nodes of 80 labels cost 177 ms of the loop an event. This
drives the real watch path (a ``Reflector`` LISTs the Nodes in pages, then
WATCHes, and each event goes through ``WatchCache._on_change``) against a
scripted target on an in-process transport, in one run:

- before: the cache as it was (``Before`` below: the whole collection's
  parts compared at every event, the code before ``observe.parts``);
- after: the cache as it is (the one Node an event is of).

The simulated Nodes carry some 80 labels each, as a GPU node of a real
cluster does (Kubernetes' own, NFD's ``feature.node.kubernetes.io/...``,
GPU feature discovery's ``nvidia.com/...``, the values read off the H200 of
the shared fixture ``hardware/nvidia-h200``), the GPU taint and a kubelet's
status. Each event is a heartbeat: the Ready condition's
``lastHeartbeatTime`` and the resourceVersion change, nothing read. A second
stack on the same loop gets one CRD change every half second; its time from
the change being due to its wake is what a healthy neighbour waits.

Printed, per Node count and rate: events due and handled, the process CPU
per event handled and in % of a core (the loop's: parse, outline, judge,
and the ticker's own, printed first), ``_on_change`` alone per event, the
worst event-loop gap (a 5 ms ticker's lateness) and the collector's
longest pause in the run (a gap longer than both is the machine's, shared
with others), the worst delay of a
heartbeat and of the second stack's change from when each was due, and the
wakes (a heartbeat should cause none); then what the Nodes' copy weighs
against its default budget.

    python bench/bench_node_events.py [--nodes 5000,20000] [--rates 17,20] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testenv.nodes import h200, nfd_labels  # noqa: E402

from modelplane.api.spec import ServingStackSpec  # noqa: E402
from modelplane.catalog import components as catalog  # noqa: E402
from modelplane.kube.reflector import WatchKey  # noqa: E402
from modelplane.observe.state import wanted  # noqa: E402
from modelplane.observe.watches import _OBJECT_EVENTS, CRDS, NODES_KEY, WatchCache  # noqa: E402
from modelplane.untrusted import as_dict  # noqa: E402

SPEC = ServingStackSpec.model_validate(
    {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}]}
)
NODES_PATH = "/api/v1/nodes"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RV, BEAT = "@@RV@@", "@@BEAT@@"
TICK = 0.005
# The scripted CRD change's number, which the second stack's wake is timed from.
INDEX_LABEL = "bench.modelplane.ai/index"
NFD = "feature.node.kubernetes.io"
CPUID = (  # noqa: SIM905
    "ADX AESNI AMXBF16 AMXINT8 AMXTILE AVX AVX2 AVX512BF16 AVX512BITALG AVX512BW AVX512CD "
    "AVX512DQ AVX512F AVX512FP16 AVX512IFMA AVX512VBMI AVX512VBMI2 AVX512VL AVX512VNNI "
    "AVX512VPOPCNTDQ AVXVNNI CMPXCHG8 FMA3 FSRM FXSR FXSROPT GFNI HYPERVISOR IBPB LAHF "
    "MOVBE MOVDIR64B MOVDIRI OSXSAVE SERIALIZE SHA STIBP SYSCALL SYSEE VAES VPCLMULQDQ "
    "WAITPKG X87 XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES"
).split()


def node_part_before(obj: dict[str, Any]) -> tuple[Any, ...]:
    """A Node's part as ``gpu_watch._node`` read it before: reprs of sorted items."""
    meta, spec, status = (
        as_dict(obj.get("metadata")),
        as_dict(obj.get("spec")),
        as_dict(obj.get("status")),
    )
    return (
        meta.get("name"),
        repr(sorted(as_dict(meta.get("labels")).items())),
        repr(spec.get("taints")),
        spec.get("unschedulable") is True,
        repr(
            sorted((k, v) for k, v in as_dict(status.get("allocatable")).items() if "/" in str(k))
        ),
    )


def node_outline_before(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Nodes' copy kept of each before it kept its part's digest alone."""
    meta, spec, status = (
        as_dict(obj.get("metadata")),
        as_dict(obj.get("spec")),
        as_dict(obj.get("status")),
    )
    metadata = {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta}
    allocatable = as_dict(status.get("allocatable"))
    return {
        "metadata": metadata,
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"allocatable": {k: v for k, v in allocatable.items() if "/" in str(k)}},
    }


class Before(WatchCache):
    """The cache's Node path as it was: every event compared the whole collection's parts.

    As ``WatchCache._on_change`` and ``gpu_watch.fingerprint`` were before
    ``observe.parts`` (and before the parts were msgspec's canonical JSON).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seen: dict[WatchKey, list[tuple[Any, ...]]] = {}

    def _outline(self, key: WatchKey) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        return node_outline_before if key == NODES_KEY else super()._outline(key)

    def _on_change(self, key: WatchKey, kind: str, name: str | None = None) -> None:
        if key != NODES_KEY:
            super()._on_change(key, kind, name)
            return
        self._moved.set()
        self._moved = asyncio.Event()
        seen = sorted(node_part_before(i) for i in self.reflectors[key].items.values())
        unchanged = seen == self._seen.get(key)
        self._seen[key] = seen
        if unchanged and kind in _OBJECT_EVENTS:
            return
        self.facts_generation += 1
        if kind == "LIST":
            self.api_generation += 1
        self._wake()


def labels(name: str) -> dict[str, str]:
    """Some 80 labels of a GPU node: Kubernetes', NFD's and GPU feature discovery's."""
    gpu = h200()
    cuda = gpu.cuda_version.split(".")
    driver = gpu.driver_version.split(".")
    found = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "gpu-h200x8",
        "topology.kubernetes.io/region": "eu-north1",
        "topology.kubernetes.io/zone": "eu-north1-a",
        **{f"{NFD}/cpu-cpuid.{flag}": "true" for flag in CPUID},
        f"{NFD}/cpu-hardware_multithreading": "true",
        f"{NFD}/cpu-model.family": "6",
        f"{NFD}/cpu-model.id": "143",
        f"{NFD}/cpu-model.vendor_id": "Intel",
        f"{NFD}/kernel-version.full": "6.8.0-1017-nvidia",
        f"{NFD}/kernel-version.major": "6",
        f"{NFD}/kernel-version.minor": "8",
        f"{NFD}/kernel-version.revision": "0",
        f"{NFD}/memory-numa": "true",
        f"{NFD}/storage-nonrotationaldisk": "true",
        f"{NFD}/system-os_release.ID": "ubuntu",
        f"{NFD}/system-os_release.VERSION_ID": "24.04",
        **nfd_labels(gpu),
        "nvidia.com/cuda.driver-version.full": gpu.driver_version,
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.runtime-version.full": gpu.cuda_version,
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/gpu.compute.major": gpu.compute_capability.split(".")[0],
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": gpu.architecture.lower(),
        "nvidia.com/gpu.memory": str(gpu.memory_mib),
        "nvidia.com/gpu.product": gpu.product_name.replace(" ", "-"),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.capable": "true",
    }
    return found


def node(name: str) -> dict[str, Any]:
    """A GPU node as its kubelet reports it; ``RV`` and ``BEAT`` stand for what a heartbeat sets."""
    gpu_taint = {"key": catalog.GPU_TAINT_KEY, "value": "present", "effect": "NoSchedule"}
    resources = {"cpu": "192", "memory": "2113455860Ki", "pods": "110", "nvidia.com/gpu": "8"}

    def condition(kind: str, status: str, reason: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": BEAT,
            "lastTransitionTime": "2025-01-01T00:00:00Z",
            "reason": reason,
            "message": f"kubelet has {reason}",
        }

    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": RV,
            "labels": labels(name),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"providerID": f"sim://{name}", "taints": [gpu_taint]},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.34.1", "osImage": "Ubuntu 24.04.1 LTS"},
        },
    }


class Target:
    """The Nodes' LIST (in pages) and WATCH, heartbeats at ``rate``; CRD changes every 0.5 s."""

    def __init__(self, count: int, rate: float) -> None:
        self.count, self.rate = count, rate
        self.templates = [json.dumps(node(f"gpu-{i:05}")) for i in range(count)]
        self.start = 0.0
        # Heartbeats and changes begin once the Nodes are listed.
        self.begun = asyncio.Event()

    def begin(self) -> None:
        self.start = time.perf_counter()
        self.begun.set()

    def due(self, index: int) -> float:
        return self.start + index / self.rate

    async def answer(self, request: httpx2.Request) -> httpx2.Response:
        params = request.url.params
        watching = params.get("watch") == "true"
        if request.url.path == NODES_PATH and not watching:
            return self._page(int(params.get("continue") or 0), int(params.get("limit") or 500))
        if request.url.path == NODES_PATH:
            return httpx2.Response(200, content=self._heartbeats())
        if request.url.path == CRDS_PATH and watching:
            return httpx2.Response(200, content=self._crd_changes())
        return httpx2.Response(200, json={"metadata": {"resourceVersion": "1"}, "items": []})

    def _page(self, first: int, limit: int) -> httpx2.Response:
        last = min(first + limit, self.count)
        items = ",".join(
            t.replace(RV, "1").replace(BEAT, "2025-01-01T00:00:00Z")
            for t in self.templates[first:last]
        )
        more = str(last) if last < self.count else ""
        head = json.dumps({"resourceVersion": "1", "continue": more})
        return httpx2.Response(200, content=f'{{"metadata":{head},"items":[{items}]}}'.encode())

    async def _heartbeats(self) -> AsyncIterator[bytes]:
        await self.begun.wait()
        index = 0
        while True:
            await asyncio.sleep(max(0.0, self.due(index) - time.perf_counter()))
            # The resourceVersion says which heartbeat it is (and when it was due).
            rv = str(1_000_000 + index)
            beat = f"2025-01-01T{index // 3600 % 24:02}:{index // 60 % 60:02}:{index % 60:02}Z"
            body = self.templates[index % self.count].replace(RV, rv).replace(BEAT, beat)
            yield f'{{"type":"MODIFIED","object":{body}}}\n'.encode()
            index += 1

    async def _crd_changes(self) -> AsyncIterator[bytes]:
        await self.begun.wait()
        index = 0
        while True:
            await asyncio.sleep(max(0.0, self.start + index * 0.5 - time.perf_counter()))
            # Its index in a label: the CRD's outline keeps no resourceVersion
            # (``observe.crd_outline``), which this read once and failed on.
            crd = {
                "metadata": {
                    "name": "a.example.com",
                    "resourceVersion": str(index + 2),
                    "labels": {INDEX_LABEL: str(index)},
                }
            }
            yield json.dumps({"type": "MODIFIED", "object": crd}).encode() + b"\n"
            index += 1


class Run:
    """One measurement: a target of ``count`` Nodes at ``rate`` heartbeats a second."""

    def __init__(self, target: Target, cache_type: type[WatchCache]) -> None:
        self.target, self.cache_type = target, cache_type
        self.judging: list[float] = []
        self.delays: list[float] = []
        self.neighbour: list[float] = []
        self.gaps: list[float] = []
        self.collections: list[float] = []
        self._collecting = 0.0
        self.wakes = 0

    def _gc(self, phase: str, _: dict[str, int]) -> None:
        # The collector's pauses: a gap they do not explain is the machine's.
        if phase == "start":
            self._collecting = time.perf_counter()
        elif self.target.start:
            self.collections.append(time.perf_counter() - self._collecting)

    def _timed(self, cache: WatchCache) -> Callable[[WatchKey, str, str | None], None]:
        inner = cache._on_change

        def on_change(key: WatchKey, kind: str, name: str | None = None) -> None:
            began = time.perf_counter()
            inner(key, kind, name)
            done = time.perf_counter()
            if kind == "MODIFIED" and name is not None and self.target.start:
                self.judging.append(done - began)
                rv = cache.reflectors[key].items[name]["metadata"]["resourceVersion"]
                self.delays.append(done - self.target.due(int(rv) - 1_000_000))

        return on_change

    def _wake(self) -> None:
        self.wakes += 1

    def _neighbour_woken(self, cache: WatchCache) -> None:
        crd = cache.reflectors[WatchKey(CRDS)].items.get("/a.example.com")
        if crd is not None and self.target.start:
            index = int(crd["metadata"]["labels"][INDEX_LABEL])
            self.neighbour.append(time.perf_counter() - self.target.start - index * 0.5)

    async def _ticker(self) -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(TICK)
            self.gaps.append(time.perf_counter() - began - TICK)

    async def measure(self, seconds: float) -> dict[str, float]:
        http = httpx2.AsyncClient(
            base_url="https://target.invalid", transport=httpx2.MockTransport(self.target.answer)
        )
        cache = self.cache_type(http, wanted(SPEC), self._wake, label="large")
        neighbour = WatchCache(http, wanted(SPEC), lambda: self._neighbour_woken(neighbour))
        nodes = cache.reflectors[NODES_KEY]
        nodes._changed = self._timed(cache)
        crds = neighbour.reflectors[WatchKey(CRDS)]
        listing = asyncio.create_task(nodes.run())
        while not nodes.synced:
            if nodes.refusals:
                raise SystemExit(f"the Nodes' copy was refused ({nodes.budget})")
            await asyncio.sleep(0.05)
        held = nodes.held, nodes.built
        ticker = asyncio.create_task(self._ticker())
        self.target.begin()
        gc.callbacks.append(self._gc)
        cpu = time.process_time()
        tasks = [listing, ticker, asyncio.create_task(crds.run())]
        await asyncio.sleep(seconds)
        # Past ``seconds`` when the loop was held up: what the figures divide by.
        wall = time.perf_counter() - self.target.start
        cpu = time.process_time() - cpu
        gc.callbacks.remove(self._gc)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Given back to the shard's total, which the next run's copy is held in.
        await cache.close()
        await neighbour.close()
        await http.aclose()
        handled = len(self.judging)
        return {
            "due": int(wall * self.target.rate) + 1,
            "handled": handled,
            "cpu_ms": 1000 * cpu / max(handled, 1),
            "core": 100 * cpu / wall,
            "judge_us": 1e6 * statistics.fmean(self.judging) if self.judging else 0.0,
            "gap_ms": 1000 * max(self.gaps, default=0.0),
            "gc_ms": 1000 * max(self.collections, default=0.0),
            "delay_ms": 1000 * max(self.delays, default=0.0),
            "neighbour_ms": 1000 * max(self.neighbour, default=0.0),
            "wakes": self.wakes - 1,  # the LIST's
            "copy_mib": held[0] / 2**20,
            "built_mib": held[1] / 2**20,
        }


async def idle(seconds: float) -> float:
    """The ticker's own CPU, in % of a core: what every run's figures include."""
    run = Run(Target(0, 1.0), WatchCache)
    ticker = asyncio.create_task(run._ticker())
    cpu = time.process_time()
    await asyncio.sleep(seconds)
    cpu = time.process_time() - cpu
    ticker.cancel()
    return 100 * cpu / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="5000,20000")
    parser.add_argument("--rates", default="17,20")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    sample = json.dumps(node("gpu-00000")).replace(RV, "1")
    print(f"one Node: {len(labels('gpu-00000'))} labels, {len(sample)} bytes of JSON")
    print(f"the {TICK * 1000:.0f} ms ticker alone: {asyncio.run(idle(3.0)):.1f} % of a core")
    print(
        f"{'nodes':>6} {'rate':>4} {'code':<6} {'due':>5} {'handled':>7} {'cpu/event':>10} "
        f"{'core':>6} {'judge':>10} {'worst gap':>10} {'gc':>8} {'worst delay':>11} "
        f"{'2nd stack':>10} {'wakes':>5}"
    )
    for count in (int(n) for n in args.nodes.split(",")):
        for rate in (float(r) for r in args.rates.split(",")):
            for name, cache_type in (("before", Before), ("after", WatchCache)):
                got = asyncio.run(Run(Target(count, rate), cache_type).measure(args.seconds))
                print(
                    f"{count:>6} {rate:>4g} {name:<6} {got['due']:>5.0f} {got['handled']:>7.0f} "
                    f"{got['cpu_ms']:>8.2f}ms {got['core']:>5.1f}% {got['judge_us']:>8.0f}us "
                    f"{got['gap_ms']:>8.1f}ms {got['gc_ms']:>6.1f}ms {got['delay_ms']:>9.1f}ms "
                    f"{got['neighbour_ms']:>8.1f}ms {got['wakes']:>5.0f}",
                    flush=True,
                )
            print(
                f"{count:>6} Nodes: {got['copy_mib']:.0f} MiB of JSON listed (the default "
                f"budget takes 128), their outlines estimated at {got['built_mib']:.0f} MiB"
            )


if __name__ == "__main__":
    main()
