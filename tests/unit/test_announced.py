"""Messages said once each, when they appear (operator.announced)."""

from __future__ import annotations

import pytest

from modelplane.operator.announced import Announced


@pytest.mark.parametrize(
    ("rounds", "said"),
    [
        pytest.param([["b", "a"]], [["a", "b"]], id="first time: all, sorted"),
        pytest.param([["a"], ["a"], ["a"]], [["a"], [], []], id="a resync finds it again"),
        pytest.param([["a"], ["a", "b"]], [["a"], ["b"]], id="only the one that appears"),
        pytest.param([["a"], [], ["a"]], [["a"], [], ["a"]], id="gone and back: said again"),
        pytest.param([["a", "b"], ["b"], ["a", "b"]], [["a", "b"], [], ["a"]], id="one goes"),
        pytest.param([["a", "a"]], [["a"]], id="a repeat in one round, once"),
        pytest.param([[]], [[]], id="nothing"),
    ],
)
def test_each_message_is_said_when_it_appears(
    rounds: list[list[str]], said: list[list[str]]
) -> None:
    announced = Announced()
    assert [announced.new(messages) for messages in rounds] == said


def test_a_generator_is_read_once() -> None:
    announced = Announced()
    assert announced.new(m for m in ("x", "y")) == ["x", "y"]
    assert announced.new(m for m in ("x", "y")) == []
