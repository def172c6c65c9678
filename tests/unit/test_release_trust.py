"""The state of a release's storage against the hub's record: facts in, one state out."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from modelplane.api.status import ReleaseRecord
from modelplane.plan import Observed, plan
from modelplane.plan.health import Reason
from modelplane.plan.model import ReleaseAction, ReleaseState
from modelplane.plan.release_trust import (
    StorageFacts,
    StorageState,
    StoredRevision,
    TamperedRelease,
    manifest_digest,
    storage_state,
)

from .conftest import StackFactory, installed

RELEASE = "mp-kube-prometheus-stack"
NS = "monitoring"
OURS = manifest_digest({"manifest": "kind: ConfigMap\n", "hooks": []})
THEIRS = manifest_digest({"manifest": "kind: ClusterRole\n", "hooks": []})


def _secret(revision: int) -> str:
    return f"sh.helm.release.v1.{RELEASE}.v{revision}"


def _stored(*revisions: int | None, odd: str = "tenant-made") -> list[StoredRevision]:
    return [
        StoredRevision(secret=_secret(r) if r is not None else odd, revision=r) for r in revisions
    ]


def _record(revision: int) -> ReleaseRecord:
    return ReleaseRecord.model_validate(
        {"name": RELEASE, "namespace": NS, "revision": revision, "manifestDigest": OURS}
    )


@pytest.mark.parametrize(
    ("record", "stored", "digest", "state", "remove"),
    [
        pytest.param(None, _stored(1), OURS, StorageState.UNRECORDED, [], id="no record: as found"),
        pytest.param(None, [], None, StorageState.UNRECORDED, [], id="no record, nothing stored"),
        pytest.param(_record(2), _stored(1, 2), OURS, StorageState.VERIFIED, [], id="verified"),
        pytest.param(
            _record(1),
            _stored(1, 2),
            OURS,
            StorageState.FORGED,
            [_secret(2)],
            id="a newer revision: removed",
        ),
        pytest.param(
            _record(1),
            _stored(1, 2, 3),
            OURS,
            StorageState.FORGED,
            [_secret(2), _secret(3)],
            id="every newer revision removed",
        ),
        pytest.param(
            _record(1),
            _stored(1, None),
            OURS,
            StorageState.FORGED,
            ["tenant-made"],
            id="a Secret Helm reads, not named as one revision: removed",
        ),
        pytest.param(
            _record(2),
            _stored(1, 2),
            THEIRS,
            StorageState.ALTERED,
            [],
            id="the recorded revision rewritten: not repairable",
        ),
        pytest.param(
            _record(2),
            _stored(2),
            None,
            StorageState.ALTERED,
            [],
            id="the recorded revision unreadable",
        ),
        pytest.param(
            _record(2),
            _stored(2, 3),
            THEIRS,
            StorageState.ALTERED,
            [_secret(3)],
            id="rewritten, and a newer one: the newer removed all the same",
        ),
        pytest.param(
            _record(3),
            _stored(1, 2),
            None,
            StorageState.MISSING,
            [],
            id="the recorded revision gone, older left: not repairable",
        ),
        pytest.param(
            _record(3),
            _stored(1, 4),
            None,
            StorageState.MISSING,
            [_secret(4)],
            id="gone, older left and a newer one: the newer removed",
        ),
        pytest.param(
            _record(1), [], None, StorageState.GONE, [], id="nothing left: installed again"
        ),
        pytest.param(
            _record(1),
            _stored(2),
            None,
            StorageState.GONE,
            [_secret(2)],
            id="only a forgery left: removed, then installed again",
        ),
    ],
)
def test_storage_state(
    record: ReleaseRecord | None,
    stored: list[StoredRevision],
    digest: str | None,
    state: StorageState,
    remove: list[str],
) -> None:
    facts = StorageFacts(
        release=RELEASE, namespace=NS, record=record, stored=stored, recorded_digest=digest
    )
    verdict = storage_state(facts)
    assert (verdict.state, verdict.remove) == (state, remove)
    assert verdict.trusted is (state not in (StorageState.ALTERED, StorageState.MISSING))
    # Said whenever something is wrong, naming every Secret it removes.
    quiet = state in (StorageState.UNRECORDED, StorageState.VERIFIED)
    assert (verdict.message == "") is quiet
    for secret in remove[:3]:
        assert f"{NS}/{secret}" in verdict.message


def test_the_digest_ignores_when_a_hook_last_ran_but_not_what_it_does() -> None:
    hook = {"name": "h", "kind": "Job", "manifest": "kind: Job\n", "events": ["pre-delete"]}
    base = manifest_digest({"manifest": "m", "hooks": [hook]})
    ran = {**hook, "last_run": {"phase": "Succeeded"}}
    assert manifest_digest({"manifest": "m", "hooks": [ran]}) == base
    other = {**hook, "manifest": "kind: ClusterRoleBinding\n"}
    assert manifest_digest({"manifest": "m", "hooks": [other]}) != base
    assert manifest_digest({"manifest": "m2", "hooks": [hook]}) != base
    assert base.startswith("sha256:") and len(base) == 71


def test_a_tampered_release_is_neither_upgraded_nor_ready(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    stack = make_stack()
    base = serve_everything()
    done = installed(plan(stack, base), base)
    # Out of sync, as a forged digest label would make it: still not upgraded.
    seen = done.releases[RELEASE].model_copy(update={"digest": "forged"})
    tampered = TamperedRelease(
        component="kube-prometheus-stack",
        release=RELEASE,
        state=StorageState.ALTERED,
        message="Secret monitoring/x no longer holds the manifest the operator wrote",
    )
    observed = done.model_copy(
        update={
            "releases": {**done.releases, RELEASE: seen},
            "tampered_releases": [tampered],
            "observed_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )
    p = plan(stack, observed)
    (release,) = [r for r in p.releases if r.name == RELEASE]
    assert (release.state, release.action) == (ReleaseState.OUT_OF_SYNC, ReleaseAction.NONE)
    (health,) = p.unhealthy
    assert (health.component, health.reason) == (
        "kube-prometheus-stack",
        Reason.RELEASE_STORAGE_TAMPERED,
    )
    component = next(c for c in p.components if c.name == "kube-prometheus-stack")
    assert component.state == "Degraded" and tampered.message in component.message
