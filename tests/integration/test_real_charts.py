"""A Managed Standard stack installed from the real charts' renders on the simulated GPU cluster.

The fixture charts elsewhere are the project's own; these are made here from
what the real upstream charts at the pins render with the values the product
composes (``../shared/fixtures/charts``: ``rendered-standard.yaml``, hooks
included, and ``crds.yaml``, what ``helm show crds`` prints), one chart per
pin whose only template emits that render, served from a loopback
repository. ``modelplane apply`` installs them onto a private simulated
cluster (kwok: two H200 nodes, one CPU node).

What the simulation cannot serve is left out of what must be Ready, and
said: kwok's pods run no process, so cert-manager's webhook answers nothing
and the API server refuses cert-manager's objects, among them the
Certificate in trust-manager's chart and the gateway's PKI; no Envoy Gateway
programs the Gateway. Everything else reaches Ready, no drift is reported
while nothing is edited, a second apply writes nothing of what is Ready,
and delete leaves neither the releases' hooks nor the fetched CRDs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from tests.integration.hubs import client_for
from tests.integration.simcluster import simulated
from tests.serving import serve_directory
from tests.shared_fixtures import charts_dir, upstream_dir
from tests.testenv import TestEnv, find_binaries, helm_environ

from modelplane.catalog.components import BY_NAME, components_of_stack
from modelplane.catalog.types import Component, CrdPlacement
from modelplane.pins import Stack

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "servingstack.yaml"
STANDARD = components_of_stack(Stack.STANDARD)
CHARTS = {c.chart.chart: c for c in STANDARD if c.chart is not None}
# What needs a running process the simulation does not have (see above).
NEEDS_A_PROCESS = {
    "trust-manager": "its chart's Certificate and Issuer need cert-manager's webhook",
    "configuration": "the gateway's PKI needs cert-manager's webhook and controller",
}
GAIE_PATHS = (
    "inference.networking.k8s.io_inferencepools.yaml",
    "inference.networking.x-k8s.io_inferenceobjectives.yaml",
    "inference.networking.x-k8s.io_inferencepools.yaml",
)

pytestmark = pytest.mark.skipif(
    not charts_dir().is_dir(),
    reason=f"the real charts' data are not at {charts_dir()} (../shared/fixtures/charts)",
)


def _as_template(render: str) -> str:
    """The render as a template that emits it unchanged: its text is no template any more
    (alert rules hold ``{{ $labels }}``), so every ``{{`` is written as one."""
    return render.replace("{{", '{{ "{{" }}')


def _real_chart(root: Path, name: str, component: Component) -> Path:
    """A chart installing what the real ``name`` at its pin rendered, its CRDs where it had them."""
    assert component.chart is not None
    data = charts_dir() / name / component.version
    meta = yaml.safe_load((data / "chart.yaml").read_text())
    chart = root / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": meta["name"],
                "version": meta["version"],
                "appVersion": str(meta.get("appVersion", meta["version"])),
            }
        )
    )
    (chart / "values.yaml").write_text("{}\n")
    render = (data / "rendered-standard.yaml").read_text()
    (chart / "templates" / "rendered.yaml").write_text(_as_template(render))
    crds = (data / "crds.yaml").read_text()
    if crds.strip():
        # In a crds subchart, as the real chart has them: Helm keeps a
        # subchart out of the release it stores, whose Secret holds 1 MiB.
        sub = chart / "charts" / "crds" if component.chart.crds is CrdPlacement.SUBCHART else chart
        if sub is not chart:
            sub.mkdir(parents=True)
            (sub / "Chart.yaml").write_text(
                yaml.safe_dump({"apiVersion": "v2", "name": "crds", "version": "0.0.0"})
            )
        (sub / "crds").mkdir()
        (sub / "crds" / "crds.yaml").write_text(crds)
    return chart


@dataclass(frozen=True)
class Served:
    charts: str
    manifests: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    helm = find_binaries()["helm"]
    home = tmp_path_factory.mktemp("real-helm-home")
    root = tmp_path_factory.mktemp("real-charts")
    out = root / "served"
    (out / "charts").mkdir(parents=True)
    for name, component in CHARTS.items():
        chart = _real_chart(root / "sources", name, component)
        subprocess.run(
            [str(helm), "package", str(chart), "--destination", str(out / "charts")],
            env=helm_environ(home), check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    gaie = BY_NAME["gaie-crds"]
    assert gaie.manifests is not None
    path = out / "manifests" / "gaie-crds" / gaie.manifests.path.format(version=gaie.version)
    path.parent.mkdir(parents=True)
    upstream = upstream_dir() / "gateway-api-inference-extension"
    path.write_text("\n---\n".join((upstream / p).read_text() for p in GAIE_PATHS))
    with serve_directory(out) as url:
        subprocess.run(
            [str(helm), "repo", "index", str(out / "charts"), "--url", f"{url}/charts"],
            env=helm_environ(home), check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        yield Served(f"{url}/charts", f"{url}/manifests")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    # Its own: the real charts' webhook configurations and CRDs are not for
    # the tests that share the session's simulated cluster.
    with simulated(tmp_path_factory.mktemp("real-sim")) as env:
        yield env


def _cli(verb: str, cluster: TestEnv, served: Served) -> subprocess.CompletedProcess[str]:
    """``modelplane <verb>`` of the example stack on ``cluster``, from the served real charts."""
    args = [
        sys.executable, "-m", "modelplane.cli.main", verb,
        "-f", str(EXAMPLE),
        "--kubeconfig", str(cluster.kubeconfig_path),
        "--chart-repository", served.charts,
        "--gaie-manifests-url", f"{served.manifests}/gaie-crds",
        "--helm-timeout", "300",
        "-o", "json",
    ]  # fmt: skip
    env = {**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=1200)


def _apply(cluster: TestEnv, served: Served) -> list[dict[str, Any]]:
    proc = _cli("apply", cluster, served)
    assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def installed(cluster: TestEnv, served: Served) -> list[dict[str, Any]]:
    return _apply(cluster, served)


def _ready_at(records: list[dict[str, Any]]) -> dict[str, float]:
    """When each component last turned ready, seconds from the start of the run."""
    out: dict[str, float] = {}
    for r in records:
        if "component" in r:
            if r["state"] == "ready":
                out[r["component"]] = r["time"]
            else:
                out.pop(r["component"], None)
    return out


def test_every_component_the_simulation_can_serve_is_ready(
    installed: list[dict[str, Any]],
) -> None:
    ready = _ready_at(installed)
    # Printed for the record: the time each component took to be Ready.
    print("ready after (s):", json.dumps(ready, sort_keys=True))
    last = {r["component"]: f"{r['state']}: {r['detail']}" for r in installed if "component" in r}
    print("last state:", json.dumps(last, indent=1, sort_keys=True))
    assert {c.name for c in CHARTS.values()} <= set(last)
    servable = set(last) - set(NEEDS_A_PROCESS)
    assert servable <= set(ready), sorted(servable - set(ready))


def test_no_drift_is_reported_while_nothing_is_edited(installed: list[dict[str, Any]]) -> None:
    events = [r["event"] for r in installed if "event" in r]
    assert not [e for e in events if e["reason"] == "ReleaseDrift"], events


def _revisions(cluster: TestEnv, home: Path) -> dict[str, str]:
    done = subprocess.run(
        [
            str(find_binaries()["helm"]), "list", "--all-namespaces", "--deployed", "-o", "json",
            "--kubeconfig", str(cluster.kubeconfig_path),
        ],
        env=helm_environ(home), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return {r["name"]: r["revision"] for r in json.loads(done.stdout)}


def test_a_second_apply_leaves_what_is_ready_alone(
    cluster: TestEnv,
    served: Served,
    installed: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    # The configuration and trust-manager are still retried (NEEDS_A_PROCESS);
    # nothing that is Ready is upgraded, restored or written again.
    ready = set(_ready_at(installed))
    revisions = _revisions(cluster, tmp_path)
    before = cluster.write_requests()
    records = _apply(cluster, served)
    drift = [r["event"] for r in records if "event" in r and r["event"]["reason"] == "ReleaseDrift"]
    assert drift == []
    acted = [
        r for r in records if r.get("component") in ready and r["state"] not in ("ready", "waiting")
    ]
    assert acted == []
    assert _revisions(cluster, tmp_path) == revisions
    # The DaemonSets and the DeviceClass are only those Ready components'.
    after = cluster.write_requests()
    grew = {
        k: v - before.get(k, 0)
        for k, v in after.items()
        if v > before.get(k, 0) and k[1] in ("daemonsets", "deviceclasses")
    }
    assert grew == {}, grew


def test_delete_leaves_only_the_crds_kept_by_design(
    cluster: TestEnv, served: Served, installed: list[dict[str, Any]], tmp_path: Path
) -> None:
    proc = _cli("delete", cluster, served)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert _revisions(cluster, tmp_path) == {}
    client = client_for(cluster)
    # gateway-helm's pre-install hooks, which Helm never uninstalls.
    hooks = [
        (MutatingWebhookConfiguration, "envoy-gateway-topology-injector.envoy-gateway-system"),
        (ClusterRole, "mp-gateway-helm-certgen:envoy-gateway-system"),
        (ClusterRoleBinding, "mp-gateway-helm-certgen:envoy-gateway-system"),
    ]
    left = [name for res, name in hooks if _exists(client, res, name)]
    assert left == []
    # The GAIE manifest's CRDs, which the product fetched and applied itself.
    crds = {c.metadata.name for c in client.list(CustomResourceDefinition) if c.metadata}
    assert not {n for n in crds if n.endswith(".inference.networking.x-k8s.io")}, sorted(crds)


def _exists(client: Client, res: Any, name: str) -> bool:
    try:
        client.get(res, name)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True
