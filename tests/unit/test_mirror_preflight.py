"""The mirror preflight before a release's helm run (operator.mirror_preflight)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
import yaml
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from modelplane.actions.registry import Registry
from modelplane.api.models import ServingStack
from modelplane.kube.client import Target
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.options import OperatorOptions
from modelplane.plan import plan
from modelplane.plan.images import parse_rules
from modelplane.plan.mirror_images import ImageNotInMirror, MirrorUnreachable, PreflightMode
from modelplane.plan.model import PlannedRelease
from modelplane.plan.sources import Sources
from modelplane.vocabulary import BlockedReason, EventReason

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "servingstack.yaml"
# A loopback address: the address guard lets it through, and nothing listens.
MIRROR = "127.0.0.1:9"
PASSWORD = "s3cret-pw"


def _release(component: str = "cert-manager") -> PlannedRelease:
    stack = ServingStack.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    p = plan(stack, None, Sources(image_mirrors=parse_rules([f"*={MIRROR}"])))
    return next(r for r in p.releases if r.component == component)


class _Client:
    def __init__(self, secrets: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.secrets = secrets
        self.asked: list[tuple[str, str]] = []

    async def get(self, kind: type, name: str, *, namespace: str) -> Secret:
        assert kind is Secret
        self.asked.append((namespace, name))
        config = self.secrets.get((namespace, name))
        if config is None:
            request = httpx2.Request("GET", f"https://target/api/v1/namespaces/{namespace}/secrets")
            body = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
            raise ApiError(response=httpx2.Response(404, json=body, request=request))
        data = base64.b64encode(json.dumps(config).encode()).decode()
        return Secret(metadata=ObjectMeta(name=name), data={".dockerconfigjson": data})


class _Target:
    def __init__(self, client: _Client) -> None:
        self.client = client


def _registry(missing: set[str], seen: list[httpx2.Request]) -> Registry:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        want = "Basic " + base64.b64encode(f"u:{PASSWORD}".encode()).decode()
        if request.headers.get("authorization") != want:
            return httpx2.Response(401, headers={"www-authenticate": 'Basic realm="r"'})
        name = request.url.path.removeprefix("/v2/").partition("/manifests/")[0]
        return httpx2.Response(404 if name in missing else 200)

    return Registry(transport=httpx2.MockTransport(handler))


def _check(
    preflight: MirrorPreflight, release: PlannedRelease, client: _Client
) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []

    def emit(kind: str, reason: str, message: str) -> None:
        events.append((kind, reason, message))

    target = cast(Target, _Target(client))
    asyncio.run(preflight.check(release, target, emit))
    return events


CONFIG = {"auths": {MIRROR: {"username": "u", "password": PASSWORD}}}


def test_every_image_there_lets_the_release_go_with_the_secrets_credentials() -> None:
    release = _release()
    seen: list[httpx2.Request] = []
    client = _Client({(release.namespace, "pull"): CONFIG})
    preflight = MirrorPreflight(PreflightMode.REQUIRE, ("pull",), _registry(set(), seen))
    assert _check(preflight, release, client) == []
    assert client.asked[0] == (release.namespace, "pull")
    heads = {r.url.path for r in seen if r.headers.get("authorization")}
    assert len(heads) == len({u.mirrored for u in release.images if u.mirrored})


def test_a_missing_image_holds_the_release_and_names_it() -> None:
    release = _release()
    missing = next(u.mirrored for u in release.images if u.mirrored)
    assert missing is not None
    name = missing.removeprefix(f"{MIRROR}/").rpartition(":")[0]
    client = _Client({(release.namespace, "pull"): CONFIG})
    preflight = MirrorPreflight(PreflightMode.WARN, ("pull",), _registry({name}, []))
    with pytest.raises(ImageNotInMirror, match=missing):
        _check(preflight, release, client)


@pytest.mark.parametrize(
    ("mode", "held"),
    [(PreflightMode.REQUIRE, True), (PreflightMode.WARN, False)],
)
def test_without_the_secret_the_mirror_cannot_be_asked(mode: PreflightMode, held: bool) -> None:
    release = _release()
    preflight = MirrorPreflight(mode, ("pull",), _registry(set(), []))
    if held:
        with pytest.raises(MirrorUnreachable, match="the pull Secret has none"):
            _check(preflight, release, _Client({}))
        return
    [(kind, reason, message)] = _check(preflight, release, _Client({}))
    assert (kind, reason) == ("Warning", EventReason.MIRROR_UNREACHABLE)
    assert release.name in message and "goes on unchecked" in message


def test_the_preflight_is_made_only_with_mirror_rules_and_not_off() -> None:
    rules = parse_rules([f"*={MIRROR}"])
    assert MirrorPreflight.of(OperatorOptions()) is None
    off = OperatorOptions(image_mirrors=rules, mirror_preflight=PreflightMode.OFF)
    assert MirrorPreflight.of(off) is None
    made = MirrorPreflight.of(OperatorOptions(image_mirrors=rules, image_pull_secrets=("p",)))
    assert made is not None and made.mode is PreflightMode.WARN and made.pull_secrets == ("p",)


def test_a_held_release_is_a_failure_with_its_reason_and_a_passed_check_clears_nothing() -> None:
    events: list[tuple[str, str, str]] = []
    failures = ComponentFailures(lambda k, r, m: events.append((k, r, m)), clock=lambda: 0.0)

    async def missing() -> None:
        raise ImageNotInMirror(BlockedReason.IMAGE_NOT_IN_MIRROR, "the image mirror lacks m/a:v1")

    async def passes() -> None:
        return None

    assert not asyncio.run(failures.check("lws", missing(), "the image check"))
    assert failures.reasons == {"lws": BlockedReason.IMAGE_NOT_IN_MIRROR}
    assert events == [
        ("Warning", EventReason.IMAGE_NOT_IN_MIRROR, "the image check failed: "
         "the image mirror lacks m/a:v1"),
    ]  # fmt: skip
    # A check that passes is not the action succeeding: the backoff stands.
    assert asyncio.run(failures.check("lws", passes(), "the image check"))
    assert failures.attempts == {"lws": 1} and "lws" in failures.failures
