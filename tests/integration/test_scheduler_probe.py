"""Managed KAI proven by its probe pod on the simulated cluster, and a KAI that binds nothing.

A ``kai-scheduler`` stand-in runs in the test: a thread that binds every pod
asking for ``schedulerName: kai-scheduler`` to a node through the
``pods/binding`` subresource, as a scheduler does, or, broken, binds
nothing while the fixture chart's KAI pods stay Ready (KAI-Scheduler #1536).
With it, the Managed Dynamo stack goes Ready and the version is recorded;
broken, an upgrade of KAI leaves the component Failed, Ready False with
``SchedulerNotBinding`` naming the scheduler, and the upgrade failed
(``UpToDate=False UpgradeFailed``, which pauses the rollout of its
namespace: ``plan.rollout``, tests/unit/test_scheduler_probe.py). Teardown
removes the probe pod and leaves the session's cluster as it found it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Event, Node, Pod
from tests.integration.hubs import Harness
from tests.integration.substrate import EXTRA_VERSIONS, Substrate
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.catalog.components import kai_scheduler
from modelplane.catalog.configuration import KAI_PROBE_QUEUE
from modelplane.plan import scheduler_probe as sp

QUEUE = create_global_resource("scheduling.run.ai", "v2", "Queue", "queues")
PIN = kai_scheduler.VERSION
NEWER = EXTRA_VERSIONS["kai-scheduler"][0]
# Short, so the broken upgrade fails within the test; the default is 2m.
BOUND = "15s"


class StandInScheduler:
    """Binds the pods that ask for kai-scheduler, while ``binds`` is set; a thread of its own."""

    def __init__(self, env: TestEnv, target: Client) -> None:
        self.env, self.target = env, target
        self.binds = True
        self.bound: list[str] = []
        # What stopped a pass, if anything: said by the test, never swallowed.
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInScheduler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        # A scheduler's loop, not a test's wait: it looks for work a few times a second.
        while not self._stop.wait(0.2):
            if self.binds:
                try:
                    self._bind_pending()
                except (ApiError, httpx2.HTTPError) as err:  # tried again next pass
                    self.errors.append(str(err))

    def _bind_pending(self) -> None:
        fields = {"spec.schedulerName": kai_scheduler.SCHEDULER_NAME, "spec.nodeName": ""}
        pending = list(self.target.list(Pod, namespace="*", fields=fields))
        if not pending:
            return
        nodes = [n for n in self.target.list(Node) if not (n.spec and n.spec.unschedulable)]
        node = nodes[0].metadata.name if nodes and nodes[0].metadata else None
        for pod in pending:
            meta = pod.metadata
            if meta is None or node is None:
                continue
            # As a scheduler binds: a Binding posted to the pod's subresource
            # (lightkube reads the Status it answers as a Binding, and fails).
            with self.env.http_client() as http:
                answer = http.post(
                    f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/binding",
                    json={
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": meta.name, "namespace": meta.namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    },
                )
            if answer.status_code >= 300:
                self.errors.append(f"{meta.name}: {answer.status_code} {answer.text[:200]}")
                continue
            self.bound.append(f"{meta.namespace}/{meta.name}")


def _probe_pod(target: Client) -> Any:
    with contextlib.suppress(ApiError):
        return target.get(Pod, sp.POD_NAME, namespace=sp.POD_NAMESPACE)
    return None


def _component(h: Harness, name: str) -> dict[str, Any]:
    return next(c for c in h.status().get("components", []) if c["name"] == name)


@contextlib.contextmanager
def _stack(h: Harness) -> Iterator[None]:
    try:
        yield
    finally:
        try:
            h.tear_down(deadline=300)
            # Teardown took the probe pod, pending when it began.
            assert _probe_pod(h.target) is None
        finally:
            h.stop()


def test_kai_is_proven_by_its_probe_and_a_kai_that_binds_nothing_fails_its_upgrade(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
) -> None:
    h = Harness(hub, hub_env, sim_nodes_target, workload_substrate, tmp_path, "sim-probe")
    probe_pod = f"{sp.POD_NAMESPACE}/{sp.POD_NAME}"
    with StandInScheduler(sim_nodes_target, h.target) as scheduler, _stack(h):
        h.put_secret({"kubeconfig": h.kubeconfig_text()})
        h.create({"stack": "Dynamo"})
        h.start("--scheduler-probe-timeout", BOUND)
        h.wait_condition("Ready", "True", deadline=600)
        # Ready came once the scheduler bound the probe: its version is
        # recorded on the probe queue, and the pod is gone.
        assert probe_pod in scheduler.bound, scheduler.errors
        annotations = h.target.get(QUEUE, KAI_PROBE_QUEUE).metadata.annotations or {}
        assert annotations.get(sp.PROVEN_ANNOTATION) == PIN
        wait_for("the bound probe pod deleted", lambda: _probe_pod(h.target) is None, deadline=30)

        # The scheduler's pods stay Ready; it binds nothing from now on.
        scheduler.binds = False
        h.create({"stack": "Dynamo", "dynamo": {"kaiScheduler": NEWER}})
        ready = h.wait_condition("Ready", "False", "SchedulerNotBinding", deadline=300)
        assert "the scheduler kai-scheduler v" in ready["message"]
        assert "did not bind the probe pod" in ready["message"]
        kai = _component(h, "kai-scheduler")
        assert kai["state"] == "Failed"
        assert "kai-scheduler" in kai["message"] and BOUND in kai["message"]
        # Helm did upgrade it: the probe is of the new version, left pending.
        pod = _probe_pod(h.target)
        assert pod is not None and not pod.spec.nodeName
        assert pod.metadata.annotations[sp.VERSION_ANNOTATION] == NEWER
        # A failed upgrade to the rollout: what pauses its namespace.
        up = h.wait_condition("UpToDate", "False", "UpgradeFailed", deadline=60)
        assert "did not bind" in up["message"]
        events = [e for e in h.hub.list(Event, namespace=h.ns) if e.reason == "SchedulerNotBinding"]
        assert events and events[0].type == "Warning"
        annotations = h.target.get(QUEUE, KAI_PROBE_QUEUE).metadata.annotations or {}
        assert annotations.get(sp.PROVEN_ANNOTATION) == PIN
