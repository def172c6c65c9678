"""The operator's own CRD upgrades with the operator, from the chart as it stood at 55f56f0.

Helm installs a chart's ``crds/`` once and never upgrades or deletes them, so
``helm upgrade`` of the operator alone leaves the hub serving the old
ServingStack schema, and the API server prunes every new status field as the
new operator writes it. The operator brings the CRD to its own at start.

``tests/fixtures/operator-chart/modelplane-0.1.0-at-55f56f0.tgz`` is
``helm package`` of ``deploy/chart`` at commit 55f56f0: its CRD came from
``crds/`` and has no Helm ownership metadata, as on every hub installed from
it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from tests.integration.conftest import Helm
from tests.integration.hubs import (
    SS,
    client_for,
    crd_established,
    ensure_namespace,
    free_port,
    private_env,
    put_stack,
    stack_body,
)
from tests.integration.substrate import Substrate, run_operator
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.api.crd import servingstack_crd
from modelplane.api.models import API_GROUP, PLURAL
from modelplane.wire import DIGEST_ANNOTATION, FIELD_MANAGER

OLD_CHART = (
    Path(__file__).parents[1] / "fixtures" / "operator-chart" / "modelplane-0.1.0-at-55f56f0.tgz"
)
CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart"
NAME = f"{PLURAL}.{API_GROUP}"
STACKS = "stacks"
NO_SUBSTRATE = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", Path("/"))


@pytest.fixture
def fresh_hub(tmp_path: Path) -> Iterator[TestEnv]:
    with private_env(tmp_path / "hub") as env:
        yield env


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def _live(hub: Client) -> dict[str, Any]:
    return dict(hub.get(CustomResourceDefinition, NAME).to_dict())


class Operator:
    def __init__(self, env: TestEnv, tmp: Path) -> None:
        self.env, self.tmp, self.port = env, tmp, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Operator:
        self.proc = run_operator(
            self.env.kubeconfig_path,
            NO_SUBSTRATE,
            STACKS,
            self.tmp / f"operator-{self.port}.log",
            "--health-port",
            str(self.port),
        )
        return self

    def __exit__(self, *_: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def readyz(self) -> httpx2.Response | None:
        try:
            with httpx2.Client(trust_env=False, timeout=2) as http:
                return http.get(f"http://127.0.0.1:{self.port}/readyz")
        except httpx2.HTTPError:
            return None

    def wait_ready(self) -> None:
        wait_for(
            "the operator ready",
            lambda: (r := self.readyz()) is not None and r.status_code == 200,
            deadline=60,
            detail=self.log,
        )

    def log(self) -> str:
        return (self.tmp / f"operator-{self.port}.log").read_text(errors="replace")


def test_a_helm_upgrade_from_the_chart_at_55f56f0_brings_the_new_crd_and_keeps_every_stack(
    fresh_hub: TestEnv, helm: Helm, tmp_path: Path
) -> None:
    hub = client_for(fresh_hub)
    on_hub = ["--kubeconfig", str(fresh_hub.kubeconfig_path), "--namespace", "mp"]
    watch = ["--set", f"watchNamespaces={{{STACKS}}}"]
    ensure_namespace(hub, STACKS)
    helm.run("install", "mp", str(OLD_CHART), *on_hub, "--create-namespace", *watch)
    wait_for("the old chart's CRD established", lambda: crd_established(hub, NAME), deadline=30)
    old = _live(hub)
    assert "target" not in _schema(old)["properties"]["status"]["properties"]
    assert "meta.helm.sh/release-name" not in (old["metadata"].get("annotations") or {})
    put_stack(hub, stack_body(STACKS, "before"))

    # Helm alone: the upgrade goes through, and the hub keeps the old schema.
    helm.run("upgrade", "mp", str(CHART), *on_hub, *watch)
    assert _schema(_live(hub)) == _schema(old)

    with Operator(fresh_hub, tmp_path) as operator:
        operator.wait_ready()
        upgraded = _live(hub)
    assert _schema(upgraded) == _schema(servingstack_crd())
    assert DIGEST_ANNOTATION in upgraded["metadata"]["annotations"]
    assert FIELD_MANAGER in {m["manager"] for m in upgraded["metadata"]["managedFields"]}
    assert hub.get(SS, "before", namespace=STACKS).metadata.name == "before"

    # A second start finds its own digest: one GET, no write.
    with Operator(fresh_hub, tmp_path) as operator:
        operator.wait_ready()
    again = _live(hub)
    assert again["metadata"]["resourceVersion"] == upgraded["metadata"]["resourceVersion"]

    # Neither Helm nor the operator deletes the CRD: uninstall keeps every stack.
    helm.run("uninstall", "mp", *on_hub)
    assert _live(hub)["metadata"]["uid"] == old["metadata"]["uid"]
    assert hub.get(SS, "before", namespace=STACKS).metadata.name == "before"


def test_a_crd_that_still_stores_a_dropped_version_is_left_as_it_is_and_named(
    fresh_hub: TestEnv, tmp_path: Path
) -> None:
    hub = client_for(fresh_hub)
    older = servingstack_crd()
    (version,) = older["spec"]["versions"]
    older["spec"]["versions"] = [{**version, "name": "v1alpha0"}]
    hub.apply(CustomResourceDefinition.from_dict(older), field_manager="owner")
    wait_for("the older CRD established", lambda: crd_established(hub, NAME), deadline=30)
    stored = _live(hub)
    assert stored["status"]["storedVersions"] == ["v1alpha0"]

    with Operator(fresh_hub, tmp_path) as operator:

        def refused() -> str | None:
            answer = operator.readyz()
            if answer is None or answer.status_code != 503 or "v1alpha0" not in answer.text:
                return None
            return answer.text

        detail = wait_for("readyz naming the CRD", refused, deadline=60, detail=operator.log)
    assert NAME in detail
    assert "migrate the stored objects" in detail
    assert _live(hub)["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
