"""Asking the mirror about an upgrade's images before its rollout turn (operator.upgrade_images)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from modelplane.api.models import ServingStack
from modelplane.kube.client import Target
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.rollout import MirrorAnswer, Rollout
from modelplane.operator.upgrade_images import UpgradeImages
from modelplane.plan import plan
from modelplane.plan.images import parse_rules
from modelplane.plan.mirror_images import Verdict, to_look_up
from modelplane.plan.rollout import Policy
from modelplane.plan.sources import Sources
from modelplane.vocabulary import BlockedReason, EventReason

from .conftest import manifest

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KPS = "kube-prometheus-stack"
SOURCES = Sources(image_mirrors=parse_rules(["*=m.internal"]))
LACKS = Verdict(True, BlockedReason.IMAGE_NOT_IN_MIRROR, "the image mirror lacks m.internal/x")


def _body(desired: str, installed: str) -> dict[str, Any]:
    body = manifest(components="Managed", versions={"prometheus": desired})
    body["metadata"] = {"name": "a", "namespace": "fleet"}
    body["status"] = {
        "components": [
            {"name": KPS, "mode": "Managed", "version": installed, "installedVersion": installed}
        ]
    }
    return body


@dataclass
class _Mirror:
    said: Verdict
    asked: list[tuple[tuple[str, ...], tuple[str, ...], str]] = field(default_factory=list)

    async def judge(
        self, images: Sequence[str], namespaces: Sequence[str], target: Target, what: str
    ) -> Verdict:
        self.asked.append((tuple(images), tuple(namespaces), what))
        return self.said


def _asker(mirror: _Mirror, events: list[tuple[str, str, str]]) -> UpgradeImages:
    def emit(type_: str, reason: str, message: str) -> None:
        events.append((type_, reason, message))

    return UpgradeImages(cast(MirrorPreflight, mirror), SOURCES, emit, "fleet/a")


async def _target() -> Target:
    return cast(Target, object())


def _ask(asker: UpgradeImages, r: Rollout, body: dict[str, Any]) -> MirrorAnswer | None:
    return asyncio.run(asker.ask(r, body, NOW, None, _target))


def test_the_upgrades_images_are_asked_about_and_a_hold_is_said_once() -> None:
    mirror, events = _Mirror(LACKS), []
    asker = _asker(mirror, events)
    r = Rollout(Policy(), asks_mirror=True)
    body = _body("84.5.0", "84.4.0")
    assert _ask(asker, r, body) == MirrorAnswer(LACKS)
    [(images, namespaces, what)] = mirror.asked
    # The moved component's images only, at its desired version, in the mirror.
    stack = ServingStack.model_validate({k: v for k, v in body.items() if k != "status"})
    uses = plan(stack, None, SOURCES).images
    assert images == to_look_up(u for u in uses if u.component == KPS)
    assert images and not any("cert-manager" in i for i in images)
    assert namespaces and what == "the upgrade"
    assert [(t, r_) for t, r_, _ in events] == [("Warning", EventReason.IMAGE_NOT_IN_MIRROR)]
    assert "m.internal/x" in events[0][2]
    _ask(asker, r, body)
    assert len(events) == 1


def test_nothing_is_asked_of_a_stack_that_would_not_start() -> None:
    mirror = _Mirror(Verdict(False))
    asker = _asker(mirror, [])
    r = Rollout(Policy(), asks_mirror=True)
    # Up to date: no upgrade to start.
    assert _ask(asker, r, _body("84.4.0", "84.4.0")) is None
    assert mirror.asked == []


def test_a_target_that_cannot_be_read_is_said_and_holds() -> None:
    mirror = _Mirror(Verdict(False))
    asker = _asker(mirror, [])

    async def refused() -> Target:
        raise ConnectionRefusedError("connection refused")

    r = Rollout(Policy(), asks_mirror=True)
    answer = asyncio.run(asker.ask(r, _body("84.5.0", "84.4.0"), NOW, None, refused))
    assert answer is not None and answer.error is not None and "refused" in answer.error
