"""Benchmark: how fast a broken release workload reaches the hub, and how fast it is restored.

tests/integration/test_release_health.py proves each breakage is reported
and recovered; this measures it, with the real operator process, helm,
kube-apiservers and the simulated GPU cluster (kwok), at ``--resync 300``
so only the target watches can bring a change in time:

1. ``--release-drift=warn``: breakages made by hand in turn (a Deployment
   scaled to zero, its pod crash-looping, a DaemonSet's GPU tolerations
   removed), each timed from the write on the target to the hub's
   ``Ready=False`` with the breakage's reason, then undone by hand and timed
   to ``Ready=True`` again;
2. ``--release-drift=correct``: a release's Deployment deleted, timed to
   the Deployment back on the target (restored from the stored manifest)
   and to ``Ready=True``.

3. ``--release-drift=correct``: the release's webhook Service, then its
   ValidatingWebhookConfiguration, deleted in turn, each timed to the object
   back on the target;
4. every GPU node tainted ``maintenance=true:NoExecute``, timed to the
   hub's ``GPUsAvailable=False`` (``GPUNodesUnavailable``) and to
   ``status.target.gpus`` 0, then the taint removed, timed to
   ``GPUsAvailable=True`` with the GPUs counted again. Each of these is
   made once no reconcile ran for 1.5 s: timed is the watch path, not the
   tail of the previous restore's direct read.

Then what the operator's watches cost the target (open watches by
resource, from the API server's ``apiserver_longrunning_requests``, and the
operator's TCP connections to it), and the cost of a no-op resync at
``--resync 2`` (reads of the release workloads' resources, target writes,
hub writes). p50 and max are printed.

    python bench/bench_release_health.py [--breakages 24] [--deletes 20] \
        [--objects 20] [--taints 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import ValidatingWebhookConfiguration
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Node, Pod, Service
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import (  # noqa: E402
    Harness,
    client_for,
    install_servingstack_crd,
    requests_by_resource,
)
from tests.integration.simcluster import simulated  # noqa: E402
from tests.integration.substrate import Helm, serve_substrate  # noqa: E402
from tests.integration.test_release_health import (  # noqa: E402
    CERT_MANAGER,
    CONTROLLER,
    DRA,
    DRA_PLUGIN,
    MAINTENANCE,
    WEBHOOK,
    WEBHOOK_CONFIG,
    _crash,
)
from tests.testenv import TestEnv, find_binaries  # noqa: E402
from tests.testenv.nodes import DEFAULT_LAYOUT, NodeLayout  # noqa: E402
from tests.testenv.sockets import connections_to  # noqa: E402

POLL = 0.02


def _until(check: Callable[[], bool], timeout: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if check():
            return time.perf_counter() - start
        time.sleep(POLL)
    raise TimeoutError("condition not reached")


def _spread(samples: list[float]) -> str:
    if not samples:
        return "no sample"
    ms = sorted(x * 1000 for x in samples)
    return f"p50 {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms over {len(ms)}"


def _ready(h: Harness, status: str, reason: str | None = None) -> Callable[[], bool]:
    def check() -> bool:
        for c in h.status().get("conditions", []):
            if c["type"] == "Ready":
                return bool(c["status"] == status and (reason is None or c["reason"] == reason))
        return False

    return check


def _scale(h: Harness, replicas: int) -> None:
    h.target.patch(
        Deployment.Scale,
        WEBHOOK,
        {"spec": {"replicas": replicas}},
        namespace=CERT_MANAGER,
        patch_type=PatchType.MERGE,
    )


def _controller_pod(h: Harness) -> str:
    def one() -> bool:
        pods = h.target.list(
            Pod, namespace=CERT_MANAGER, labels={"app.kubernetes.io/name": CONTROLLER}
        )
        return len([p for p in pods if p.metadata and not p.metadata.deletionTimestamp]) == 1

    _until(one, 60)
    [pod] = [
        p
        for p in h.target.list(
            Pod, namespace=CERT_MANAGER, labels={"app.kubernetes.io/name": CONTROLLER}
        )
        if p.metadata and not p.metadata.deletionTimestamp
    ]
    assert pod.metadata is not None and pod.metadata.name is not None
    return pod.metadata.name


def _tolerations(h: Harness, tolerations: list[dict[str, Any]] | None) -> None:
    op: dict[str, Any] = (
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": tolerations}
        if tolerations is not None
        else {"op": "remove", "path": "/spec/template/spec/tolerations"}
    )
    h.target.patch(
        DaemonSet, DRA_PLUGIN, [op], namespace=DRA, patch_type=PatchType.JSON, field_manager="bench"
    )


def _watches(env: TestEnv) -> dict[str, float]:
    """Open WATCH requests on the API server now, by resource (one scrape)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(env.metrics_text()):
        for sample in family.samples:
            if (
                sample.name == "apiserver_longrunning_requests"
                and sample.labels.get("verb") == "WATCH"
            ):
                resource = sample.labels.get("resource") or "?"
                out[resource] = out.get(resource, 0.0) + sample.value
    return out


def _connections(pid: int, server: str) -> int:
    """Established TCP connections of process ``pid`` to ``server``'s port."""
    return connections_to(int(server.rsplit(":", 1)[1]), pid)


def _quiet(h: Harness, seconds: float = 1.5) -> None:
    """Until no reconcile ran for ``seconds``: a change is timed from a settled stack.

    One made while a reconcile reads the target directly (the round after
    a restore) waits for that read, which is the direct read's cost, not
    the watches'.
    """
    seen = [h.reconciles(), time.perf_counter()]

    def quiet() -> bool:
        now = h.reconciles()
        if now != seen[0]:
            seen[:] = [now, time.perf_counter()]
        return time.perf_counter() - seen[1] >= seconds

    _until(quiet, 120)


def _gpu_condition(h: Harness, status: str, reason: str) -> Callable[[], bool]:
    def check() -> bool:
        for c in h.status().get("conditions", []):
            if c["type"] == "GPUsAvailable":
                return bool(c["status"] == status and c["reason"] == reason)
        return False

    return check


def _set_taints(h: Harness, node: str, taints: list[dict[str, Any]]) -> None:
    h.target.patch(
        Node, node, {"spec": {"taints": taints}}, patch_type=PatchType.MERGE, field_manager="drain"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--breakages", type=int, default=24, help="breakages with warn")
    parser.add_argument("--deletes", type=int, default=20, help="Deployments deleted, correct")
    parser.add_argument("--objects", type=int, default=20, help="each of Service, webhook")
    parser.add_argument("--taints", type=int, default=20, help="GPU nodes drained and back")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mp-bench-health-") as tmp_s:
        tmp = Path(tmp_s)
        hub_env = TestEnv(tmp / "hub").start()
        substrate_gen = serve_substrate(
            Helm(find_binaries()["helm"], tmp / "helm"), tmp / "substrate", workloads=True
        )
        substrate = next(substrate_gen)
        sim = simulated(tmp / "target")
        h: Harness | None = None
        try:
            target = sim.__enter__()
            hub = client_for(hub_env, "bench")
            install_servingstack_crd(hub, hub_env, deadline=60)
            (tmp / "op").mkdir()
            h = Harness(hub, hub_env, target, substrate, tmp / "op", "bench")
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
            h.create({})
            harness = h

            def run(mode: str, resync: str = "300") -> None:
                harness.stop()
                harness.start("--release-drift", mode, "--resync", resync)

                def reconciled() -> bool:
                    try:
                        return harness.reconciles() >= 1
                    except httpx2.TransportError:  # its metrics port not open yet
                        return False

                # The status is the last process's until the new one has reconciled.
                took = _until(lambda: reconciled() and _ready(harness, "True")(), 600)
                print(f"--release-drift={mode}: Ready {took:.1f} s after the operator started")

            run("warn")
            ds = h.target.get(DaemonSet, DRA_PLUGIN, namespace=DRA)
            assert ds.spec is not None and ds.spec.template.spec is not None
            tolerations = [t.to_dict() for t in ds.spec.template.spec.tolerations or []]
            to_condition: dict[str, list[float]] = {}
            to_clear: dict[str, list[float]] = {}
            breaks: list[tuple[str, str, Callable[[], None], Callable[[], None]]] = [
                ("scaled to zero", "WorkloadScaledDown", lambda: _scale(harness, 0),
                 lambda: _scale(harness, 1)),
                ("pod crash-looping", "PodCrashLooping", lambda: None, lambda: None),
                ("DaemonSet tolerations removed", "Unschedulable",
                 lambda: _tolerations(harness, None), lambda: _tolerations(harness, tolerations)),
            ]  # fmt: skip
            for i in range(args.breakages):
                name, reason, do, undo = breaks[i % len(breaks)]
                if reason == "PodCrashLooping":
                    pod = _controller_pod(h)
                    start = time.perf_counter()
                    _crash(h, pod)
                else:
                    start = time.perf_counter()
                    do()
                _until(_ready(h, "False", reason), args.timeout)
                to_condition.setdefault(name, []).append(time.perf_counter() - start)
                start = time.perf_counter()
                if reason == "PodCrashLooping":
                    h.target.delete(Pod, pod, namespace=CERT_MANAGER)
                else:
                    undo()
                _until(_ready(h, "True"), args.timeout)
                to_clear.setdefault(name, []).append(time.perf_counter() - start)
            every = [x for xs in to_condition.values() for x in xs]
            print(f"break -> hub Ready=False (all {len(every)}): {_spread(every)}")
            for name, xs in to_condition.items():
                print(f"  {name}: {_spread(xs)}")
            cleared = [x for xs in to_clear.values() for x in xs]
            print(f"undone by hand -> hub Ready=True: {_spread(cleared)}")

            run("correct")
            restored: list[float] = []
            ready_again: list[float] = []

            def present() -> bool:
                try:
                    harness.target.get(Deployment, WEBHOOK, namespace=CERT_MANAGER)
                except ApiError as err:
                    if err.status.code == 404:
                        return False
                    raise
                return True

            for _ in range(args.deletes):
                start = time.perf_counter()
                h.target.delete(Deployment, WEBHOOK, namespace=CERT_MANAGER)
                _until(lambda: not present(), args.timeout)
                _until(present, args.timeout)
                restored.append(time.perf_counter() - start)
                _until(_ready(h, "True"), args.timeout)
                ready_again.append(time.perf_counter() - start)
            print(f"Deployment deleted -> restored on the target: {_spread(restored)}")
            print(f"Deployment deleted -> hub Ready=True again: {_spread(ready_again)}")

            def back(res: Any, name: str, namespace: str | None) -> float:
                def there() -> bool:
                    try:
                        harness.target.get(res, name, namespace=namespace)
                    except ApiError as err:
                        if err.status.code == 404:
                            return False
                        raise
                    return True

                _quiet(harness)
                start = time.perf_counter()
                harness.target.delete(res, name, namespace=namespace)
                _until(there, args.timeout)
                return time.perf_counter() - start

            objects = [
                ("Service", Service, WEBHOOK, CERT_MANAGER),
                ("ValidatingWebhookConfiguration", ValidatingWebhookConfiguration,
                 WEBHOOK_CONFIG, None),
            ]  # fmt: skip
            for shown, res, name, namespace in objects:
                took = [back(res, name, namespace) for _ in range(args.objects)]
                _until(_ready(h, "True"), args.timeout)
                print(f"{shown} deleted -> restored on the target: {_spread(took)}")

            gpu_nodes = [n for n, gpu in NodeLayout.parse(DEFAULT_LAYOUT).names() if gpu]
            kept = {}
            for node in gpu_nodes:
                spec = h.target.get(Node, node).spec
                kept[node] = [t.to_dict() for t in (spec.taints if spec else None) or []]
            to_false: list[float] = []
            to_zero: list[float] = []
            to_true: list[float] = []
            for _ in range(args.taints):
                _quiet(h)
                start = time.perf_counter()
                for node in gpu_nodes:
                    _set_taints(h, node, [*kept[node], MAINTENANCE])
                _until(_gpu_condition(h, "False", "GPUNodesUnavailable"), args.timeout)
                to_false.append(time.perf_counter() - start)
                _until(lambda: harness.status().get("target", {}).get("gpus") == 0, args.timeout)
                to_zero.append(time.perf_counter() - start)
                _quiet(h)
                start = time.perf_counter()
                for node in gpu_nodes:
                    _set_taints(h, node, kept[node])
                _until(_gpu_condition(h, "True", "GPUsPublished"), args.timeout)
                to_true.append(time.perf_counter() - start)
            print(f"GPU nodes tainted -> hub GPUsAvailable=False: {_spread(to_false)}")
            print(f"GPU nodes tainted -> status.target.gpus 0: {_spread(to_zero)}")
            print(f"taint removed -> hub GPUsAvailable=True: {_spread(to_true)}")

            # What the operator's watches hold open on the target, by resource.
            with_operator = _watches(target)
            assert h.proc is not None
            connections = _connections(h.proc.pid, target.server)
            h.stop()
            time.sleep(2)
            without = _watches(target)
            ours = {
                r: with_operator.get(r, 0.0) - without.get(r, 0.0)
                for r in sorted(set(with_operator) | set(without))
                if with_operator.get(r, 0.0) != without.get(r, 0.0)
            }
            print(
                f"the operator's watches on the target: {sum(ours.values()):.0f} "
                f"({', '.join(f'{r} {n:.0f}' for r, n in ours.items())}); "
                f"its TCP connections to the target: {connections}"
            )

            run("correct", "2")
            time.sleep(10)  # past the first reconciles of the new process
            kinds = ("deployments", "daemonsets", "pods", "nodes", "secrets")
            before = requests_by_resource(target, ("GET", "LIST"))
            writes, hub_writes = target.write_requests(), hub_env.write_requests()
            count = h.reconciles()
            _until(lambda: harness.reconciles() >= count + 5, 120)
            after = requests_by_resource(target, ("GET", "LIST"))
            resyncs = h.reconciles() - count
            reads = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in kinds}
            target_writes = {
                k: v - writes.get(k, 0.0)
                for k, v in target.write_requests().items()
                if k[1] in kinds and v != writes.get(k, 0.0)
            }
            hub_grown = {
                k: v - hub_writes.get(k, 0.0)
                for k, v in hub_env.write_requests().items()
                if v != hub_writes.get(k, 0.0)
            }
            print(
                f"{resyncs} no-op resyncs: reads of {', '.join(kinds)}: {reads}; "
                f"target writes to them: {target_writes or 0}; hub writes: {hub_grown or 0}"
            )
            leases = after.get("leases", 0.0) - before.get("leases", 0.0)
            print(f"  lease reads (the claim, and the simulated cluster's own): {leases:.0f}")
        finally:
            if h is not None:
                h.stop()
            sim.__exit__(None, None, None)
            next(substrate_gen, None)
            hub_env.stop()


if __name__ == "__main__":
    main()
