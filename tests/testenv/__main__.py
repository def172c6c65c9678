"""``python -m tests.testenv {start DIR | stop DIR | bin}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.testenv.env import TestbinMissingError, TestEnv, TestEnvError, resolve_bin_dir
from tests.testenv.nodes import (
    DEFAULT_LAYOUT,
    HardwareMissingError,
    NodeLayout,
    NodeLayoutError,
    hardware_dir,
)
from tests.testenv.simcluster import SimCluster, describe, preflight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.testenv",
        description="A real kube-apiserver + etcd on loopback for integration tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser(
        "start", help="start etcd + kube-apiserver with data under DIR; return once ready"
    )
    start.add_argument("dir")
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for /readyz")
    start.add_argument(
        "--nodes",
        metavar="LAYOUT",
        nargs="?",
        const=DEFAULT_LAYOUT,
        help="also run kube-controller-manager, kube-scheduler and kwok with this many "
        f"simulated nodes (default {DEFAULT_LAYOUT}); GPU nodes are NVIDIA H200s",
    )
    start.add_argument(
        "--crds",
        metavar="PATH",
        action="append",
        default=[],
        help="apply every CRD and DeviceClass in the YAML files under PATH (repeatable); "
        "return once the CRDs are Established",
    )
    start.add_argument(
        "--gateway-controllers",
        action="store_true",
        help="also run Envoy Gateway and trust-manager against the API server "
        "(their CRDs must be there, e.g. through --crds)",
    )
    stop = sub.add_parser("stop", help="stop the processes started in DIR (keeps DIR)")
    stop.add_argument("dir")
    stop.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
    sub.add_parser("bin", help="print the directory holding kube-apiserver, etcd and helm")
    args = parser.parse_args(argv)

    try:
        if args.command == "bin":
            print(resolve_bin_dir())
        elif args.command == "start":
            try:
                layout = NodeLayout.parse(args.nodes) if args.nodes is not None else None
                if layout is not None and layout.gpu:
                    hardware_dir()
            except (NodeLayoutError, HardwareMissingError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            _start(args, layout)
        elif args.command == "stop":
            env = TestEnv(args.dir)
            cluster = SimCluster(env)
            running = {**cluster.pids(), **env.pids()}
            cluster.stop(timeout=args.timeout)
            env.stop(timeout=args.timeout)
            left = {**cluster.pids(), **env.pids()}
            if left:
                print(f"still running after stop: {left}", file=sys.stderr)
                return 1
            print(f"stopped {', '.join(running) or 'nothing (not running)'}", file=sys.stderr)
    except (TestbinMissingError, TestEnvError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _start(args: argparse.Namespace, layout: NodeLayout | None) -> None:
    crds = [Path(p) for p in args.crds]
    simulated = layout is not None or bool(crds) or args.gateway_controllers
    if simulated:
        preflight(nodes=layout, crds=crds, gateway_controllers=args.gateway_controllers)
    env = TestEnv(args.dir)
    was_running = env.is_running()
    try:
        env.start(timeout=args.timeout)
        pids = env.pids()
        verb = "already running" if was_running else f"ready in {env.start_seconds:.1f}s"
        print(
            f"kube-apiserver {env.server} {verb} "
            f"(pids: kube-apiserver {pids.get('kube-apiserver')}, etcd {pids.get('etcd')})",
            file=sys.stderr,
        )
        if simulated:
            cluster = SimCluster(env).start(
                nodes=layout, crds=crds, gateway_controllers=args.gateway_controllers
            )
            print(f"simulated cluster running ({describe(cluster)})", file=sys.stderr)
    except BaseException:
        # A start that fails leaves nothing of its own running: the simulated
        # cluster stopped itself; the API server goes too, unless it was
        # running before this start and so is someone else's to stop.
        if not was_running:
            env.stop()
        raise
    print(f"export KUBECONFIG={env.kubeconfig_path}")


if __name__ == "__main__":
    sys.exit(main())
