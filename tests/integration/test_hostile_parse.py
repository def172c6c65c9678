"""A target's YAML that is slow to parse, or that no constructor builds, holds nothing up.

Against a real hub and target API server. The Provided advisory parses the
ConfigMap ``envoy-gateway-config`` of Envoy Gateway's namespace each
reconcile, and whoever installed Envoy Gateway there (a tenant of the
cluster, as far as the operator knows) writes it. Parsing a MiB of YAML in the
pure-Python parser takes seconds; on the event loop it stalled the leader
Lease's renewal and ``/healthz`` (seen live: 8 of a minute's probes
failed). A date that is no date (``2001-13-01``) failed every reconcile. A release's
stored manifest over the parse's bound was skipped with a log line alone.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions, forget_release_records
from tests.integration.substrate import provide_substrate
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.plan.manifest import MANIFEST_LIMITS

HARNESS = HarnessOptions(prefix="hp", kubeconfig_secret=True)
TENANT = catalog.BY_NAME["envoy-gateway"].namespace
WHERE = f"ConfigMap {TENANT}/envoy-gateway-config key envoy-gateway.yaml"
# A probe slower than this fails a kubelet's default timeoutSeconds (1).
PROBE_TIMEOUT = 1.0
# The resyncs probed through: each parses the whole ConfigMap again.
RESYNCS = 3


def _cpu_seconds(h: Harness) -> float:
    """CPU time the operator process has used, user and system."""
    assert h.proc is not None
    fields = Path(f"/proc/{h.proc.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slow_yaml(size: int = 900 * 1024) -> str:
    """About ``size`` bytes of ordinary YAML: one mapping of many short keys, seconds to parse.

    It opens with a date that is no date, which PyYAML's own constructor
    raised on, failing the whole reconcile.
    """
    lines = ["a: 2001-13-01", "extensionManager:"]
    total, i = 0, 0
    while total < size:
        line = f"  k{i}: v{i}"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def test_a_slow_tenant_configmap_is_a_warning_and_healthz_answers_meanwhile(
    harness: Harness,
) -> None:
    text = slow_yaml()
    assert 850 * 1024 < len(text) < 1024 * 1024
    provide_substrate(harness.target)
    if not any(n.metadata and n.metadata.name == TENANT for n in harness.target.list(Namespace)):
        harness.target.create(Namespace.from_dict({"metadata": {"name": TENANT}}))
    harness.target.create(
        ConfigMap.from_dict(
            {
                "metadata": {"name": "envoy-gateway-config", "namespace": TENANT},
                "data": {"envoy-gateway.yaml": text},
            }
        )
    )
    harness.create({"components": "Provided"})
    harness.start("--resync", "2")
    met = harness.wait_condition("RequirementsMet", "True", deadline=180)
    # Parsed and judged: the wiring is not what the spec asks, which is a
    # warning naming the ConfigMap, not a failed reconcile.
    assert WHERE in met["message"], met
    assert harness.condition("Ready").get("reason") != "ReconcileError"

    assert harness.health_port is not None
    busy = _cpu_seconds(harness)
    floor = harness.reconciles() + RESYNCS
    probes = 0
    # Probed as a kubelet probes, with its timeout: a probe that waits for
    # a parse raises, and fails the test.
    with httpx2.Client(trust_env=False, timeout=PROBE_TIMEOUT) as http:

        def probed_through_the_resyncs() -> bool:
            nonlocal probes
            response = http.get(f"http://127.0.0.1:{harness.health_port}/healthz")
            probes += 1
            assert response.status_code == 200, response.text
            return harness.reconciles() >= floor

        wait_for(f"{RESYNCS} resyncs, probed throughout", probed_through_the_resyncs, deadline=120)
    busy = _cpu_seconds(harness) - busy
    # The operator worked while the probes ran (each resync parses the
    # whole ConfigMap again: 3 s of CPU on an idle core), and every probe
    # was answered meanwhile.
    assert busy >= 1.0, f"the operator used {busy:.1f} s of CPU over {probes} probes"
    assert harness.proc is not None and harness.proc.poll() is None, "the operator died"
    log = harness.log.read_text()
    assert "ReconcileError" not in log
    assert "k4000: v4000" not in log


def _component(h: Harness, name: str) -> dict[str, Any]:
    return next((c for c in h.status().get("components", []) if c["name"] == name), {})


def _inflate_stored_manifest(h: Harness, namespace: str, release: str) -> str:
    """Pad the deployed revision's stored manifest past the bound a stored manifest is read
    under (gzip keeps the Secret small)."""
    (secret,) = [
        s
        for s in h.target.list(
            Secret, namespace=namespace, labels={"owner": "helm", "name": release}
        )
        if s.metadata is not None and (s.metadata.labels or {}).get("status") == "deployed"
    ]
    assert secret.metadata is not None and secret.data is not None
    stored = base64.b64decode(base64.b64decode(secret.data["release"]))
    doc = json.loads(gzip.decompress(stored))
    doc["manifest"] += "# " + "x" * (MANIFEST_LIMITS.max_bytes + 1024) + "\n"
    packed = base64.b64encode(gzip.compress(json.dumps(doc).encode()))
    h.target.patch(
        Secret,
        str(secret.metadata.name),
        {"data": {"release": base64.b64encode(packed).decode()}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    return str((secret.metadata.labels or {}).get("version"))


def test_a_stored_manifest_over_the_bound_is_said_in_the_components_status(
    harness: Harness,
) -> None:
    component = catalog.BY_NAME["trust-manager"]
    harness.create({})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    # Without the hub's record of the revision (a stack an older operator
    # managed), the stored manifest is read as found: this is the bound that
    # holds then. With the record, the rewrite is tampering, said as such
    # (tests/integration/test_release_records.py).
    harness.stop()
    forget_release_records(harness)
    revision = _inflate_stored_manifest(harness, component.namespace, component.release_name)
    harness.start("--resync", "2")
    said = (
        f"release {component.release_name} revision {revision}: its stored manifest is "
        "refused, so its workloads are not judged: "
    )
    wait_for(
        "the refusal in the component's status",
        lambda: said in _component(harness, component.name).get("message", ""),
        deadline=60,
    )
    shown = _component(harness, component.name)
    assert f"over the limit of {MANIFEST_LIMITS.max_bytes}" in shown["message"], shown
    assert "xxxx" not in shown["message"]
    # Nothing installed is lost: the release is not upgraded or reinstalled.
    assert str(harness.helm_releases()[component.release_name]["revision"]) == revision


def test_a_kubeconfig_whose_context_looks_like_a_date_connects(harness: Harness) -> None:
    # Seen live: "ReconcileError: ValueError: month must be in 1..12", on
    # every reconcile, for a context a hub user named 2001-13-01.
    config = dict(harness.target_env.kubeconfig)
    name = config["current-context"]
    config["current-context"] = "DATE"
    config["contexts"] = [
        {**c, "name": "DATE"} if c.get("name") == name else c for c in config["contexts"]
    ]
    text = yaml.safe_dump(config).replace("DATE", "2001-13-01")
    assert "current-context: 2001-13-01\n" in text  # unquoted, as a person writes it
    harness.put_secret({"kubeconfig": text})
    provide_substrate(harness.target)
    harness.create({"components": "Provided"})
    harness.start("--resync", "2")
    harness.wait_condition("RequirementsMet", "True", deadline=120)
    assert harness.condition("Ready").get("reason") != "ReconcileError"
    assert "ValueError" not in harness.log.read_text()
