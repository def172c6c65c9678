"""The plurals maps targets keep: one per distinct content, replaced rather than changed."""

from __future__ import annotations

import gc
import weakref

import pytest

from modelplane.kube.plurals import NONE, merged

GATEWAY = ("gateway.networking.k8s.io/v1", "Gateway")
ROUTE = ("gateway.networking.k8s.io/v1", "HTTPRoute")


@pytest.mark.parametrize(
    ("held", "more", "expected", "same_object"),
    [
        # Nothing new: the map held is kept, not copied.
        ({GATEWAY: "gateways"}, {}, {GATEWAY: "gateways"}, True),
        ({GATEWAY: "gateways"}, {GATEWAY: "gateways"}, {GATEWAY: "gateways"}, True),
        # A kind learned: a new map with both.
        (
            {GATEWAY: "gateways"},
            {ROUTE: "httproutes"},
            {GATEWAY: "gateways", ROUTE: "httproutes"},
            False,
        ),
        # A CRD whose plural changed: the new plural wins.
        ({GATEWAY: "gateways"}, {GATEWAY: "gws"}, {GATEWAY: "gws"}, False),
        ({}, {GATEWAY: "gateways"}, {GATEWAY: "gateways"}, False),
    ],
)
def test_merged_adds_what_is_new_and_keeps_the_map_when_nothing_is(
    held: dict[tuple[str, str], str],
    more: dict[tuple[str, str], str],
    expected: dict[tuple[str, str], str],
    same_object: bool,
) -> None:
    start = merged(NONE, held) if held else NONE
    got = merged(start, more)
    assert dict(got) == expected
    assert (got is start) is same_object


def test_targets_that_learn_the_same_plurals_share_one_map() -> None:
    one = merged(merged(NONE, {GATEWAY: "gateways"}), {ROUTE: "httproutes"})
    # Learned in the other order, by another target.
    two = merged(merged(NONE, {ROUTE: "httproutes"}), {GATEWAY: "gateways"})
    assert one is two


def test_a_map_no_target_holds_is_not_kept() -> None:
    first = merged(NONE, {("example.com/v1", "Gone"): "gones"})
    held = weakref.ref(first)
    del first
    gc.collect()
    assert held() is None


def test_a_kept_map_cannot_be_changed() -> None:
    shared = merged(NONE, {GATEWAY: "gateways"})
    with pytest.raises(TypeError):
        shared[ROUTE] = "httproutes"  # type: ignore[index]
