"""The hub's record of what the operator's helm wrote, and Helm's storage held to it.

An object ``StackReconciler`` keeps, owning its state. Per release it keeps the
revision and manifest digest its own helm run wrote (``records``: read from
the stack's ``status.releases`` when it has none of its own, written back
there with every status), and before each plan carries out what
``plan.release_trust.storage_state`` decides of the target's storage:
revisions it did not write are deleted, so Helm's newest is the operator's
again; a release whose recorded revision was altered or is gone is named
(``ReleaseStorageTampered``) and left to a person. A run without a hub
(``modelplane apply``) keeps its records for the run only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube.resources.core_v1 import Secret
from pydantic import ValidationError

from modelplane.actions.claim import Emit
from modelplane.api.status import ReleaseRecord
from modelplane.catalog.components import COMPONENTS
from modelplane.kube.client import Target, list_objects
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.kube.resources import unless_missing
from modelplane.observe.release_storage import StoredDigests, newest, storage_facts
from modelplane.observe.releases import ReleaseReadError, helm_output_release
from modelplane.observe.state import RELEASE_NAMESPACES, SECRETS, Listed, release_of
from modelplane.observe.storage_name import storage_name
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.plan.release_trust import (
    StorageState,
    StorageVerdict,
    TamperedRelease,
    manifest_digest,
    storage_state,
)
from modelplane.vocabulary import EventReason

log = logging.getLogger("modelplane.operator")

# The event that names a Secret of a release's storage the operator did not write.
STORAGE_TAMPERED = EventReason.RELEASE_STORAGE_TAMPERED
_COMPONENT_OF = {c.release_name: c.name for c in COMPONENTS if c.chart is not None}
# The actions whose helm starts from the release's newest stored revision.
_BUILDS_ON_STORAGE = frozenset(
    {ReleaseAction.UPGRADE, ReleaseAction.ROLLBACK, ReleaseAction.REINSTALL}
)


class StorageTamperedError(KnownError):
    """helm is not run on storage the operator did not write (teardown's uninstall)."""

    kind = ErrorKind.STORAGE_TAMPERED


def records_of(status: Mapping[str, Any] | None) -> dict[str, ReleaseRecord]:
    """The records ``status.releases`` holds; an entry that does not validate is none."""
    out: dict[str, ReleaseRecord] = {}
    for item in (status or {}).get("releases") or []:
        try:
            record = ReleaseRecord.model_validate(item)
        except ValidationError:
            continue
        if RELEASE_NAMESPACES.get(record.name) == record.namespace:
            out[record.name] = record
    return out


def record_of(name: str, namespace: str, revision: int, digest: str) -> ReleaseRecord:
    # The API's models are read by their wire names only.
    return ReleaseRecord.model_validate(
        {"name": name, "namespace": namespace, "revision": revision, "manifestDigest": digest}
    )


@dataclass
class ReleaseRecords:
    """Per release, what the operator's helm wrote, and Helm's storage held to it.

    Safe to lose but for ``records``, which the hub keeps (``status.releases``)
    and ``seed_records`` takes back.
    """

    # Where the Warning events about a tampered storage go.
    emit: Emit
    records: dict[str, ReleaseRecord] = field(default_factory=dict)
    stored_digests: StoredDigests = field(default_factory=StoredDigests)
    # Per release: the revision helm will take as its base, once the storage
    # is repaired (0: none); helm writes the next one.
    release_bases: dict[str, int] = field(default_factory=dict)
    # The release storage found not the operator's, last reported by event.
    tampered_reported: frozenset[str] = frozenset()

    def seed_records(self, status: Mapping[str, Any] | None) -> None:
        """Take the hub's records of the releases this process has written none of.

        Its own are newer than the hub's until the status is written: they win.
        """
        for name, record in records_of(status).items():
            self.records.setdefault(name, record)

    def status_records(self) -> list[dict[str, Any]] | None:
        """``status.releases``, as the hub takes it; None while there is none to write."""
        if not self.records:
            return None
        return [
            r.model_dump(by_alias=True) for _, r in sorted(self.records.items(), key=lambda i: i[0])
        ]

    async def trust_storage(
        self, target: Target, listed: Listed, namespaces: Sequence[str]
    ) -> tuple[Listed, list[TamperedRelease]]:
        """Hold each release's storage in ``namespaces`` to the record; what is left to read.

        Deletes the revisions the operator did not write, says so in a
        Warning event once, and returns ``listed`` without them, and the
        releases whose storage cannot be repaired.
        """
        tampered: list[TamperedRelease] = []
        removed: set[tuple[str, str]] = set()
        said: set[str] = set()
        for release, namespace in sorted(RELEASE_NAMESPACES.items()):
            if namespace not in namespaces:
                continue
            # Decoding the recorded revision is a MiB of gzip: off the loop.
            facts = await asyncio.to_thread(
                storage_facts,
                listed.release_secrets,
                release,
                namespace,
                self.records.get(release),
                self.stored_digests,
            )
            verdict = storage_state(facts)
            for secret in verdict.remove:
                await _delete_secret(target, namespace, secret)
                removed.add((namespace, secret))
            if verdict.message:
                said.add(verdict.message)
                if verdict.message not in self.tampered_reported:
                    log.warning("%s", verdict.message)
                    self.emit("Warning", STORAGE_TAMPERED, verdict.message)
            if not verdict.trusted:
                tampered.append(_tampered(release, verdict))
            top = newest(facts, verdict.remove)
            self.release_bases[release] = (top.revision or 0) if top and verdict.trusted else 0
            if verdict.state is StorageState.UNRECORDED and top is not None:
                await self._adopt(listed, release, namespace, top.secret, top.revision or 0)
        self.tampered_reported = frozenset(said)
        kept = [s for s in listed.release_secrets if _key(s) not in removed]
        self.stored_digests.keep_only(kept)
        return dataclasses.replace(listed, release_secrets=kept), tampered

    async def _adopt(
        self, listed: Listed, release: str, namespace: str, secret: str, revision: int
    ) -> None:
        """Record a revision the hub holds no record of, as found: its first sight."""
        body = next((s for s in listed.release_secrets if _key(s) == (namespace, secret)), None)
        digest = await asyncio.to_thread(self.stored_digests.of, body) if body else None
        if digest is None:
            return  # unreadable: its manifest is refused where it is read (release_objects)
        self.records[release] = record_of(release, namespace, revision, digest)

    async def verify_base(self, release: PlannedRelease, target: Target) -> None:
        """Just before helm reads the release's storage: still what the operator wrote.

        An upgrade, rollback or reinstall starts from Helm's newest revision;
        one written since the reconcile read the storage is refused here
        (the next reconcile removes it), not built on.
        """
        if release.action in _BUILDS_ON_STORAGE:
            await self.verify_storage(release.name, release.namespace, target)

    async def verify_storage(self, release: str, namespace: str, target: Target) -> None:
        """``StorageTamperedError`` unless Helm would build on the recorded revision, or on none."""
        secrets = await list_objects(
            target.client, SECRETS, namespace=namespace, labels=f"owner=helm,name={release}"
        )
        facts = await asyncio.to_thread(
            storage_facts,
            secrets,
            release,
            namespace,
            self.records.get(release),
            self.stored_digests,
        )
        verdict = storage_state(facts)
        if verdict.remove or not verdict.trusted:
            raise StorageTamperedError(
                f"helm is not run on release {release}: its storage changed since it was "
                f"read: {verdict.message}"
            )

    def forget_base(self, release: PlannedRelease) -> None:
        """Before a reinstall: its uninstall takes every revision with it."""
        if release.action is ReleaseAction.REINSTALL:
            self.records.pop(release.name, None)
            self.release_bases[release.name] = 0

    async def record_release(
        self, release: PlannedRelease, target: Target, output: str | None
    ) -> None:
        """Record the revision helm wrote for ``release``: from helm's own output when it gave one.

        Else (a rollback, a failed run) from the Secret of the revision helm
        writes next: that of its base, plus one. A run that wrote nothing
        leaves the record as it was.
        """
        if output:
            try:
                doc = await asyncio.to_thread(helm_output_release, output)
            except ReleaseReadError as err:
                log.warning("release %s: %s", release.name, err)
            else:
                version = doc.get("version")
                if isinstance(version, int) and version > 0:
                    self._record(release, version, manifest_digest(doc))
                    return
        revision = self.release_bases.get(release.name, 0) + 1
        name = storage_name(release.name, revision)
        found = await list_objects(
            target.client, SECRETS, namespace=release.namespace, fields=f"metadata.name={name}"
        )
        secret = found[0] if found else None
        seen = release_of(secret) if secret is not None else None
        if secret is None or seen is None or seen.name != release.name:
            return
        digest = await asyncio.to_thread(self.stored_digests.of, secret)
        if digest is not None:
            self._record(release, revision, digest)

    def _record(self, release: PlannedRelease, revision: int, digest: str) -> None:
        self.records[release.name] = record_of(release.name, release.namespace, revision, digest)
        self.release_bases[release.name] = revision


def _tampered(release: str, verdict: StorageVerdict) -> TamperedRelease:
    return TamperedRelease(
        component=_COMPONENT_OF[release],
        release=release,
        state=verdict.state,
        message=verdict.message,
    )


def _key(secret: dict[str, Any]) -> tuple[str, str]:
    metadata = secret.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))


async def _delete_secret(target: Target, namespace: str, name: str) -> None:
    """Delete one Secret of a release's storage; one already gone is no error."""

    async def delete() -> None:
        await target.client.delete(Secret, name, namespace=namespace)

    await unless_missing(delete)
    log.info("deleted Secret %s/%s, not written by the operator", namespace, name)
