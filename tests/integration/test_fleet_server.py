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

A Managed target adds its releases: a real API server is given one
release installed and upgraded by helm, the fleet server is seeded from it
(as tests/testenv/fleet_managed.py seeds the benchmark's Managed targets),
and the release namespace's Secret LIST and watch by Helm's selector, the
release objects' metadata and a watch of one by name are compared; the
copied storage is held to the operator's record of it (``Verified``).
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
from tests.integration.substrate import Helm, write_chart
from tests.testenv import TestEnv
from tests.testenv.fleet import AGGREGATED, FleetServer, dump, healthy_target
from tests.testenv.fleet_managed import without_claim

from modelplane.catalog import components as catalog
from modelplane.observe.release_storage import StoredDigests, storage_facts
from modelplane.observe.releases import stored_release
from modelplane.observe.state import release_secret_selector
from modelplane.observe.storage_name import storage_name
from modelplane.operator.release_records import record_of
from modelplane.plan.release_trust import (
    StorageState,
    StorageVerdict,
    manifest_digest,
    storage_state,
)

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


# ---- a Managed target: its releases' storage and objects ---------------------------

MANAGED = catalog.BY_NAME["cert-manager"]
assert MANAGED.chart is not None
CHART, RELEASE, RELEASE_NS = MANAGED.chart.chart, MANAGED.release_name, MANAGED.namespace


@pytest.fixture(scope="module")
def managed_real(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A real API server with one fixture chart installed by helm, and upgraded once.

    Two revisions, as Helm leaves them: v1 superseded, v2 deployed, each a
    Secret of type helm.sh/release.v1 with Helm's labels, and the chart's
    ConfigMap and CRDs with Helm's managedFields.
    """
    tmp = tmp_path_factory.mktemp("fleet-managed")
    env = TestEnv(tmp / "real")
    env.start()
    try:
        chart = write_chart(tmp / "charts", CHART, MANAGED.version)
        where = ("--namespace", RELEASE_NS, "--kubeconfig", str(env.kubeconfig_path))
        helm.run("install", RELEASE, str(chart), "--create-namespace", *where)
        helm.run("upgrade", RELEASE, str(chart), "--set", "revision=2", *where)
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="module")
def managed_servers(
    managed_real: TestEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, httpx2.Client]]:
    """A client of each: the real server, and a fleet target seeded from it."""
    tmp = tmp_path_factory.mktemp("fleet-managed-server")
    seed = tmp / "seed.json"
    seed.write_text(json.dumps(without_claim(dump(managed_real))))
    with FleetServer(tmp / "fleet", 1, seed=seed) as fleet:
        clients = {
            "real": managed_real.http_client(),
            "fleet": httpx2.Client(
                base_url=fleet.server(0),
                verify=ssl.create_default_context(cadata=fleet.ca_pem.decode()),
                headers={"Authorization": "Bearer fleet-token"},
                timeout=10.0,
            ),
        }
        yield clients
        for http in clients.values():
            http.close()


def _release_secrets(http: httpx2.Client, **params: str) -> httpx2.Response:
    return http.get(
        f"/api/v1/namespaces/{RELEASE_NS}/secrets",
        params={"labelSelector": release_secret_selector(RELEASE_NS), **params},
    )


def test_a_copied_release_storage_is_the_operators_as_the_real_one(
    managed_servers: dict[str, httpx2.Client],
) -> None:
    real, fleet = _both(managed_servers, _release_secrets)
    assert _shape(real) == _shape(fleet)
    found = {}
    for name, answer in (("real", real), ("fleet", fleet)):
        items = answer.json()["items"]
        found[name] = [
            (
                i["metadata"]["name"],
                i["type"],
                i["metadata"]["labels"],
                i["data"]["release"],
            )
            for i in items
        ]
    names = [f[0] for f in found["real"]]
    assert names == [storage_name(RELEASE, 1), storage_name(RELEASE, 2)]
    assert found["real"] == found["fleet"]
    assert {f[1] for f in found["fleet"]} == {"helm.sh/release.v1"}
    # The record of the revision helm wrote holds the copy to it: Verified,
    # nothing taken for a forgery, on the copy as on the original.
    newest = real.json()["items"][1]
    record = record_of(RELEASE, RELEASE_NS, 2, manifest_digest(stored_release(newest, "v2")))
    for answer in (real, fleet):
        facts = storage_facts(answer.json()["items"], RELEASE, RELEASE_NS, record, StoredDigests())
        assert storage_state(facts) == StorageVerdict(state=StorageState.VERIFIED)
    # One revision by name, as the operator reads the one helm just wrote.
    one = {"fieldSelector": f"metadata.name={storage_name(RELEASE, 2)}"}
    real, fleet = _both(managed_servers, lambda h: _release_secrets(h, **one))
    for answer in (real, fleet):
        items = answer.json()["items"]
        assert [i["metadata"]["name"] for i in items] == [storage_name(RELEASE, 2)]
        assert items[0]["data"] == newest["data"]


def test_a_release_secrets_watch_answers_as_the_real_one(
    managed_servers: dict[str, httpx2.Client],
) -> None:
    path = f"/api/v1/namespaces/{RELEASE_NS}/secrets"
    forged = storage_name(RELEASE, 3)
    labels = {"owner": "helm", "name": RELEASE, "version": "3", "status": "deployed"}
    got = {}
    for name, http in managed_servers.items():
        rv = _release_secrets(http).json()["metadata"]["resourceVersion"]
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": forged, "namespace": RELEASE_NS, "labels": labels},
            "type": "helm.sh/release.v1",
            "data": {"release": ""},
        }
        assert http.post(path, json=body).status_code == 201
        # Out of the selector: Helm would no longer read it as a revision.
        moved = http.patch(
            f"{path}/{forged}",
            content=json.dumps({"metadata": {"labels": {"name": "someone-else"}}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert moved.status_code == 200
        assert http.delete(f"{path}/{forged}").status_code == 200
        params = {
            "labelSelector": release_secret_selector(RELEASE_NS),
            "resourceVersion": rv,
            "timeoutSeconds": "2",
        }
        code, events = _events(http, path, params)
        got[name] = (code, [(e["type"], e["object"]["metadata"]["name"]) for e in events])
    assert got["real"] == got["fleet"] == (200, [("ADDED", forged), ("DELETED", forged)])


def test_a_release_objects_metadata_answers_as_the_real_one(
    managed_servers: dict[str, httpx2.Client],
) -> None:
    """What drift is judged by: the objects' metadata, Helm's managedFields among it."""

    def owners(answer: httpx2.Response) -> list[tuple[str, list[tuple[str, str]]]]:
        return [
            (
                i["metadata"]["name"],
                [(m["manager"], m["operation"]) for m in i["metadata"].get("managedFields") or []],
            )
            for i in answer.json()["items"]
        ]

    for path in (
        f"/api/v1/namespaces/{RELEASE_NS}/configmaps",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    ):
        real, fleet = _both(
            managed_servers, lambda h, p=path: h.get(p, headers={"Accept": METADATA_LIST})
        )
        assert _shape(real) == _shape(fleet)
        assert owners(real) == owners(fleet)
        assert any(("helm", "Update") in o for _, o in owners(real)), owners(real)
    # One object by name, followed: an edit is a MODIFIED, metadata only.
    values = f"{RELEASE}-values"
    path = f"/api/v1/namespaces/{RELEASE_NS}/configmaps"
    for name, http in managed_servers.items():
        rv = http.get(path).json()["metadata"]["resourceVersion"]
        edited = http.patch(
            f"{path}/{values}",
            content=json.dumps({"data": {"edited": "by hand"}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert edited.status_code == 200
        with http.stream(
            "GET",
            path,
            params={
                "watch": "true",
                "resourceVersion": rv,
                "fieldSelector": f"metadata.name={values}",
                "timeoutSeconds": "1",
            },
            headers={"Accept": METADATA_OBJECT},
        ) as answer:
            lines = [json.loads(x) for x in answer.iter_lines() if x.strip()]
        assert [(e["type"], e["object"]["kind"]) for e in lines] == [
            ("MODIFIED", "PartialObjectMetadata")
        ], (name, lines)
