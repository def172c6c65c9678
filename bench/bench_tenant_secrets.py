"""Benchmark: the operator's peak memory while a tenant fills a namespace with release-like Secrets.

A tenant that may write Secrets in one namespace of the target gives them
the labels the operator's release-Secret LIST and WATCH select on
(``owner=helm`` and ``modelplane.ai/digest``) and as much data as a Secret
holds. With the real operator process, hub and target kube-apiservers and
helm, at ``--resync 2`` and ``--relist 4`` (so that the reconciles read the
target directly as well as through the watches, as the first reconcile
after a restart and every relist do):

1. idle: the stack installed and Ready, ``--resyncs`` resyncs later;
2. tenant: ``--secrets`` Secrets of ``--size-kib`` KiB each written to one
   tenant namespace, then ``--resyncs`` resyncs (or blocked retries) more.

For each, the operator's peak resident set (VmHWM, which only grows) and
its resident set at that moment (VmRSS), and Ready's reason. The issue's
figures are the defaults: 240 Secrets of 256 KiB grew the operator by 344
to 375 MiB before collections had a budget. The operator is run from the
``modelplane`` that ``PYTHONPATH`` finds, so one source tree can be
measured against another.

    python bench/bench_tenant_secrets.py [--secrets 240] [--size-kib 256] [--resyncs 5]
        [--relist 4]
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lightkube.resources.core_v1 import Namespace, Secret

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import Harness, client_for, install_servingstack_crd  # noqa: E402
from tests.integration.substrate import Helm, serve_substrate  # noqa: E402
from tests.testenv import TestEnv, find_binaries  # noqa: E402

from modelplane.wire import RELEASE_DIGEST_LABEL  # noqa: E402

TENANT = "tenant-a"


def _until(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check`` holds, polled every 50 ms; TimeoutError after ``timeout``."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if check():
            return time.perf_counter() - start
        time.sleep(0.05)
    raise TimeoutError("condition not reached")


def _memory_kib(h: Harness) -> dict[str, int]:
    assert h.proc is not None
    fields = {}
    for line in Path(f"/proc/{h.proc.pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0])
    return fields


def _ready(h: Harness) -> dict[str, str]:
    for c in h.status().get("conditions", []):
        if c["type"] == "Ready":
            return {"status": c["status"], "reason": c.get("reason", "")}
    return {}


def _resyncs(h: Harness, n: int, timeout: float) -> None:
    # A blocked stack's retries are reconciles too.
    count = h.reconciles()
    _until(lambda: h.reconciles() >= count + n, timeout)


def _report(name: str, h: Harness) -> None:
    memory, ready = _memory_kib(h), _ready(h)
    alive = h.proc is not None and h.proc.poll() is None
    print(
        f"{name}: peak {memory['VmHWM'] / 1024:.0f} MiB, now {memory['VmRSS'] / 1024:.0f} MiB; "
        f"Ready={ready.get('status')} {ready.get('reason')}; operator "
        f"{'running' if alive else 'dead'}"
    )


def _secret(i: int, size: int) -> Secret:
    return Secret.from_dict(
        {
            "metadata": {
                "name": f"sh.helm.release.v1.filler-{i}.v1",
                "namespace": TENANT,
                "labels": {"owner": "helm", RELEASE_DIGEST_LABEL: "forged"},
            },
            "type": "helm.sh/release.v1",
            "data": {"release": base64.b64encode(os.urandom(size)).decode()},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--secrets", type=int, default=240)
    parser.add_argument("--size-kib", type=int, default=256, help="data of each Secret")
    parser.add_argument("--resyncs", type=int, default=5)
    parser.add_argument("--relist", default="4", help="the operator's --relist, in seconds")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mp-bench-tenant-") as tmp_s:
        tmp = Path(tmp_s)
        hub_env = TestEnv(tmp / "hub").start()
        target = TestEnv(tmp / "target").start()
        substrate_gen = serve_substrate(
            Helm(find_binaries()["helm"], tmp / "helm"), tmp / "substrate"
        )
        substrate = next(substrate_gen)
        h: Harness | None = None
        try:
            hub = client_for(hub_env, "bench")
            install_servingstack_crd(hub, hub_env, deadline=60)
            (tmp / "op").mkdir()
            h = Harness(hub, hub_env, target, substrate, tmp / "op", "bench")
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
            h.create({"gateway": {"hostname": "b.example"}})
            h.start("--resync", "2", "--relist", args.relist)
            ready = _until(lambda: _ready(h).get("status") == "True", 240)
            print(f"Ready {ready:.1f} s after the stack was created")
            _resyncs(h, args.resyncs, 120)
            _report(f"idle, {args.resyncs} resyncs after Ready", h)

            h.target.create(Namespace.from_dict({"metadata": {"name": TENANT}}))
            started = time.perf_counter()
            for i in range(args.secrets):
                h.target.create(_secret(i, args.size_kib * 1024 * 3 // 4))
            total = args.secrets * args.size_kib / 1024
            print(
                f"{args.secrets} Secrets of {args.size_kib} KiB ({total:.0f} MiB) in "
                f"{TENANT} in {time.perf_counter() - started:.1f} s"
            )
            _resyncs(h, args.resyncs, 300)
            _report(f"tenant, {args.resyncs} reconciles after", h)
        finally:
            if h is not None:
                h.stop()
            target.stop()
            next(substrate_gen, None)
            hub_env.stop()


if __name__ == "__main__":
    main()
