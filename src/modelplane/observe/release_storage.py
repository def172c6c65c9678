"""What Helm would read as a release's storage on the target, as facts for ``plan.release_trust``.

Helm's Secret driver takes every Secret of the release's namespace labelled
``owner=helm,name=<release>`` as a revision of it (pkg/storage/driver/
secrets.go, ``Query``), whatever its name; the operator lists the same
(``observe.state.release_secret_selector``). A Secret counts as the revision
its name and ``version`` label agree on (``observe.state.release_of``) and
that the release it stores says it is: Helm orders revisions by the
``version`` of the stored JSON, not by the Secret's name, so an older
revision rewritten to say 99 would be Helm's newest. One where they do not
agree is still read by Helm, and is no revision the operator wrote.

Each Secret is decoded once per resourceVersion (``StoredDigests``): the
history Helm keeps (five revisions at most, ``--history-max``) when first
seen, and a new revision after each upgrade.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from modelplane.api.status import ReleaseRecord
from modelplane.observe.releases import ReleaseReadError, stored_release
from modelplane.observe.state import release_of
from modelplane.plan.release_trust import StorageFacts, StoredRevision, manifest_digest

log = logging.getLogger("modelplane.operator")


def helm_reads(secrets: list[dict[str, Any]], release: str, namespace: str) -> list[dict[str, Any]]:
    """The Secrets among ``secrets`` that Helm reads as revisions of ``release``."""
    out = []
    for secret in secrets:
        metadata = secret.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if (
            metadata.get("namespace") == namespace
            and labels.get("owner") == "helm"
            and labels.get("name") == release
            and isinstance(metadata.get("name"), str)
        ):
            out.append(secret)
    return out


def stored_revision(secret: dict[str, Any], release: str, digests: StoredDigests) -> StoredRevision:
    found = release_of(secret)
    name = str((secret.get("metadata") or {}).get("name"))
    agrees = found is not None and found.name == release
    if found is None or not agrees:
        return StoredRevision(secret=name, revision=None)
    stored = digests.stored(secret)
    # An unreadable one is kept as the revision its name says: Helm fails on
    # it rather than taking it, and the recorded one's digest says the rest.
    if stored is not None and (stored.name, stored.version) != (release, found.revision):
        return StoredRevision(secret=name, revision=None)
    return StoredRevision(secret=name, revision=found.revision)


@dataclass(frozen=True)
class Stored:
    """What a stored revision says it is, and its manifest's digest."""

    name: object
    version: object
    digest: str


class StoredDigests:
    """What each stored revision holds, decoded once per Secret version; safe to lose."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], Stored | None] = {}

    def stored(self, secret: dict[str, Any]) -> Stored | None:
        """What ``secret`` stores; None if it is unreadable."""
        metadata = secret.get("metadata") or {}
        key = (
            str(metadata.get("namespace")),
            str(metadata.get("name")),
            str(metadata.get("resourceVersion") or ""),
        )
        if key not in self._kept:
            self._kept[key] = _read(secret, f"Secret {key[0]}/{key[1]}")
        return self._kept[key]

    def of(self, secret: dict[str, Any]) -> str | None:
        """``plan.release_trust.manifest_digest`` of what ``secret`` stores; None if unreadable."""
        stored = self.stored(secret)
        return stored.digest if stored is not None else None

    def keep_only(self, secrets: list[dict[str, Any]]) -> None:
        """Forget the digests of Secret versions no longer listed."""
        listed = {
            (
                str((s.get("metadata") or {}).get("namespace")),
                str((s.get("metadata") or {}).get("name")),
                str((s.get("metadata") or {}).get("resourceVersion") or ""),
            )
            for s in secrets
        }
        self._kept = {k: v for k, v in self._kept.items() if k in listed}


def _read(secret: dict[str, Any], where: str) -> Stored | None:
    try:
        doc = stored_release(secret, where)
    except ReleaseReadError as err:
        log.warning("%s", err)
        return None
    return Stored(name=doc.get("name"), version=doc.get("version"), digest=manifest_digest(doc))


def storage_facts(
    secrets: list[dict[str, Any]],
    release: str,
    namespace: str,
    record: ReleaseRecord | None,
    digests: StoredDigests,
) -> StorageFacts:
    """The facts ``storage_state`` decides on, from the release Secrets listed in ``namespace``.

    Decodes the Secrets not decoded before (a MiB of gzip each): call it off
    the event loop.
    """
    read = helm_reads(secrets, release, namespace)
    stored = [stored_revision(s, release, digests) for s in read]
    recorded_digest = None
    if record is not None:
        secret = next(
            (s for s, r in zip(read, stored, strict=True) if r.revision == record.revision), None
        )
        recorded_digest = digests.of(secret) if secret is not None else None
    return StorageFacts(
        release=release,
        namespace=namespace,
        record=record,
        stored=sorted(stored, key=lambda s: (s.revision or 0, s.secret)),
        recorded_digest=recorded_digest,
    )


def newest(facts: StorageFacts, removed: list[str]) -> StoredRevision | None:
    """The newest revision left once ``removed`` is gone: what Helm takes as the release."""
    left = [s for s in facts.stored if s.revision is not None and s.secret not in removed]
    return max(left, key=lambda s: s.revision or 0, default=None)
