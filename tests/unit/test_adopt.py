"""spec.adopt carried out: what helm is told, what the operator holds back, what diff lists.

The rule of what is adopted is plan.conflicts' (tests/unit/test_conflicts.py);
tests/integration/test_conflicts.py adopts a real release's objects.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from modelplane.actions.conflict_scan import ConflictsFound
from modelplane.actions.helm import Helm
from modelplane.api.models import ServingStack
from modelplane.cli.diff import adopting, print_text
from modelplane.operator import conflicts
from modelplane.plan import Observed, plan
from modelplane.plan.conflicts import Conflict, ConflictKind
from modelplane.plan.diff import Diff, Reads
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.plan.sources import Sources

from .conftest import manifest
from .test_helm_connections import kubeconfig

CM = "cert-manager"


def _release(action: ReleaseAction = ReleaseAction.INSTALL) -> PlannedRelease:
    stack = ServingStack.model_validate(manifest())
    release = next(r for r in plan(stack, Observed(), Sources()).releases if r.component == CM)
    return release.model_copy(update={"action": action})


def _recording_helm(tmp: Path) -> Helm:
    script = tmp / "helm"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp}/argv\n')
    script.chmod(0o755)
    return Helm(str(script), tmp / "home")


@pytest.mark.parametrize("action", [ReleaseAction.INSTALL, ReleaseAction.UPGRADE])
@pytest.mark.parametrize("take", [True, False])
async def test_helm_takes_ownership_only_when_told(
    action: ReleaseAction, take: bool, tmp_path: Path
) -> None:
    helm = _recording_helm(tmp_path)
    await helm.apply(_release(action), kubeconfig("https://127.0.0.1:1"), take_ownership=take)
    (line,) = (tmp_path / "argv").read_text().splitlines()
    assert line.startswith(f"{action.value} mp-cert-manager ")
    assert ("--take-ownership" in line.split()) is take


def _conflict(kind: ConflictKind, name: str) -> Conflict:
    return Conflict(
        component=CM,
        kind=kind,
        object=f"Deployment cert-manager/{name}",
        owner="Helm release cert-manager/other-cm",
        detail="exists",
    )


TAKEN = _conflict(ConflictKind.TAKEN, "cert-manager")
SECOND = _conflict(ConflictKind.SECOND_INSTANCE, "cm-2")


@pytest.mark.parametrize(
    ("found", "adopt", "adopted", "refused"),
    [
        ([], (), [], False),
        ([TAKEN], (), [], True),
        ([TAKEN], (CM,), [TAKEN], False),
        # A second instance holds an adopted component back still.
        ([TAKEN, SECOND], (CM,), None, True),
    ],
)
async def test_the_operator_holds_back_what_is_not_adopted(
    monkeypatch: pytest.MonkeyPatch,
    found: list[Conflict],
    adopt: tuple[str, ...],
    adopted: list[Conflict] | None,
    refused: bool,
) -> None:
    async def scan(*_: Any) -> list[Conflict]:
        return found

    monkeypatch.setattr(conflicts, "scan_release", scan)
    target: Any = type("T", (), {"client": None})()
    call = conflicts.hold_back(Helm("", Path()), target, _release(), "", frozenset(), adopt)
    if not refused:
        assert await call == adopted
        return
    with pytest.raises(ConflictsFound) as caught:
        await call
    if adopt:
        # Only what stands is named, with why adopting does not take it.
        assert [c.object for c in caught.value.conflicts] == [SECOND.object]
        assert "would leave two" in str(caught.value)


async def test_a_rollback_is_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scan(*_: Any) -> list[Conflict]:
        raise AssertionError("scanned")

    monkeypatch.setattr(conflicts, "scan_release", scan)
    release = _release(ReleaseAction.ROLLBACK)
    assert await conflicts.hold_back(Helm("", Path()), None, release, "", frozenset()) == []  # type: ignore[arg-type]


def test_the_adopted_event_names_each_object_by_its_former_owner() -> None:
    webhook = TAKEN.model_copy(update={"object": "Deployment cert-manager/webhook"})
    service = TAKEN.model_copy(update={"object": "Service cert-manager/webhook"})
    crd = TAKEN.model_copy(
        update={"object": "CustomResourceDefinition issuers.cert-manager.io", "owner": "OLM"}
    )
    message = conflicts.adopted_message(_release(), [TAKEN, webhook, service, crd])
    assert message == (
        "release mp-cert-manager took over 4 objects (spec.adopt) "
        "from Helm release cert-manager/other-cm: "
        "Deployment cert-manager/cert-manager, cert-manager/webhook; "
        "Service cert-manager/webhook; "
        "from OLM: CustomResourceDefinition issuers.cert-manager.io"
    )
    assert conflicts.adopted_message(_release(), [TAKEN]).startswith(
        "release mp-cert-manager took over 1 object (spec.adopt) from "
    )


def test_diff_lists_what_it_adopts_first_and_what_stands_after() -> None:
    reads = adopting(Reads(conflicts=[TAKEN, SECOND]), [CM])
    assert (reads.adopted, [c.object for c in reads.conflicts]) == ([TAKEN], [SECOND.object])
    out = io.StringIO()
    d = Diff(name="w", namespace="p", server="s", conflicts=reads.conflicts, adopted=reads.adopted)
    print_text(d, Console(file=out, highlight=False, soft_wrap=True))
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "adopts: cert-manager: Deployment cert-manager/cert-manager "
        "from Helm release cert-manager/other-cm"
    )
    stands = next(line for line in lines if line.startswith("conflict: "))
    assert "cm-2" in stands and "spec.adopt does not take over a second instance" in stands


def test_without_adopt_diff_adopts_nothing() -> None:
    reads = adopting(Reads(conflicts=[TAKEN]), [])
    assert (reads.adopted, reads.conflicts) == ([], [TAKEN])
