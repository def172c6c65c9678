"""The operator rolls the DRA kubelet plugin a GPU node at a time, proven by watching.

A simulated cluster of this module's own, four GPU nodes and a CPU node,
and the operator running a Managed Standard stack on it. The fixture chart
of the DRA driver renders ``kubeletPlugin.updateStrategy`` as the real one
does (the product composes OnDelete) and its versions run plugin images of
their own version, so each upgrade changes the plugin DaemonSet's template.
A plugin stand-in (``kubelet_plugin.PluginStandIn``) publishes a node's
ResourceSlice while the plugin's pod there is Ready; version ``BAD`` never
publishes on ``FAIL_NODE``. ``PluginWatch`` watches the plugin's pods and
the slices throughout, so what is asserted is what the cluster showed, not
what the operator says it did.

One install, two upgrades: to ``BAD`` (the roll stops at ``FAIL_NODE`` and
the nodes after it keep their old pods), then to ``GOOD`` with a pod holding
an allocated claim terminating on ``CLAIM_NODE`` (that node waits for it;
the roll then completes and the stack is Ready).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.types import PatchType
from tests.integration.hubs import Harness
from tests.integration.kubelet_plugin import (
    DRIVER,
    PluginStandIn,
    PluginWatch,
    image_tag,
)
from tests.integration.simcluster import gpu_claim_and_pod, simulated
from tests.integration.substrate import EXTRA_VERSIONS, Substrate
from tests.testenv import TestEnv
from tests.testenv.nodes import NodeLayout
from tests.waiting import gone, wait_for

from modelplane.catalog.components._common import GPUS
from modelplane.vocabulary import BlockedReason

LAYOUT = NodeLayout.parse("gpu=4,cpu=1")
GPU_NODES = [name for name, gpu in LAYOUT.names() if gpu]
PIN = DRIVER.version
BAD, GOOD = EXTRA_VERSIONS[DRIVER.name]
FAIL_NODE = GPU_NODES[1]
CLAIM_NODE = GPU_NODES[3]
MAX_UNAVAILABLE = 1  # the operator's default --node-agent-max-unavailable
NODE_TIMEOUT = "6s"  # --node-agent-timeout: how long FAIL_NODE is waited for
HUB_NS = "t-node-agent-roll"
TENANT = "team-a"
HOLD = "test.modelplane.ai/hold"  # keeps the claim's pod Terminating until removed
CLAIMS = create_namespaced_resource("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")


def _bad_on_one_node(node: str, image: str) -> bool:
    return node == FAIL_NODE and image.endswith(f":{image_tag(BAD)}")


@dataclass
class Cluster:
    h: Harness
    watch: PluginWatch
    standin: PluginStandIn

    def set_version(self, version: str) -> None:
        self.h.create({"versions": {"nvidiaDraDriver": version}})

    def check(self) -> None:
        self.watch.check()
        self.standin.check()

    def detail(self) -> str:
        """What a wait that timed out shows: the plugin's pods, the stack, the operator's log."""
        return (
            f"plugin pods: {_images(self)}\nwithout a plugin: {self.watch.without()}\n"
            f"Ready: {self.h.condition('Ready')}\n{DRIVER.name}: {_component_message(self.h)}\n"
            f"operator log tail:\n{self.h.log.read_text()[-4000:]}"
        )


@pytest.fixture(scope="module")
def cluster(
    hub: Client,
    hub_env: TestEnv,
    workload_substrate: Substrate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    """The stack Ready at the pin, on this module's simulated cluster, its plugin watched."""
    tmp = tmp_path_factory.mktemp("node-agent-roll")
    with (
        simulated(tmp / "target", nodes=str(LAYOUT)) as env,
        PluginStandIn(env, GPU_NODES, _bad_on_one_node) as standin,
        PluginWatch(env, GPU_NODES) as watch,
    ):
        h = Harness(hub, hub_env, env, workload_substrate, tmp, HUB_NS)
        try:
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
            h.create({"versions": {"nvidiaDraDriver": PIN}})
            h.start("--node-agent-timeout", NODE_TIMEOUT)
            h.wait_condition("Ready", "True", deadline=300)
            yield Cluster(h, watch, standin)
        finally:
            h.stop()
            # The stack's finalizer stays (nothing tears it down): the
            # namespace is this module's alone, and its target is gone.
            with contextlib.suppress(ApiError):
                hub.delete(Namespace, HUB_NS)


def _images(c: Cluster) -> dict[str, list[tuple[str, str]]]:
    """Per GPU node, (uid, image tag) of its plugin pods."""
    return {
        n: [(p.uid, p.image.rsplit(":", 1)[-1]) for p in pods]
        for n, pods in c.watch.pods_by_node().items()
    }


def test_a_plugin_failing_on_a_node_stops_the_roll_there(cluster: Cluster) -> None:
    c = cluster
    wait_for(f"every GPU node serving plugin {PIN}", lambda: c.watch.rolled(PIN), deadline=60)
    before = _images(c)
    c.watch.reset()
    c.set_version(BAD)
    ready = c.h.wait_condition("Ready", "False", BlockedReason.NODE_AGENT_FAILED, deadline=120)
    c.check()
    assert FAIL_NODE in ready["message"], ready
    after = _images(c)
    # Rolled up to the failing node: the one before it runs BAD, FAIL_NODE
    # runs BAD and publishes nothing, the nodes after it were never touched.
    assert [t for _, t in after[GPU_NODES[0]]] == [image_tag(BAD)], after
    assert [t for _, t in after[FAIL_NODE]] == [image_tag(BAD)], after
    for node in GPU_NODES[2:]:
        assert after[node] == before[node], (node, before, after)
    assert c.watch.without() == [FAIL_NODE]
    assert len(c.watch.worst) <= MAX_UNAVAILABLE, c.watch.worst
    assert c.watch.seen > 0


def _reserved(target: Client) -> bool:
    status = target.get(CLAIMS, "gpu", namespace=TENANT).to_dict().get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return any(r.get("driver") == GPUS.driver for r in results) and bool(status.get("reservedFor"))


def _terminating_claim_pod(target: Client) -> None:
    """A pod holding a claim the real scheduler allocated on CLAIM_NODE, left Terminating."""
    target.apply(Namespace.from_dict({"metadata": {"name": TENANT}}))
    claim, pod = gpu_claim_and_pod(TENANT, "worker-0", node=CLAIM_NODE, finalizers=[HOLD])
    target.create(CLAIMS.from_dict(claim))
    target.create(Pod.from_dict(pod))
    wait_for("the claim allocated and reserved", lambda: _reserved(target), deadline=60)
    target.delete(Pod, "worker-0", namespace=TENANT)


def _release_claim_pod(target: Client) -> None:
    target.patch(
        Pod,
        "worker-0",
        {"metadata": {"finalizers": None}},
        namespace=TENANT,
        patch_type=PatchType.MERGE,
    )
    wait_for("the claim's pod gone", lambda: gone(target, Pod, "worker-0", TENANT), deadline=60)


def _others_rolled(c: Cluster) -> bool:
    images = _images(c)
    return not [n for n in c.watch.without() if n != CLAIM_NODE] and all(
        [t for _, t in images[n]] == [image_tag(GOOD)] for n in GPU_NODES if n != CLAIM_NODE
    )


def _naming(message: str, node: str) -> str:
    """``message`` if it names ``node``, else nothing (for ``wait_for``)."""
    return message if node in message else ""


def _component_message(h: Harness) -> str:
    found = [c for c in h.status().get("components") or [] if c.get("name") == DRIVER.name]
    return str(found[0].get("message", "")) if found else ""


def test_a_working_plugin_completes_the_roll_after_a_node_s_claims(cluster: Cluster) -> None:
    c = cluster
    target = c.h.target
    _terminating_claim_pod(target)
    before = _images(c)
    c.watch.reset()
    c.set_version(GOOD)
    wait_for(
        "every node but the claim's rolled",
        lambda: _others_rolled(c),
        deadline=120,
        detail=c.detail,
    )
    # CLAIM_NODE waits for the pod holding its claim: its plugin pod is the one before.
    message = wait_for(
        "the stack saying why the claim's node waits",
        lambda: _naming(_component_message(c.h), CLAIM_NODE),
        deadline=30,
        detail=c.detail,
    )
    assert f"{TENANT}/worker-0" in message, message
    assert _images(c)[CLAIM_NODE] == before[CLAIM_NODE]
    _release_claim_pod(target)
    wait_for(
        f"every GPU node serving plugin {GOOD}",
        lambda: c.watch.rolled(GOOD),
        deadline=60,
        detail=c.detail,
    )
    c.h.wait_condition("Ready", "True", deadline=60)
    c.check()
    assert len(c.watch.worst) <= MAX_UNAVAILABLE, c.watch.worst
