"""The operator holds Helm's storage to what it recorded: removes forgeries, names the rest."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from typing import Any

import pytest

from modelplane.observe.state import Listed
from modelplane.operator import release_records
from modelplane.operator.release_records import ReleaseRecords, StorageTamperedError, records_of
from modelplane.plan.release_trust import StorageState, manifest_digest

NAME, NS = "mp-kube-prometheus-stack", "monitoring"
OURS: dict[str, Any] = {"name": NAME, "version": 1, "manifest": "kind: ConfigMap\n", "hooks": []}
ADDED = OURS["manifest"] + "---\nkind: ClusterRole\n"
FORGED = {**OURS, "version": 2, "manifest": ADDED}
# The operator's revision 1, rewritten in place.
ALTERED = {**OURS, "manifest": ADDED}


def _secret(release: dict[str, Any], revision: int, resource_version: str = "1") -> dict[str, Any]:
    helm_text = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.{NAME}.v{revision}",
            "namespace": NS,
            "resourceVersion": resource_version,
            "labels": {
                "owner": "helm",
                "name": NAME,
                "version": str(revision),
                "status": "deployed",
            },
        },
        "data": {"release": base64.b64encode(helm_text).decode()},
    }


class _Client:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str]] = []

    async def delete(self, _: Any, name: str, *, namespace: str) -> None:
        self.deleted.append((namespace, name))


class _Target:
    def __init__(self) -> None:
        self.client = _Client()


class _Records(ReleaseRecords):
    """The records with the events they emit kept."""

    def __init__(self, status: dict[str, Any] | None = None) -> None:
        self.events: list[tuple[str, str, str]] = []
        super().__init__(lambda *event: self.events.append(event))
        self.seed_records(status)


def _status(revision: int, digest: str) -> dict[str, Any]:
    item = {"name": NAME, "namespace": NS, "revision": revision, "manifestDigest": digest}
    return {"releases": [item]}


def _listed(*secrets: dict[str, Any]) -> Listed:
    return Listed(apis={}, release_secrets=list(secrets))


def test_a_forged_newer_revision_is_removed_and_named_once() -> None:
    ours = _secret(OURS, 1)
    forged = _secret(FORGED, 2)
    records = _Records(_status(1, manifest_digest(OURS)))
    target = _Target()
    listed, tampered = asyncio.run(records.trust_storage(target, _listed(ours, forged), [NS]))
    assert target.client.deleted == [(NS, f"sh.helm.release.v1.{NAME}.v2")]
    assert listed.release_secrets == [ours]
    assert tampered == []
    [(kind, reason, message)] = records.events
    assert (kind, reason) == ("Warning", "ReleaseStorageTampered")
    assert f"{NS}/sh.helm.release.v1.{NAME}.v2" in message
    assert records.release_bases[NAME] == 1
    # The same forgery again (the watch copy not caught up): not said twice.
    asyncio.run(records.trust_storage(target, _listed(ours, forged), [NS]))
    assert len(records.events) == 1


def test_an_altered_recorded_revision_is_named_and_not_trusted() -> None:
    altered = _secret(ALTERED, 1, "7")
    records = _Records(_status(1, manifest_digest(OURS)))
    target = _Target()
    _, tampered = asyncio.run(records.trust_storage(target, _listed(altered), [NS]))
    assert target.client.deleted == []
    [found] = tampered
    assert (found.release, found.state) == (NAME, StorageState.ALTERED)
    assert f"{NS}/sh.helm.release.v1.{NAME}.v1" in found.message
    assert records.events and records.events[0][1] == "ReleaseStorageTampered"


def test_without_a_record_the_newest_is_recorded_as_found() -> None:
    ours = _secret(OURS, 1)
    records = _Records()
    asyncio.run(records.trust_storage(_Target(), _listed(ours), [NS]))
    record = records.records[NAME]
    assert (record.revision, record.manifest_digest) == (1, manifest_digest(OURS))
    assert records.status_records() == [
        {"name": NAME, "namespace": NS, "revision": 1, "manifestDigest": manifest_digest(OURS)}
    ]
    assert records.events == []


def test_records_of_a_status_keep_only_the_catalogs_releases_where_they_live() -> None:
    digest = manifest_digest(OURS)
    status = {
        "releases": [
            {"name": NAME, "namespace": NS, "revision": 3, "manifestDigest": digest},
            {"name": NAME, "namespace": "elsewhere", "revision": 3, "manifestDigest": digest},
            {"name": "mp-unknown", "namespace": NS, "revision": 1, "manifestDigest": digest},
            {"name": NAME, "revision": "x"},
        ]
    }
    assert list(records_of(status)) == [NAME]
    assert records_of(None) == {}


def test_an_older_revision_that_says_it_is_newer_is_removed() -> None:
    # Helm orders revisions by the version the stored release says, not by
    # the Secret's name: revision 1 rewritten to say 99 would be its newest.
    ours = _secret({**OURS, "version": 2}, 2)
    renumbered = _secret({**FORGED, "version": 99}, 1)
    digest = manifest_digest({**OURS, "version": 2})
    records = _Records(_status(2, digest))
    target = _Target()
    listed, tampered = asyncio.run(records.trust_storage(target, _listed(renumbered, ours), [NS]))
    assert target.client.deleted == [(NS, f"sh.helm.release.v1.{NAME}.v1")]
    assert (listed.release_secrets, tampered) == ([ours], [])


def test_helm_is_not_run_on_a_revision_written_since_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours = _secret(OURS, 1)
    stored = [ours]

    async def listed(*_: Any, **__: Any) -> list[dict[str, Any]]:
        return list(stored)

    monkeypatch.setattr(release_records, "list_objects", listed)
    records = _Records(_status(1, manifest_digest(OURS)))
    target = _Target()
    asyncio.run(records.verify_storage(NAME, NS, target))
    stored.append(_secret(FORGED, 2))
    with pytest.raises(StorageTamperedError, match="helm is not run on release"):
        asyncio.run(records.verify_storage(NAME, NS, target))
    # Checked only, never repaired here: the next reconcile does that, and says so.
    assert target.client.deleted == []
