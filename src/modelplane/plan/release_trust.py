"""Whether a release's storage on the target is what the operator wrote, as one named state.

Helm keeps each revision of a release in a Secret of the release's namespace
(``sh.helm.release.v1.<release>.v<N>``), and reads every Secret there that is
labelled ``owner=helm,name=<release>``. Anyone who may write a Secret in that
namespace (a team that owns ``monitoring``, where the operator installs) can
write one: Helm takes the newest as the release, the base of the next upgrade
(what it lists and the new chart lacks is deleted) and of uninstall (all it
lists is deleted), and the operator would take it for health and drift.

So the hub keeps, per release, the revision the operator's helm last wrote
and a digest of its manifest and hooks (``status.releases``, ``ReleaseRecord``),
and ``storage_state`` names, as Flux's helm-controller ``DetermineReleaseState``
does for its own question (pkg/reconcile/state.go), the one state the storage
is in, from facts alone; the reconciler carries out what it says:

- ``Unrecorded``: no record (a stack the operator managed before it kept
  records, a hub status lost, a CLI run's start): what is there is taken as
  found, and recorded.
- ``Verified``: the newest revision Helm reads is the recorded one, unchanged.
- ``Forged``: Helm reads revisions the operator did not write (newer than the
  recorded one, or Secrets not named as one revision): removed, after which
  the recorded one, unchanged, is Helm's newest again.
- ``Altered``: the recorded revision itself no longer holds what the operator
  wrote (or cannot be read): nothing can put it back, so the release is not
  judged, restored, upgraded or uninstalled until a person removes it.
- ``Missing``: the recorded revision is gone and older ones are left: Helm
  would take one the hub has no digest of, so likewise.
- ``Gone``: nothing of the release is left (after removing any forgery): no
  revision to trust or to base anything on; it is installed again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import Field

from modelplane.api.status import ReleaseRecord
from modelplane.plan.component_health import ComponentHealth
from modelplane.plan.frozen import Frozen
from modelplane.plan.health import MAX_MESSAGE, Reason, State
from modelplane.plan.workloads import MAX_NAME
from modelplane.untrusted import printable

# The most Secrets a message names; the rest are counted.
MAX_NAMED = 3
DIGEST_PREFIX = "sha256:"


class StorageState(StrEnum):
    UNRECORDED = "Unrecorded"
    VERIFIED = "Verified"
    FORGED = "Forged"
    ALTERED = "Altered"
    MISSING = "Missing"
    GONE = "Gone"


# The states in which the release's stored revision is not the operator's and
# cannot be made so: nothing of it is trusted, and helm is not run on it.
UNTRUSTED = frozenset({StorageState.ALTERED, StorageState.MISSING})


class StoredRevision(Frozen):
    """One Secret Helm reads as a revision of the release."""

    secret: str
    # The revision its name and ``version`` label agree on; None when they do
    # not (Helm reads it all the same, by its labels: not one the operator wrote).
    revision: int | None


class StorageFacts(Frozen):
    release: str
    namespace: str
    record: ReleaseRecord | None
    stored: list[StoredRevision] = Field(default_factory=list)
    # The digest of what the Secret of the recorded revision holds; None when
    # it holds nothing readable (or there is no such Secret).
    recorded_digest: str | None = None


class StorageVerdict(Frozen):
    state: StorageState
    # Secrets to delete so that Helm's newest revision is the recorded one.
    remove: list[str] = Field(default_factory=list)
    # Said in the component's message, Ready and an event; "" when all is well.
    message: str = ""

    @property
    def trusted(self) -> bool:
        return self.state not in UNTRUSTED


def storage_state(facts: StorageFacts) -> StorageVerdict:
    """The one state the release's storage is in, and the Secrets to remove to repair it."""
    record = facts.record
    if record is None:
        return StorageVerdict(state=StorageState.UNRECORDED)
    forged = sorted(
        s.secret for s in facts.stored if s.revision is None or s.revision > record.revision
    )
    recorded = [s for s in facts.stored if s.revision == record.revision]
    older = [s for s in facts.stored if s.revision is not None and s.revision < record.revision]
    where = f"release {facts.release} in {facts.namespace}"
    if recorded and facts.recorded_digest != record.manifest_digest:
        return StorageVerdict(
            state=StorageState.ALTERED,
            remove=forged,
            message=_say(
                f"Secret {facts.namespace}/{recorded[0].secret}, revision {record.revision} of "
                f"{where}, no longer holds the manifest the operator wrote "
                f"({record.manifest_digest}); it cannot be repaired, so the release is not "
                "judged, restored, upgraded or uninstalled: delete its Secrets and the release's "
                "objects you do not want, and the operator installs it again",
                forged,
                facts.namespace,
            ),
        )
    if not recorded and older:
        return StorageVerdict(
            state=StorageState.MISSING,
            remove=forged,
            message=_say(
                f"revision {record.revision} of {where}, which the operator wrote, is gone and "
                f"revision {max(s.revision or 0 for s in older)} is left, which the hub holds no "
                "digest of; the release is not judged, restored, upgraded or uninstalled until "
                "its Secrets are deleted, and the operator installs it again",
                forged,
                facts.namespace,
            ),
        )
    if not recorded:
        return StorageVerdict(
            state=StorageState.GONE,
            remove=forged,
            message=_say(
                f"revision {record.revision} of {where}, which the operator wrote, is gone; "
                "it is installed again",
                forged,
                facts.namespace,
            ),
        )
    if forged:
        return StorageVerdict(
            state=StorageState.FORGED,
            remove=forged,
            message=_say(
                f"the operator wrote revision {record.revision} of {where} "
                f"({record.manifest_digest}) and no other after it",
                forged,
                facts.namespace,
            ),
        )
    return StorageVerdict(state=StorageState.VERIFIED)


def _say(head: str, forged: Sequence[str], namespace: str) -> str:
    if not forged:
        return printable(head, MAX_MESSAGE)
    shown = [f"{namespace}/{s}" for s in forged[:MAX_NAMED]]
    more = len(forged) - len(shown)
    named = ", ".join(shown) + (f" and {more} more" if more else "")
    return printable(
        f"{head}; Secret {named}, which Helm would read as revisions of it, "
        "are not the operator's and are deleted",
        MAX_MESSAGE,
    )


def manifest_digest(release: Mapping[str, Any]) -> str:
    """sha256 of what Helm acts on from a stored revision: its manifest and its hooks.

    ``release`` is Helm's release as JSON (its storage's, or ``helm ... -o
    json``'s). Upgrade and uninstall delete what the manifest lists, and
    uninstall runs the hooks; a hook's ``last_run`` is left out, since Helm
    writes it again when it runs the hook.
    """
    manifest = release.get("manifest")
    hooks = release.get("hooks")
    kept = [
        {k: v for k, v in h.items() if k != "last_run"}
        for h in (hooks if isinstance(hooks, list) else [])
        if isinstance(h, Mapping)
    ]
    blob = json.dumps(
        {"manifest": manifest if isinstance(manifest, str) else "", "hooks": kept},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return DIGEST_PREFIX + hashlib.sha256(blob).hexdigest()


class TamperedRelease(Frozen):
    """A release whose storage the operator does not trust: for the plan's health and actions."""

    component: str
    release: str
    state: StorageState
    message: str

    def health(self) -> ComponentHealth:
        return ComponentHealth(
            component=printable(self.component, MAX_NAME),
            state=State.DEGRADED,
            reason=Reason.RELEASE_STORAGE_TAMPERED,
            message=self.message,
        )
