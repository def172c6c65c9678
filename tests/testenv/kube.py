"""The few API calls the simulated cluster makes, with lightkube's client as the admin.

Objects are written with server-side apply under one field manager, so a
second ``start`` on the same directory re-applies without conflicts. Kinds
are lightkube's own models, or learned from the server's CRDs: no table of
REST paths here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import yaml
from lightkube import Client, codecs
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError, LoadResourceError
from lightkube.generic_resource import load_in_cluster_generic_resources
from tests.shared_fixtures import yaml_docs
from tests.testenv.env import TestEnv, TestEnvError, _log_tail
from tests.waiting import WaitTimeout, wait_for

FIELD_MANAGER = "modelplane-testenv"

T = TypeVar("T")


def client(env: TestEnv, timeout: float = 30.0) -> Client:
    """lightkube's client for the API server, as the admin, writing under one field manager."""
    return Client(
        KubeConfig.from_dict(env.kubeconfig),
        timeout=httpx2.Timeout(timeout),
        field_manager=FIELD_MANAGER,
        trust_env=False,
    )


def resource_for(client: Client, api_version: str, kind: str) -> Any:
    """lightkube's class for a kind: its own model of a built-in, or one from the server's CRDs."""
    try:
        return codecs.resource_registry.load(api_version, kind)
    except LoadResourceError:
        # Not built in: the server's CRDs say what it is served as.
        load_in_cluster_generic_resources(client)
    try:
        return codecs.resource_registry.load(api_version, kind)
    except LoadResourceError:
        raise TestEnvError(f"the API server serves no {kind} in {api_version}") from None


def apply(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply ``body`` (forced: the testenv owns what it writes)."""
    res = resource_for(client, body["apiVersion"], body["kind"])
    meta = body["metadata"]
    try:
        result = client.apply(res.from_dict(body), force=True)
    except ApiError as err:
        raise TestEnvError(
            f"applying {body['kind']} {meta['name']} failed: {err.status.code} "
            f"{(err.status.message or '')[:500]}"
        ) from None
    applied: dict[str, Any] = result.to_dict()
    return applied


def get(
    client: Client, api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    res = resource_for(client, api_version, kind)
    try:
        found: dict[str, Any] = client.get(res, name, namespace=namespace).to_dict()
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise TestEnvError(
            f"GET {kind} {name} failed: {err.status.code} {(err.status.message or '')[:500]}"
        ) from None
    return found


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def poll(
    what: str, check: Callable[[], T | None], *, deadline: float, log: Path | None = None
) -> T:
    """``wait_for`` as the testenv fails: a ``TestEnvError`` (which ``start`` reports) with
    the tail of the process's log; a connection refused meanwhile is "not yet"."""
    detail = (lambda: f"{log.name}:\n{_log_tail(log)}") if log is not None else None
    try:
        value = wait_for(
            what,
            check,
            deadline=deadline,
            detail=detail,
            not_yet=(httpx2.HTTPError, OSError, ApiError),
        )
    except WaitTimeout as err:
        raise TestEnvError(str(err)) from None
    assert value is not None
    return value


def condition_true(obj: dict[str, Any] | None, type_: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


# --------------------------------------------------------------------------
# --crds PATH
# --------------------------------------------------------------------------

CRD_KINDS = ("CustomResourceDefinition", "DeviceClass")


def yaml_files(root: Path) -> list[Path]:
    """The YAML files ``--crds ROOT`` names: ROOT itself, or every one under it.

    Symlinks are followed, folders and files alike (a folder of links to the
    shared fixtures is the usual way to pick some of them); a folder reached
    twice through links is read once. What cannot be read (a link to nothing,
    a folder without permission) is refused, naming it, rather than skipped.
    """
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise TestEnvError(f"--crds: {root} is neither a file nor a directory")

    def refuse(err: OSError) -> None:
        raise TestEnvError(f"--crds: cannot read {err.filename}: {err.strerror}")

    found: list[Path] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(root, onerror=refuse, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            dirs.clear()  # a cycle, or a second link to a folder already read
            continue
        seen.add(real)
        for name in sorted(files):
            path = Path(top) / name
            if not path.exists():
                raise TestEnvError(
                    f"--crds: {path} is a link to {os.readlink(path)}, which is not there"
                )
            if path.suffix in (".yaml", ".yml"):
                found.append(path)
    return sorted(found)


def crd_documents(roots: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition and DeviceClass in the YAML files under ``roots``."""
    docs: list[dict[str, Any]] = []
    for root in roots:
        before = len(docs)
        for path in yaml_files(Path(root)):
            try:
                loaded = list(yaml_docs(path))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise TestEnvError(f"--crds: cannot read {path}: {exc}") from None
            for doc in loaded:
                if isinstance(doc, dict) and doc.get("kind") in CRD_KINDS:
                    name = (doc.get("metadata") or {}).get("name")
                    if not name:
                        raise TestEnvError(f"--crds: a {doc['kind']} in {path} has no name")
                    docs.append(doc)
        if len(docs) == before:
            # Asked for CRDs and given none is a mistake (a wrong folder):
            # applying nothing in silence leaves it to surface much later.
            raise TestEnvError(
                f"--crds: no {' or '.join(CRD_KINDS)} in the YAML files under {root}"
            )
    return docs


def apply_crds(env: TestEnv, roots: Iterable[Path], *, deadline: float = 120.0) -> list[str]:
    """Apply every CRD and DeviceClass under ``roots``; return once the CRDs are Established.

    CRDs go first: a DeviceClass only needs the built-in resource.k8s.io API.
    Returns the names of the CRDs applied.
    """
    docs = crd_documents(roots)
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    with client(env, timeout=60) as kube:
        for doc in crds:
            apply(kube, _without_status(doc))
        for doc in docs:
            if doc["kind"] == "DeviceClass":
                apply(kube, _without_status(doc))
        names = [d["metadata"]["name"] for d in crds]
        for name in names:
            _wait_established(kube, name, deadline)
    return names


def replace_crds(env: TestEnv, roots: Iterable[Path], *, deadline: float = 120.0) -> list[str]:
    """Replace every CRD the server holds by its namesake under ``roots``, add the rest.

    For a Managed seed: the fixture charts brought small CRDs (helm's, and
    the GAIE manifests' the operator applied, stamped with its digest); a
    real install carries the upstream ones. Each is replaced whole (a PUT:
    server-side apply would merge the fixture's schema and versions into
    the upstream ones) with the live object's annotations and labels kept
    under the upstream ones', so a digest the operator reads is still its
    own. The DeviceClasses under ``roots`` are
    not written: on a Managed target they are a release's objects. Returns
    the names of the CRDs written.
    """
    crds = [d for d in crd_documents(roots) if d["kind"] == "CustomResourceDefinition"]
    with client(env, timeout=60) as kube:
        for doc in crds:
            _replace(kube, _without_status(doc))
        names = [d["metadata"]["name"] for d in crds]
        for name in names:
            _wait_established(kube, name, deadline)
    return names


def _replace(kube: Client, body: dict[str, Any], tries: int = 5) -> None:
    res = resource_for(kube, body["apiVersion"], body["kind"])
    for _ in range(tries):
        live = get(kube, body["apiVersion"], body["kind"], body["metadata"]["name"])
        if live is None:
            apply(kube, body)
            return
        live_meta, meta = live.get("metadata") or {}, dict(body["metadata"])
        for key in ("annotations", "labels"):
            meta[key] = {**(live_meta.get(key) or {}), **(meta.get(key) or {})}
        meta["resourceVersion"] = live_meta["resourceVersion"]
        try:
            kube.replace(res.from_dict({**body, "metadata": meta}))
            return
        except ApiError as err:
            # The API server writes a new CRD's status (its names accepted,
            # Established) after it is made: read it again.
            if err.status.code == 409:
                continue
            raise TestEnvError(
                f"replacing CRD {meta['name']} failed: {err.status.code} "
                f"{(err.status.message or '')[:500]}"
            ) from None
    raise TestEnvError(f"replacing CRD {body['metadata']['name']}: 409 Conflict {tries} times")


def _wait_established(kube: Client, name: str, deadline: float) -> None:
    def established() -> bool:
        crd = get(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        return condition_true(crd, "Established")

    poll(f"CRD {name} Established", established, deadline=deadline)


def _without_status(doc: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in doc.items() if k != "status"}
    meta = dict(body.get("metadata") or {})
    meta.pop("creationTimestamp", None)
    body["metadata"] = meta
    return body
