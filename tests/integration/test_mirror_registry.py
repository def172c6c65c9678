"""The mirror preflight against a real registry on loopback (Debian's docker-registry).

HTTPS with the test CA and htpasswd Basic auth, images copied in with
skopeo: found, missing, unauthorized (no credentials, wrong ones) and
unreachable; then a release's preflight, with the pull Secret's
credentials, held for the one image the mirror lacks and let go once it is
copied in. ``hack/test-deps.sh`` installs docker-registry, skopeo and
apache2-utils; without them this test fails, naming them.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret
from tests.registry import PASSWORD, USER, LoopbackRegistry, loopback_registry, missing_tools

from modelplane.actions.registry import Credentials, Registry
from modelplane.api.models import ServingStack
from modelplane.kube.client import Target
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.plan import plan
from modelplane.plan.images import parse_rules
from modelplane.plan.mirror_images import Answer, ImageNotInMirror, PreflightMode, release_lookups
from modelplane.plan.model import PlannedRelease
from modelplane.plan.sources import Sources

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "servingstack.yaml"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackRegistry]:
    assert not missing_tools(), f"run hack/test-deps.sh: missing {missing_tools()}"
    with loopback_registry(tmp_path_factory.mktemp("registry")) as registry:
        registry.push("team/present:v1")
        yield registry


def _ask(
    mirror: LoopbackRegistry, images: list[str], creds: Credentials | None
) -> list[tuple[Answer, str]]:
    registry = Registry(ssl_context=mirror.ssl_context(), timeout=5.0)
    found = asyncio.run(registry.lookup_all(images, lambda r, n: creds))
    return [(x.answer, x.detail) for x in found]


def test_an_image_there_is_found_and_one_not_there_is_missing(mirror: LoopbackRegistry) -> None:
    creds = Credentials(USER, PASSWORD)
    images = [f"{mirror.host}/team/present:v1", f"{mirror.host}/team/absent:v1",
              f"{mirror.host}/team/present:v2"]  # fmt: skip
    assert [a for a, _ in _ask(mirror, images, creds)] == [
        Answer.FOUND,
        Answer.MISSING,
        Answer.MISSING,
    ]


def test_by_digest_as_well_as_by_tag(mirror: LoopbackRegistry) -> None:
    digest = json.loads((mirror.layout / "index.json").read_text())["manifests"][0]["digest"]
    creds = Credentials(USER, PASSWORD)
    other = "sha256:" + "0" * 64
    found = _ask(
        mirror,
        [f"{mirror.host}/team/present:v1@{digest}", f"{mirror.host}/team/present@{other}"],
        creds,
    )
    assert [a for a, _ in found] == [Answer.FOUND, Answer.MISSING]


@pytest.mark.parametrize(
    ("creds", "detail"),
    [
        (None, "the pull Secret has none"),
        (Credentials(USER, "wrong-password"), "refused the pull Secret's credentials (401)"),
    ],
)
def test_without_good_credentials_the_mirror_cannot_tell(
    mirror: LoopbackRegistry, creds: Credentials | None, detail: str
) -> None:
    [(answer, said)] = _ask(mirror, [f"{mirror.host}/team/present:v1"], creds)
    assert answer is Answer.UNAUTHORIZED
    assert detail in said
    assert "wrong-password" not in said


def test_a_mirror_that_does_not_answer_is_unreachable(mirror: LoopbackRegistry) -> None:
    # The registry's CA, and a port nothing listens on: refused at once.
    [(answer, _)] = _ask(mirror, ["127.0.0.1:9/team/present:v1"], Credentials(USER, PASSWORD))
    assert answer is Answer.UNREACHABLE


def test_a_certificate_the_operator_does_not_trust_is_unreachable(
    mirror: LoopbackRegistry,
) -> None:
    registry = Registry(timeout=5.0)  # the system's CAs, not the test CA
    [found] = asyncio.run(
        registry.lookup_all([f"{mirror.host}/team/present:v1"], lambda r, n: None)
    )
    assert found.answer is Answer.UNREACHABLE
    assert "certificate" in found.detail.lower()


class _Client:
    def __init__(self, namespace: str, config: dict[str, Any]) -> None:
        data = base64.b64encode(json.dumps(config).encode()).decode()
        self.secret = Secret(
            metadata=ObjectMeta(name="mirror-pull", namespace=namespace),
            data={".dockerconfigjson": data},
        )
        self.namespace = namespace

    async def get(self, kind: type, name: str, *, namespace: str) -> Secret:
        assert (kind, name, namespace) == (Secret, "mirror-pull", self.namespace)
        return self.secret


class _Target:
    def __init__(self, client: _Client) -> None:
        self.client = client


def _release(mirror: LoopbackRegistry) -> PlannedRelease:
    stack = ServingStack.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    sources = Sources(
        image_mirrors=parse_rules([f"*={mirror.host}/m"]), image_pull_secrets=("mirror-pull",)
    )
    return next(r for r in plan(stack, None, sources).releases if r.component == "cert-manager")


def test_a_release_waits_for_the_one_image_the_mirror_lacks(mirror: LoopbackRegistry) -> None:
    release = _release(mirror)
    images = release_lookups(release)
    assert len(images) > 1
    *present, lacking = images
    for image in present:
        mirror.push(image.removeprefix(f"{mirror.host}/"))
    target = cast(Target, _Target(_Client(release.namespace, mirror.docker_config())))
    events: list[tuple[str, str, str]] = []

    def preflight() -> MirrorPreflight:
        # A fresh cache each time, as once its thirty seconds are over.
        registry = Registry(ssl_context=mirror.ssl_context(), timeout=5.0)
        return MirrorPreflight(PreflightMode.REQUIRE, ("mirror-pull",), registry)

    def check() -> None:
        asyncio.run(preflight().check(release, target, lambda *e: events.append(e)))

    with pytest.raises(ImageNotInMirror) as held:
        check()
    assert lacking in str(held.value)
    assert not any(image in str(held.value) for image in present)
    mirror.push(lacking.removeprefix(f"{mirror.host}/"))
    check()
    assert events == []
