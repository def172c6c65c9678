"""Benchmark: what ``modelplane diff`` costs against a target with every release installed.

Starts a hub and a target (kube-apiserver + etcd, ``tests.testenv``), serves
the fixture charts on loopback, lets the operator install the default
Managed stack and stops it; then runs ``diff`` in-process N times for the
converged stack (nothing to render, nothing to dry-run) and N times for a
pin change (one ``helm template``), and prints the median wall time and the
requests the target's API server counted per run (``apiserver_request_total``,
by verb, dry runs apart), and that none of them wrote.

    python bench/bench_diff.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import Harness, client_for, install_servingstack_crd, stack_body
from tests.integration.substrate import EXTRA_VERSIONS, Helm, serve_substrate
from tests.testenv import TestEnv, find_binaries

from modelplane.api.models import ServingStack
from modelplane.cli.diff import read_diff
from modelplane.cli.options import target_options
from modelplane.cli.target import on_target, read_target
from modelplane.operator.options import OperatorOptions

NAMESPACE = "bench-diff"


def requests(env: TestEnv) -> Counter[str]:
    """Requests served so far by verb (dry runs apart), the server's own Lease renewals left out.

    Paths that are not resources (discovery, /version, /metrics) count as
    "GET (other)".
    """
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(env.metrics_text()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total" or labels.get("resource") == "leases":
                continue
            verb = labels.get("verb", "")
            if not labels.get("resource"):
                verb += " (other)"
            out[f"{verb} (dry run)" if labels.get("dry_run") else verb] += int(sample.value)
    return out


def measure(
    env: TestEnv, stack: ServingStack, options: OperatorOptions, runs: int
) -> dict[str, Any]:
    flags = target_options(env.kubeconfig_path)
    target = read_target(flags)
    times: list[float] = []
    per_run: list[Counter[str]] = []
    changes = None
    for _ in range(runs):
        before = requests(env)
        t0 = time.perf_counter()
        d = on_target(target.server, read_diff(target, flags, stack, options.sources(), 10.0))
        times.append(time.perf_counter() - t0)
        after = requests(env)
        served = after - before
        # The "before" scrape of /metrics is counted by the time "after" reads.
        served["GET (other)"] -= 1
        per_run.append(+served)
        changes = d.changes
    last = per_run[-1]
    writes = sum(
        n
        for verb, n in last.items()
        if "dry run" not in verb and verb.split(" ")[0] not in {"GET", "LIST", "WATCH"}
    )
    return {
        "median_ms": statistics.median(times) * 1000,
        "min_ms": min(times) * 1000,
        "requests": sum(last.values()),
        "by_verb": dict(sorted(last.items())),
        "writes": writes,
        "changes": changes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    helm_binary = find_binaries()["helm"]
    os.environ["MODELPLANE_HELM"] = str(helm_binary)
    with tempfile.TemporaryDirectory(prefix="modelplane-bench-") as name:
        tmp = Path(name)
        hub_env, target_env = TestEnv(tmp / "hub"), TestEnv(tmp / "target")
        hub_env.start()
        target_env.start()
        substrates = serve_substrate(Helm(helm_binary, tmp / "helm-home"), tmp / "substrate")
        try:
            substrate = next(substrates)
            hub = client_for(hub_env)
            install_servingstack_crd(hub, hub_env, deadline=60)
            h = Harness(hub, hub_env, target_env, substrate, tmp, NAMESPACE)
            t0 = time.perf_counter()
            try:
                h.put_secret({"kubeconfig": h.kubeconfig_text()})
                h.create({})
                h.start()
                h.wait_condition("Ready", "True", deadline=600)
            finally:
                h.stop()
            installed_s = time.perf_counter() - t0
            releases = len([r for r in h.helm_releases() if r.startswith("mp-")])
            options = OperatorOptions(
                chart_repository=substrate.chart_repository,
                gaie_manifests_url=f"{substrate.manifests_base}/gaie-crds",
                manifests_url_for={
                    "modelexpress-crds": f"{substrate.manifests_base}/modelexpress-crds"
                },
            )
            pin = {"versions": {"prometheus": EXTRA_VERSIONS["kube-prometheus-stack"][0]}}
            outcomes = {
                label: measure(
                    target_env,
                    ServingStack.model_validate(stack_body(NAMESPACE, "stack", spec)),
                    options,
                    args.runs,
                )
                for label, spec in (("converged", {}), ("pin change", pin))
            }
        finally:
            substrates.close()
            target_env.stop()
            hub_env.stop()
    if args.json:
        print(json.dumps({"releases": releases, "outcomes": outcomes}, indent=2))
        return 0
    print(
        f"modelplane diff against a target with {releases} releases installed "
        f"(installed in {installed_s:.0f} s), {args.runs} runs each, kube-apiserver on loopback"
    )
    print(f"{'case':12} {'median ms':>9} {'min ms':>7} {'requests':>8} {'writes':>6}  by verb")
    for label, o in outcomes.items():
        verbs = ", ".join(f"{n} {v}" for v, n in o["by_verb"].items())
        print(
            f"{label:12} {o['median_ms']:>9.0f} {o['min_ms']:>7.0f} {o['requests']:>8} "
            f"{o['writes']:>6}  {verbs}"
        )
    if any(o["writes"] for o in outcomes.values()):
        print("error: diff wrote to the target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
