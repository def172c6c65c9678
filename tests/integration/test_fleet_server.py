"""The simulated fleet answers the operator's requests as a real kube-apiserver does.

The fleet benchmark measures the operator against bench/fleet_server, so its
figures hold only as far as the fleet server's answers are a real target's.
Here one real kube-apiserver from the testbin is given a healthy Provided
target's objects, the fleet server is seeded from it, and the same requests
the operator sends (discovery, paginated LISTs, metadata-only LISTs, WATCH
from a resourceVersion and from one too old, GET, server-side apply with its
dry run and no-op, the claim's Lease, the status subresource) go to both.
What the operator reads of the answers is compared: status codes, media
types, kinds, resourceVersion and continue semantics, event types, Status
reasons, managedFields entries.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import Client, KubeConfig
from tests.testenv import TestEnv
from tests.testenv.fleet import AGGREGATED, FleetServer, dump, healthy_target

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
APPLY = "application/apply-patch+yaml"
NS = "fleet-test"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A real API server holding a healthy Provided target's objects."""
    env = TestEnv(tmp_path_factory.mktemp("fleet-real") / "real")
    env.start()
    try:
        healthy_target(Client(KubeConfig.from_dict(env.kubeconfig), field_manager="seed"))
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="module")
def fleet(real: TestEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    """The fleet server, seeded from ``real`` as it is now."""
    tmp = tmp_path_factory.mktemp("fleet-server")
    seed = tmp / "seed.json"
    seed.write_text(json.dumps(dump(real)))
    server = FleetServer(tmp / "fleet", 2, seed=seed).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def servers(real: TestEnv, fleet: FleetServer) -> Iterator[dict[str, httpx2.Client]]:
    """A client of each: the real server, and the fleet's target 1."""
    clients = {
        "real": real.http_client(),
        "fleet": httpx2.Client(
            base_url=fleet.server(1),
            verify=ssl.create_default_context(cadata=fleet.ca_pem.decode()),
            headers={"Authorization": "Bearer fleet-token"},
            timeout=10.0,
        ),
    }
    for http in clients.values():
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        assert http.post("/api/v1/namespaces", json=ns).status_code == 201
    yield clients
    for http in clients.values():
        http.close()


def _both(
    servers: dict[str, httpx2.Client], request: Callable[[httpx2.Client], Any]
) -> tuple[Any, Any]:
    return request(servers["real"]), request(servers["fleet"])


def _config_map(name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"fleet-test": "yes"}},
        "data": data or {"a": "1"},
    }


def _apply(http: httpx2.Client, path: str, body: dict[str, Any], **params: str) -> httpx2.Response:
    return http.patch(
        path,
        content=json.dumps(body),
        params={"fieldManager": "modelplane", "force": "true", **params},
        headers={"Content-Type": APPLY},
    )


def _shape(answer: httpx2.Response) -> tuple[int, str, str | None]:
    doc = answer.json()
    return answer.status_code, answer.headers["content-type"], doc.get("kind")


def test_discovery_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    for path in ("/api", "/apis"):
        real, fleet = _both(servers, lambda h, p=path: h.get(p, headers={"Accept": AGGREGATED}))
        assert _shape(real) == _shape(fleet)
        assert real.json()["kind"] == "APIGroupDiscoveryList"
        real, fleet = _both(servers, lambda h, p=path: h.get(p))
        assert _shape(real) == _shape(fleet)
    real, fleet = _both(servers, lambda h: h.get("/apis/resource.k8s.io/v1"))
    assert _shape(real) == _shape(fleet) and real.json() == fleet.json()


def test_a_list_in_pages_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    for http in servers.values():
        for i in range(5):
            answer = http.post(f"/api/v1/namespaces/{NS}/configmaps", json=_config_map(f"page-{i}"))
            assert answer.status_code == 201
    path = f"/api/v1/namespaces/{NS}/configmaps"

    def pages(http: httpx2.Client, params: dict[str, str]) -> list[dict[str, Any]]:
        out, cont = [], ""
        while True:
            doc = http.get(path, params={**params, **({"continue": cont} if cont else {})})
            assert doc.status_code == 200
            out.append(doc.json())
            cont = doc.json()["metadata"].get("continue") or ""
            if not cont:
                return out

    for params in ({"limit": "2"}, {"limit": "2", "labelSelector": "fleet-test=yes"}):
        real, fleet = _both(servers, lambda h, p=params: pages(h, p))
        assert len(real) == len(fleet) == 3
        for r, f in zip(real, fleet, strict=True):
            assert (
                (r["kind"], r["apiVersion"])
                == (f["kind"], f["apiVersion"])
                == (
                    "ConfigMapList",
                    "v1",
                )
            )
            assert [i["metadata"]["name"] for i in r["items"]] == [
                i["metadata"]["name"] for i in f["items"]
            ]
            assert set(r["metadata"]) == set(f["metadata"]), (r["metadata"], f["metadata"])
            assert r["metadata"].get("remainingItemCount") == f["metadata"].get(
                "remainingItemCount"
            )
        # Every page of one LIST carries the first page's resourceVersion.
        for answers in (real, fleet):
            assert len({p["metadata"]["resourceVersion"] for p in answers}) == 1
    # A continue token that is not one.
    real, fleet = _both(servers, lambda h: h.get(path, params={"limit": "2", "continue": "x"}))
    assert real.status_code == fleet.status_code == 400
    assert real.json()["reason"] == fleet.json()["reason"]


def test_a_metadata_only_list_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    def listed(http: httpx2.Client) -> httpx2.Response:
        return http.get(
            "/api/v1/secrets",
            params={"fieldSelector": "metadata.name=nothing-has-this-name"},
            headers={"Accept": METADATA_LIST},
        )

    real, fleet = _both(servers, listed)
    assert _shape(real) == _shape(fleet)
    assert real.json()["apiVersion"] == fleet.json()["apiVersion"] == "meta.k8s.io/v1"
    real, fleet = _both(
        servers,
        lambda h: h.get(f"/api/v1/namespaces/{NS}/configmaps", headers={"Accept": METADATA_LIST}),
    )
    for answer in (real, fleet):
        items = answer.json()["items"]
        assert items and all(i["kind"] == "PartialObjectMetadata" for i in items)
        assert all("data" not in i for i in items)


def _events(http: httpx2.Client, path: str, params: dict[str, str]) -> tuple[int, list[Any]]:
    with http.stream("GET", path, params={"watch": "true", **params}) as answer:
        lines = [json.loads(line) for line in answer.iter_lines() if line.strip()]
        return answer.status_code, lines


def test_a_watch_from_a_version_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    path = f"/api/v1/namespaces/{NS}/configmaps"
    rvs = {}
    for name, http in servers.items():
        rvs[name] = http.get(path).json()["metadata"]["resourceVersion"]
        assert http.post(path, json=_config_map("watched")).status_code == 201
        assert (
            _apply(http, f"{path}/watched", _config_map("watched", {"a": "2"})).status_code == 200
        )
        assert http.delete(f"{path}/watched").status_code == 200
    got = {
        name: _events(
            http,
            path,
            {"resourceVersion": rvs[name], "allowWatchBookmarks": "true", "timeoutSeconds": "2"},
        )
        for name, http in servers.items()
    }
    for name, (code, events) in got.items():
        assert code == 200, name
        changes = [e for e in events if e["type"] != "BOOKMARK"]
        assert [e["type"] for e in changes] == ["ADDED", "MODIFIED", "DELETED"], (name, events)
        assert all(e["object"]["kind"] == "ConfigMap" for e in changes)
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in changes]
        assert versions == sorted(versions) and versions[0] > int(rvs[name])
    # Metadata only: the events carry PartialObjectMetadata.
    for name, http in servers.items():
        rv = http.get(path).json()["metadata"]["resourceVersion"]
        assert _apply(http, f"{path}/page-0", _config_map("page-0", {"b": "3"})).status_code == 200
        with http.stream(
            "GET",
            path,
            params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"},
            headers={"Accept": METADATA_OBJECT},
        ) as answer:
            lines = [json.loads(x) for x in answer.iter_lines() if x.strip()]
        assert [e["type"] for e in lines] == ["MODIFIED"], (name, lines)
        assert lines[0]["object"]["kind"] == "PartialObjectMetadata", name


def test_a_watch_from_a_version_too_old_is_410_as_the_real_one(
    servers: dict[str, httpx2.Client], fleet: FleetServer, tmp_path: Path
) -> None:
    # Without the watch cache, as tests/integration/test_watch_gone.py runs
    # it, so that a compaction of etcd reaches the watch; the fleet's event
    # log of target 1 is dropped.
    uncached = TestEnv(tmp_path / "uncached", extra_apiserver_args=("--watch-cache=false",))
    uncached.start()
    try:
        with uncached.http_client() as http:
            rv = http.get("/api/v1/configmaps").json()["metadata"]["resourceVersion"]
            uncached.compact_etcd()
            got = {
                "real": _events(
                    http, "/api/v1/configmaps", {"resourceVersion": rv, "timeoutSeconds": "3"}
                )
            }
    finally:
        uncached.stop()
    rv = servers["fleet"].get("/api/v1/configmaps").json()["metadata"]["resourceVersion"]
    fleet.compact(1)
    assert (
        servers["fleet"]
        .post(f"/api/v1/namespaces/{NS}/configmaps", json=_config_map("after-compaction"))
        .is_success
    )
    got["fleet"] = _events(
        servers["fleet"], "/api/v1/configmaps", {"resourceVersion": rv, "timeoutSeconds": "3"}
    )
    for name, (code, events) in got.items():
        assert code == 200, name
        assert len(events) == 1 and events[0]["type"] == "ERROR", (name, events)
        status = events[0]["object"]
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")


def test_get_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    real, fleet = _both(servers, lambda h: h.get("/api/v1/nodes/gpu-0"))
    assert _shape(real) == _shape(fleet)
    assert real.json()["metadata"]["labels"] == fleet.json()["metadata"]["labels"]
    real, fleet = _both(
        servers, lambda h: h.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/none")
    )
    assert real.status_code == fleet.status_code == 404
    for key in ("kind", "reason", "code", "message", "details"):
        assert real.json()[key] == fleet.json()[key], key
    real, fleet = _both(servers, lambda h: h.get("/apis/no.such.group/v1/things"))
    assert real.status_code == fleet.status_code == 404


def test_server_side_apply_and_the_claim_answer_as_the_real_one(
    servers: dict[str, httpx2.Client],
) -> None:
    def lease(holder: str, ns: str = NS) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "modelplane-claim", "namespace": ns},
            "spec": {"holderIdentity": holder},
        }

    path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/modelplane-claim"
    # A dry run stores nothing.
    real, fleet = _both(servers, lambda h: _apply(h, path, lease("a"), dryRun="All"))
    assert real.status_code == fleet.status_code
    real, fleet = _both(servers, lambda h: h.get(path))
    assert real.status_code == fleet.status_code == 404
    # Created, then the same apply again: no new resourceVersion.
    real, fleet = _both(servers, lambda h: _apply(h, path, lease("a")))
    assert real.status_code == fleet.status_code == 201
    for answer in (real, fleet):
        entries = answer.json()["metadata"]["managedFields"]
        assert [(e["manager"], e["operation"]) for e in entries] == [("modelplane", "Apply")]
        assert entries[0]["fieldsV1"]["f:spec"] == {"f:holderIdentity": {}}
    first = {
        n: a.json()["metadata"]["resourceVersion"]
        for n, a in zip(servers, (real, fleet), strict=True)
    }
    real, fleet = _both(servers, lambda h: _apply(h, path, lease("a")))
    assert real.status_code == fleet.status_code == 200
    for name, answer in zip(servers, (real, fleet), strict=True):
        assert answer.json()["metadata"]["resourceVersion"] == first[name], name
    # A changed holder: a new version, the holder read back.
    real, fleet = _both(servers, lambda h: _apply(h, path, lease("b")))
    for name, answer in zip(servers, (real, fleet), strict=True):
        assert answer.status_code == 200
        assert answer.json()["metadata"]["resourceVersion"] != first[name]
    real, fleet = _both(servers, lambda h: h.get(path))
    assert real.json()["spec"]["holderIdentity"] == fleet.json()["spec"]["holderIdentity"] == "b"
    # In a namespace that does not exist: refused alike.
    missing = "/apis/coordination.k8s.io/v1/namespaces/nowhere/leases/modelplane-claim"
    real, fleet = _both(servers, lambda h: _apply(h, missing, lease("a", "nowhere")))
    assert real.status_code == fleet.status_code == 404
    assert real.json()["reason"] == fleet.json()["reason"] == "NotFound"


def test_the_status_subresource_answers_as_the_real_one(servers: dict[str, httpx2.Client]) -> None:
    path = "/api/v1/nodes/gpu-1"
    seen = {}
    for name, http in servers.items():
        before = http.get(path).json()
        # The main resource does not take a status...
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"fleet-test": "applied"}},
            "status": {"capacity": {"cpu": "1"}},
        }
        after = _apply(http, path, body).json()
        assert after["status"]["capacity"] == before["status"]["capacity"], name
        assert after["metadata"]["labels"]["fleet-test"] == "applied"
        # ... the status subresource does, and not the spec.
        patch = {
            "status": {"capacity": {"cpu": "7"}},
            "metadata": {"labels": {"x": "y"}},
            "spec": {"unschedulable": True},
        }
        patched = http.patch(
            f"{path}/status",
            content=json.dumps(patch),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert patched.status_code == 200, name
        doc = patched.json()
        assert doc["status"]["capacity"]["cpu"] == "7", name
        seen[name] = (doc["metadata"]["labels"].get("x"), doc["spec"].get("unschedulable"))
    assert seen["real"] == seen["fleet"]
