"""One kept value per distinct content (kube/interned.py ``KeptOnce``)."""

from __future__ import annotations

import gc

import msgspec
import pytest

from modelplane.kube.interned import KeptOnce


class _Value:
    """Something a weak reference may point at."""


def test_equal_content_gets_the_one_kept_value() -> None:
    kept: KeptOnce[_Value] = KeptOnce()
    first = kept.get({"a": 1, "b": [1, 2]}, _Value)
    assert kept.get({"b": [1, 2], "a": 1}, _Value) is first
    assert kept.get({"a": 2, "b": [1, 2]}, _Value) is not first


def test_a_value_nobody_holds_goes() -> None:
    kept: KeptOnce[_Value] = KeptOnce()
    made: list[_Value] = []

    def make() -> _Value:
        made.append(_Value())
        return made[-1]

    kept.get(["x"], make)
    made.clear()
    gc.collect()
    kept.get(["x"], make)
    assert len(made) == 1, "made again once the first was dropped"


def test_content_that_is_not_json_is_refused() -> None:
    with pytest.raises((TypeError, msgspec.EncodeError)):
        KeptOnce[_Value]().get({"a": object()}, _Value)
