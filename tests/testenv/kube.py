"""The few API calls the simulated cluster makes, over the admin's httpx2 client.

Objects are written with server-side apply under one field manager, so a
second ``start`` on the same directory re-applies without conflicts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import yaml
from tests.testenv.env import TestEnv, TestEnvError, _log_tail

FIELD_MANAGER = "modelplane-testenv"

T = TypeVar("T")

# kind -> (API prefix, plural, namespaced): only the kinds the testenv writes.
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "CustomResourceDefinition": (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices", False),
    "Deployment": ("/apis/apps/v1", "deployments", True),
}


def object_path(kind: str, name: str, namespace: str | None = None) -> str:
    try:
        prefix, plural, namespaced = _KINDS[kind]
    except KeyError:
        raise TestEnvError(f"the testenv does not write {kind} objects") from None
    if namespaced:
        if not namespace:
            raise TestEnvError(f"{kind} {name} needs a namespace")
        return f"{prefix}/namespaces/{namespace}/{plural}/{name}"
    return f"{prefix}/{plural}/{name}"


def apply(client: httpx2.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply ``body`` (forced: the testenv owns what it writes)."""
    meta = body["metadata"]
    path = object_path(body["kind"], meta["name"], meta.get("namespace"))
    resp = client.patch(
        path,
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    if resp.status_code >= 300:
        raise TestEnvError(
            f"applying {body['kind']} {meta['name']} failed: {resp.status_code} {resp.text[:500]}"
        )
    result: dict[str, Any] = resp.json()
    return result


def get(client: httpx2.Client, path: str) -> dict[str, Any] | None:
    """The object at ``path``, or None when it does not exist."""
    resp = client.get(path)
    if resp.status_code == 404:
        return None
    if resp.status_code >= 300:
        raise TestEnvError(f"GET {path} failed: {resp.status_code} {resp.text[:500]}")
    result: dict[str, Any] = resp.json()
    return result


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def poll(
    what: str, check: Callable[[], T | None], *, deadline: float, log: Path | None = None
) -> T:
    """Call ``check`` until it returns something, for up to ``deadline`` seconds."""
    end = time.monotonic() + deadline
    last: object = None
    while True:
        try:
            value = check()
        except (httpx2.HTTPError, OSError) as exc:
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > end:
            tail = f"\n{log.name}:\n{_log_tail(log)}" if log is not None else ""
            raise TestEnvError(f"timed out after {deadline:.0f}s waiting for {what} ({last}){tail}")
        time.sleep(0.1)


def condition_true(obj: dict[str, Any] | None, type_: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


# --------------------------------------------------------------------------
# --crds PATH
# --------------------------------------------------------------------------

CRD_KINDS = ("CustomResourceDefinition", "DeviceClass")


def _yaml_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    if not root.is_dir():
        raise TestEnvError(f"--crds: {root} is neither a file nor a directory")
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".yaml", ".yml"):
            yield path


def crd_documents(roots: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition and DeviceClass in the YAML files under ``roots``."""
    docs: list[dict[str, Any]] = []
    for root in roots:
        for path in _yaml_files(Path(root)):
            try:
                loaded = list(yaml.safe_load_all(path.read_text()))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise TestEnvError(f"--crds: cannot read {path}: {exc}") from None
            for doc in loaded:
                if isinstance(doc, dict) and doc.get("kind") in CRD_KINDS:
                    name = (doc.get("metadata") or {}).get("name")
                    if not name:
                        raise TestEnvError(f"--crds: a {doc['kind']} in {path} has no name")
                    docs.append(doc)
    return docs


def apply_crds(env: TestEnv, roots: Iterable[Path], *, deadline: float = 120.0) -> list[str]:
    """Apply every CRD and DeviceClass under ``roots``; return once the CRDs are Established.

    CRDs go first: a DeviceClass only needs the built-in resource.k8s.io API.
    Returns the names of the CRDs applied.
    """
    docs = crd_documents(roots)
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    with env.http_client(timeout=60) as client:
        for doc in crds:
            apply(client, _without_status(doc))
        for doc in docs:
            if doc["kind"] == "DeviceClass":
                apply(client, _without_status(doc))
        names = [d["metadata"]["name"] for d in crds]
        for name in names:
            _wait_established(client, name, deadline)
    return names


def _wait_established(client: httpx2.Client, name: str, deadline: float) -> None:
    path = object_path("CustomResourceDefinition", name)

    def established() -> bool:
        return condition_true(get(client, path), "Established")

    poll(f"CRD {name} Established", established, deadline=deadline)


def _without_status(doc: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in doc.items() if k != "status"}
    meta = dict(body.get("metadata") or {})
    meta.pop("creationTimestamp", None)
    body["metadata"] = meta
    return body
