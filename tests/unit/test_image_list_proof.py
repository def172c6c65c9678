"""The proof: every default image of the pinned charts is in the plan, and moves to the mirror.

The list is the consolidated default image list of ``../shared/docs/images.md``
(beside the repository, read where it lies and never copied in; set
``MODELPLANE_SHARED_DOCS`` to its directory from a worktree). It was read from
the charts' sources at the pinned versions, so a site missing from the
catalog, or one at a wrong values path that leaves an image where it was,
fails here.

Two of its entries are open points of that document, reflected here as it
states them, not worked around: the Envoy proxy's tag (distroless-v1.38.3)
was read at Envoy Gateway v1.8.3, as v1.8.4 was not among the tags read, and
trust-manager's default package is listed as 20250419.1, or 20250419.2 by a
third-party quote of the v0.25.0 notes. Both are what the catalog carries;
if the document settles either, the catalog follows and this test says so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from modelplane.catalog.images import ImageRef
from modelplane.plan import plan
from modelplane.plan.images import ImageUse, parse_rules
from modelplane.plan.sources import Sources

from .conftest import StackFactory

REPO = Path(__file__).resolve().parents[2]
MIRROR = "mirror.internal"
SOURCES = Sources(image_mirrors=parse_rules([f"*={MIRROR}"]), image_pull_secrets=("pull",))
HEADING = "## Consolidated default image list"


def _doc() -> Path:
    env = os.environ.get("MODELPLANE_SHARED_DOCS")
    return (Path(env) if env else REPO.parent / "shared" / "docs") / "images.md"


def default_images(text: str) -> list[str]:
    """The fenced list under the heading: one reference a line, '#' starts a comment."""
    _, found, rest = text.partition(HEADING)
    assert found, f"images.md has no {HEADING!r} section"
    fenced = re.search(r"^```[^\n]*\n(.*?)^```", rest, re.S | re.M)
    assert fenced, "images.md's image list is not fenced"
    images = [line.split("#", 1)[0].strip() for line in fenced.group(1).splitlines()]
    return [image for image in images if image]


@pytest.fixture(scope="module")
def listed() -> list[str]:
    path = _doc()
    if not path.exists():
        pytest.skip(f"no shared image list at {path} (set MODELPLANE_SHARED_DOCS)")
    return default_images(path.read_text())


@pytest.fixture
def planned(make_stack: StackFactory) -> list[ImageUse]:
    # A Managed stack of each kind covers every component of both.
    return [
        use
        for stack in ("Standard", "Dynamo")
        for use in plan(make_stack(stack=stack), sources=SOURCES).images
    ]


def test_the_list_is_read_whole() -> None:
    text = f"x\n{HEADING}\n\n```\na/b:1   # c\n\nquay.io/d:2\n```\nquay.io/not:listed\n"
    assert default_images(text) == ["a/b:1", "quay.io/d:2"]


def test_every_listed_image_is_planned_at_its_pinned_tag(
    listed: list[str], planned: list[ImageUse]
) -> None:
    images = {ImageRef.parse(u.image) for u in planned}
    missing = [image for image in listed if ImageRef.parse(image) not in images]
    assert not missing, f"on images.md's list but not in the plan: {missing}"


def test_every_listed_image_moves_to_the_mirror_with_its_tag(
    listed: list[str], planned: list[ImageUse]
) -> None:
    moved = {ImageRef.parse(u.image): u.mirrored for u in planned}
    for image in listed:
        ref = ImageRef.parse(image)
        expected = ImageRef(MIRROR, ref.path, ref.tag, ref.digest)
        got = moved.get(ref)
        assert got is not None, f"{image} is not moved"
        assert ImageRef.parse(got) == expected, image


def test_nothing_the_plan_can_set_is_left_outside_the_mirror(planned: list[ImageUse]) -> None:
    for use in planned:
        if not use.settable:
            # Listed, never rewritten: it must say why.
            assert use.mirrored is None and use.note, use
            continue
        assert use.mirrored is not None, f"{use.component}: {use.image} is not moved"
        before, after = ImageRef.parse(use.image), ImageRef.parse(use.mirrored)
        assert after.registry == MIRROR, use
        assert (after.path, after.tag, after.digest) == (before.path, before.tag, before.digest)
        assert use.rule == f"*={MIRROR}"
