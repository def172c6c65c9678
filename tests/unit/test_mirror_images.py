"""The mirror preflight's decisions and the list of images to copy (plan.mirror_images)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modelplane.api.models import ServingStack
from modelplane.catalog.images import Runs
from modelplane.plan import plan
from modelplane.plan.images import ImageUse, parse_rules
from modelplane.plan.mirror_images import (
    Answer,
    ImageNotInMirror,
    Lookup,
    ManifestRef,
    MirrorUnreachable,
    PreflightMode,
    Verdict,
    manifest_ref,
    object_lookups,
    raise_for,
    release_lookups,
    to_copy,
    to_look_up,
    upgrade_lookups,
    verdict,
)
from modelplane.plan.model import ReleaseAction
from modelplane.plan.sources import Sources
from modelplane.vocabulary import BlockedReason

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "servingstack.yaml"
DIGEST = "sha256:" + "a" * 64


def use(image: str, mirrored: str | None, runs: Runs = Runs.ALWAYS) -> ImageUse:
    return ImageUse(component="c", image=image, mirrored=mirrored, runs=runs)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("m.internal/jetstack/cert-manager-controller:v1.18.2",
         ManifestRef("m.internal", "jetstack/cert-manager-controller", "v1.18.2")),
        # The digest is what the kubelet pulls when both are given.
        (f"m.internal:5000/a/b:v1@{DIGEST}", ManifestRef("m.internal:5000", "a/b", DIGEST)),
        ("m.internal/a", ManifestRef("m.internal", "a", "latest")),
    ],
)  # fmt: skip
def test_a_manifest_is_asked_for_by_digest_else_tag(image: str, expected: ManifestRef) -> None:
    assert manifest_ref(image) == expected


@pytest.mark.parametrize(
    ("uses", "expected"),
    [
        ([], ()),
        # Not moved: pulled from its own registry, not looked up in the mirror.
        ([use("quay.io/a:v1", None)], ()),
        ([use("quay.io/a:v1", "m/a:v1"), use("quay.io/b:v1", "m/b:v1", Runs.HOOK)],
         ("m/a:v1", "m/b:v1")),
        # Started later by a controller: pulled all the same.
        ([use("quay.io/a:v1", "m/a:v1", Runs.RUNTIME)], ("m/a:v1",)),
        # Off unless a feature is turned on: never pulled.
        ([use("quay.io/a:v1", "m/a:v1", Runs.OFF)], ()),
        # Each once.
        ([use("quay.io/a:v1", "m/a:v1"), use("quay.io/a:v1", "m/a:v1")], ("m/a:v1",)),
    ],
)  # fmt: skip
def test_the_images_to_look_up(uses: list[ImageUse], expected: tuple[str, ...]) -> None:
    assert to_look_up(uses) == expected


def _of(component: str, image: str, runs: Runs = Runs.ALWAYS) -> ImageUse:
    return ImageUse(component=component, image=f"quay.io/{image}", mirrored=f"m/{image}", runs=runs)


@pytest.mark.parametrize(
    ("uses", "upgrading", "expected"),
    [
        # Only the images of the components the upgrade moves.
        ([_of("a", "a:v2"), _of("b", "b:v1")], {"a"}, ("m/a:v2",)),
        # A product object's image follows its component's version (the EnvoyProxy's).
        ([_of("a", "a:v2"), _of("a", "envoy:v2", Runs.RUNTIME)], {"a"}, ("m/a:v2", "m/envoy:v2")),
        ([_of("a", "a:v2", Runs.OFF)], {"a"}, ()),
        ([_of("a", "a:v2")], set(), ()),
    ],
)  # fmt: skip
def test_the_images_an_upgrade_looks_up(
    uses: list[ImageUse], upgrading: set[str], expected: tuple[str, ...]
) -> None:
    assert upgrade_lookups(uses, upgrading) == expected


ENVOY = {
    "kind": "EnvoyProxy",
    "spec": {
        "provider": {"kubernetes": {"envoyDeployment": {"container": {"image": "m/envoy:v2"}}}}
    },
}
SERVER = {
    "kind": "Deployment",
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "a", "image": "m/a:v2"},
                    {"name": "b", "image": "m/a:v2"},
                    {"name": "c", "image": "quay.io/c:v1"},
                ]
            }
        }
    },
}


@pytest.mark.parametrize(
    ("body", "uses", "expected"),
    [
        # The EnvoyProxy's image, where the plan lists it as run from the mirror.
        (ENVOY, [_of("a", "envoy:v2", Runs.RUNTIME)], ("m/envoy:v2",)),
        # Each once; an image the rules do not move is not the mirror's.
        (SERVER, [_of("a", "a:v2"), use("quay.io/c:v1", None)], ("m/a:v2",)),
        # An object that names no listed image: nothing to ask.
        ({"kind": "Namespace", "metadata": {"name": "m/a:v2-not"}}, [_of("a", "a:v2")], ()),
        (ENVOY, [_of("a", "envoy:v2", Runs.OFF)], ()),
    ],
)  # fmt: skip
def test_the_images_a_product_object_looks_up(
    body: dict[str, object], uses: list[ImageUse], expected: tuple[str, ...]
) -> None:
    assert object_lookups(body, uses) == expected


def test_the_verdict_names_what_it_holds() -> None:
    said = verdict([Lookup("m/b:v1", Answer.MISSING)], PreflightMode.WARN, "the upgrade")
    assert said.message.endswith("copy it in and the upgrade goes on")


FOUND = Lookup("m/a:v1", Answer.FOUND)
MISSING = Lookup("m/b:v1", Answer.MISSING)
REFUSED = Lookup("m/c:v1", Answer.UNAUTHORIZED, "refused (401)")
SILENT = Lookup("m/d:v1", Answer.UNREACHABLE, "connection refused")


@pytest.mark.parametrize(
    ("lookups", "mode", "hold", "reason", "words"),
    [
        ([FOUND], PreflightMode.REQUIRE, False, None, ""),
        ([], PreflightMode.REQUIRE, False, None, ""),
        # A missing image holds the release in either mode, and is named.
        ([FOUND, MISSING], PreflightMode.WARN, True, BlockedReason.IMAGE_NOT_IN_MIRROR, "m/b:v1"),
        ([MISSING], PreflightMode.REQUIRE, True, BlockedReason.IMAGE_NOT_IN_MIRROR, "lacks m/b:v1"),
        # Missing beside unknown: the missing one is the reason, both are said.
        ([MISSING, SILENT], PreflightMode.WARN, True, BlockedReason.IMAGE_NOT_IN_MIRROR,
         "m/d:v1: connection refused"),
        # Unknown: held under require, said and let go under warn.
        ([FOUND, SILENT], PreflightMode.REQUIRE, True, BlockedReason.MIRROR_UNREACHABLE,
         "the release waits"),
        ([REFUSED], PreflightMode.WARN, False, BlockedReason.MIRROR_UNREACHABLE,
         "m/c:v1: refused (401); the release goes on unchecked"),
        # Off: nothing is decided from lookups (none are made).
        ([MISSING], PreflightMode.OFF, False, None, ""),
    ],
)  # fmt: skip
def test_what_the_lookups_mean_for_a_release(
    lookups: list[Lookup],
    mode: PreflightMode,
    hold: bool,
    reason: BlockedReason | None,
    words: str,
) -> None:
    said = verdict(lookups, mode)
    assert (said.hold, said.reason) == (hold, reason)
    assert words in said.message


@pytest.mark.parametrize(
    ("said", "raised"),
    [
        (Verdict(False), None),
        # Said, not held (warn): nothing raised.
        (Verdict(False, BlockedReason.MIRROR_UNREACHABLE, "x"), None),
        (Verdict(True, BlockedReason.IMAGE_NOT_IN_MIRROR, "x"), ImageNotInMirror),
        (Verdict(True, BlockedReason.MIRROR_UNREACHABLE, "x"), MirrorUnreachable),
    ],
)
def test_a_held_release_raises_with_its_reason(said: Verdict, raised: type | None) -> None:
    if raised is None:
        raise_for(said)
        return
    with pytest.raises(raised) as caught:
        raise_for(said)
    assert caught.value.condition_reason() == said.reason


def _stack() -> ServingStack:
    return ServingStack.model_validate(yaml.safe_load(EXAMPLE.read_text()))


def test_only_a_release_about_to_run_is_looked_up() -> None:
    p = plan(_stack(), None, Sources(image_mirrors=parse_rules(["*=mirror.internal"])))
    release = next(r for r in p.releases if r.component == "cert-manager")
    assert release.action is ReleaseAction.INSTALL
    images = release_lookups(release)
    assert images and all(i.startswith("mirror.internal/") for i in images)
    for action in (ReleaseAction.NONE, ReleaseAction.WAIT):
        assert release_lookups(release.model_copy(update={"action": action})) == ()


@pytest.mark.parametrize(
    ("uses", "syncs", "copies"),
    [
        # skopeo sync puts an image at <destination>/<last path component>.
        ([use("quay.io/jetstack/cert-manager-controller:v1", "m.internal/jetstack/"
              "cert-manager-controller:v1"),
          use("quay.io/jetstack/cert-manager-webhook:v1", "m.internal/jetstack/"
              "cert-manager-webhook:v1"),
          use("ghcr.io/kai/op:v2", "m.internal/kai/op:v2"),
          use("ghcr.io/kai/off:v2", "m.internal/kai/off:v2", Runs.OFF),
          use("docker.io/envoyproxy/envoy:v1", None)],
         [("m.internal/jetstack",
           {"quay.io": {"images": {"jetstack/cert-manager-controller": ["v1"],
                                   "jetstack/cert-manager-webhook": ["v1"]}}}),
          ("m.internal/kai", {"ghcr.io": {"images": {"kai/op": ["v2"]}}})],
         []),
        # A digest is what is copied, as it is what the kubelet pulls.
        ([use(f"nvcr.io/nvidia/x:v1@{DIGEST}", f"m.internal/nvidia/x:v1@{DIGEST}")],
         [("m.internal/nvidia", {"nvcr.io": {"images": {"nvidia/x": [DIGEST]}}})],
         []),
        # A rule that renames the repository itself: a single copy.
        ([use("quay.io/a/b:v1", "m.internal/renamed:v1")],
         [],
         [("quay.io/a/b:v1", "m.internal/renamed:v1")]),
    ],
)  # fmt: skip
def test_the_images_to_copy_as_skopeo_sync_sources(
    uses: list[ImageUse],
    syncs: list[tuple[str, dict[str, object]]],
    copies: list[tuple[str, str]],
) -> None:
    out = to_copy(uses)
    assert [(s.destination, s.source) for s in out.syncs] == syncs
    assert out.copies == copies
