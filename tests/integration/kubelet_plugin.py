"""The NVIDIA DRA driver's kubelet plugin on a simulated cluster: a stand-in, and a watch of it.

kwok runs the plugin's pods and nothing in them, so nothing publishes a
node's ResourceSlice. ``PluginStandIn`` does the part of the plugin the
operator's node-by-node roll depends on: while the plugin's pod on a GPU
node is Ready, and not being deleted, the node's ResourceSlice
(``tests.testenv.nodes.resource_slice``) is published; once it is not, the
slice is withdrawn. A plugin image ``fails`` on a node never publishes
there. The slices the simulated cluster published at its start are taken
over: withdrawn until a plugin pod runs on their node.

``PluginWatch`` counts, from what the API server shows (the plugin's pods
and the driver's slices, each watched), how many GPU nodes were at once
without a serving plugin: a Ready pod there and the node's slice published.
Neither reads the operator's plan or its events.

Both watch by the API's own list-then-watch, in windows of a second, so a
thread stops within one of being told to.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from tests.testenv import TestEnv
from tests.testenv.nodes import h200, resource_slice

from modelplane.catalog import components as catalog

DRIVER = catalog.BY_NAME["nvidia-dra-driver-gpu"]
assert DRIVER.node_agent is not None
PLUGIN_DAEMON_SET = DRIVER.node_agent.daemon_set
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
PODS_PATH = f"/api/v1/namespaces/{DRIVER.namespace}/pods"
# The plugin's pods (the stand-in chart labels its pods with the DaemonSet's name).
PLUGIN_SELECTOR = f"app.kubernetes.io/name={PLUGIN_DAEMON_SET}"
PLUGIN_CONTAINER = "gpus"
WATCH_WINDOW = "1"  # seconds: how soon a watching thread sees it was told to stop

Objects = dict[str, dict[str, Any]]


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


class Watched:
    """One collection, listed then watched in a thread; ``changed`` called after each change."""

    def __init__(
        self,
        env: TestEnv,
        path: str,
        params: dict[str, str],
        changed: Callable[[Objects], None],
    ) -> None:
        self.env, self.path, self.params, self.changed = env, path, params, changed
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def check(self) -> None:
        """Raise what ended the watch, if something did."""
        if self.error is not None:
            raise AssertionError(f"the watch of {self.path} failed: {self.error!r}")

    def _run(self) -> None:
        try:
            with self.env.http_client(timeout=30) as http:
                while not self._stop.is_set():
                    self._list_and_watch(http)
        except BaseException as err:  # reported by check(), in the test's thread
            self.error = err

    def _list_and_watch(self, http: httpx2.Client) -> None:
        listed = http.get(self.path, params=self.params)
        listed.raise_for_status()
        body = listed.json()
        objects: Objects = {_name(o): o for o in body.get("items") or []}
        self.changed(dict(objects))
        version = str(body["metadata"]["resourceVersion"])
        while not self._stop.is_set():
            found = self._window(http, objects, version)
            if found is None:
                return  # expired: list again
            version = found

    def _window(self, http: httpx2.Client, objects: Objects, version: str) -> str | None:
        params = {
            **self.params,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": WATCH_WINDOW,
        }
        with http.stream("GET", self.path, params=params) as resp:
            if resp.status_code == 410:
                return None
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    return None
                version = str(obj["metadata"]["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    objects.pop(_name(obj), None)
                else:
                    objects[_name(obj)] = obj
                self.changed(dict(objects))
        return version


@dataclass(frozen=True)
class PluginPod:
    name: str
    uid: str
    node: str
    image: str
    ready: bool
    deleting: bool

    @property
    def serving(self) -> bool:
        return self.ready and not self.deleting


def plugin_pods(pods: Objects) -> list[PluginPod]:
    """The plugin's pods that are on a node."""
    out = []
    for pod in pods.values():
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        image = next(
            (c["image"] for c in spec.get("containers") or [] if c["name"] == PLUGIN_CONTAINER), ""
        )
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        out.append(
            PluginPod(
                meta["name"], meta["uid"], node, image, ready, bool(meta.get("deletionTimestamp"))
            )
        )
    return out


def image_tag(version: str) -> str:
    """The plugin image's tag at a chart version (the stand-in's appVersion follows the chart)."""
    return f"v{version}"


class PluginStandIn:
    """Publishes a GPU node's ResourceSlice while the plugin's pod there is Ready.

    ``fails(node, image)``: whether the plugin of that image never publishes
    on that node (a plugin version that breaks on one node).
    """

    def __init__(
        self,
        env: TestEnv,
        gpu_nodes: list[str],
        fails: Callable[[str, str], bool] = lambda node, image: False,
    ) -> None:
        self.env, self.gpu_nodes, self.fails = env, gpu_nodes, fails
        self.published: set[str] = set()
        self._lock = threading.Lock()
        self._http = env.http_client()
        self._watch = Watched(env, PODS_PATH, {"labelSelector": PLUGIN_SELECTOR}, self._changed)

    def __enter__(self) -> PluginStandIn:
        # Take over what the simulated cluster published at its start.
        listed = self._http.get(SLICES_PATH, params={"fieldSelector": _driver_field()})
        listed.raise_for_status()
        self.published = {
            str(s["spec"]["nodeName"])
            for s in listed.json().get("items") or []
            if s["spec"].get("nodeName") in self.gpu_nodes
        }
        self._watch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()
        self._http.close()

    def check(self) -> None:
        self._watch.check()

    def _changed(self, pods: Objects) -> None:
        serving = {
            p.node for p in plugin_pods(pods) if p.serving and not self.fails(p.node, p.image)
        }
        with self._lock:
            for node in self.gpu_nodes:
                if node in serving and node not in self.published:
                    self._publish(node)
                elif node not in serving and node in self.published:
                    self._withdraw(node)

    def _publish(self, node: str) -> None:
        resp = self._http.post(SLICES_PATH, json=resource_slice(node, h200()))
        if resp.status_code not in (201, 409):
            resp.raise_for_status()
        self.published.add(node)

    def _withdraw(self, node: str) -> None:
        name = resource_slice(node, h200())["metadata"]["name"]
        resp = self._http.delete(f"{SLICES_PATH}/{name}")
        if resp.status_code not in (200, 202, 404):
            resp.raise_for_status()
        self.published.discard(node)


def _driver_field() -> str:
    return f"spec.driver={catalog.GPU_DEVICE_CLASS}"


class PluginWatch:
    """How many GPU nodes were without a serving plugin at once, as the API server showed it."""

    def __init__(self, env: TestEnv, gpu_nodes: list[str]) -> None:
        self.gpu_nodes = gpu_nodes
        self.pods: Objects = {}
        self.slices: Objects = {}
        self.worst: list[str] = []  # the most nodes without a plugin at once, since reset()
        self.seen = 0  # states looked at since reset()
        self._lock = threading.Lock()
        self._watches = (
            Watched(env, PODS_PATH, {"labelSelector": PLUGIN_SELECTOR}, self._pods),
            Watched(env, SLICES_PATH, {"fieldSelector": _driver_field()}, self._slices),
        )

    def __enter__(self) -> PluginWatch:
        for w in self._watches:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self._watches:
            w.stop()

    def check(self) -> None:
        for w in self._watches:
            w.check()

    def _pods(self, pods: Objects) -> None:
        with self._lock:
            self.pods = pods
            self._count()

    def _slices(self, slices: Objects) -> None:
        with self._lock:
            self.slices = slices
            self._count()

    def _without(self) -> list[str]:
        serving = {p.node for p in plugin_pods(self.pods) if p.serving}
        published = {str(s["spec"].get("nodeName")) for s in self.slices.values()}
        return [n for n in self.gpu_nodes if n not in serving or n not in published]

    def _count(self) -> None:
        without = self._without()
        self.seen += 1
        if len(without) > len(self.worst):
            self.worst = without

    def reset(self) -> None:
        """Start counting afresh (at an upgrade's start)."""
        with self._lock:
            self.worst, self.seen = self._without(), 0

    def without(self) -> list[str]:
        """The GPU nodes without a serving plugin now."""
        with self._lock:
            return self._without()

    def pods_by_node(self) -> dict[str, list[PluginPod]]:
        with self._lock:
            pods = plugin_pods(self.pods)
        out: dict[str, list[PluginPod]] = {n: [] for n in self.gpu_nodes}
        for p in pods:
            out.setdefault(p.node, []).append(p)
        return out

    def rolled(self, version: str) -> bool:
        """Every GPU node serves a plugin of ``version``, and its only pod is that one."""
        by_node = self.pods_by_node()
        tag = f":{image_tag(version)}"
        return not self.without() and all(
            len(pods) == 1 and pods[0].image.endswith(tag) for pods in by_node.values()
        )
