"""The label selector grammar (plan.selector), as the API server reads it.

https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors
"""

from __future__ import annotations

import pytest

from modelplane.plan.selector import (
    Op,
    Requirement,
    canonical,
    is_label_key,
    is_label_value,
    parse,
    parse_labels,
    selects,
)


@pytest.mark.parametrize(
    ("text", "requirements"),
    [
        ("a=b", [Requirement("a", Op.EQUALS, ("b",))]),
        ("a==b", [Requirement("a", Op.EQUALS, ("b",))]),
        ("a = b", [Requirement("a", Op.EQUALS, ("b",))]),
        ("a!=b", [Requirement("a", Op.NOT_EQUALS, ("b",))]),
        ("a=", [Requirement("a", Op.EQUALS, ("",))]),
        ("a in (c, b,c)", [Requirement("a", Op.IN, ("b", "c"))]),
        ("a notin(b)", [Requirement("a", Op.NOT_IN, ("b",))]),
        ("a", [Requirement("a", Op.EXISTS)]),
        ("! a", [Requirement("a", Op.DOES_NOT_EXIST)]),
        (
            "x.io/a in (b,c),!d, e=f",
            [
                Requirement("x.io/a", Op.IN, ("b", "c")),
                Requirement("d", Op.DOES_NOT_EXIST),
                Requirement("e", Op.EQUALS, ("f",)),
            ],
        ),
        # A field selector's: the same grammar, other keys and values.
        ("metadata.name=a-name", [Requirement("metadata.name", Op.EQUALS, ("a-name",))]),
    ],
)
def test_parse(text: str, requirements: list[Requirement]) -> None:
    assert list(parse(text)) == requirements


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a=b,", "stray comma"),
        (",a", "stray comma"),
        ("a in ()", "empty entry"),
        ("a in (b,)", "empty entry"),
        ("a=b c", "is not a label requirement"),
        ("a b", "is not a label requirement"),
        ("a in (b", "is not a label requirement"),
    ],
)
def test_what_the_grammar_refuses(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-a=b", "'-a' is not a label key"),
        ("a>3", "'a>3' is not a label key"),
        ("Upper.io/a=b", "is not a label key"),
        (f"{'p' * 254}/a", "is not a label key"),
        (f"{'a' * 64}=b", "is not a label key"),
        ("a=-b", "'-b' is not a label value"),
        (f"a in (b,{'c' * 64})", "is not a label value"),
        ("metadata.name=a_", "'a_' is not a label value"),
    ],
)
def test_what_the_label_rules_refuse(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_labels(text)


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("app", True),
        ("app.kubernetes.io/name", True),
        ("a_b.c-d", True),
        (f"{'p' * 253}/a", True),
        ("", False),
        ("/a", False),
        ("a/", False),
        ("a/b/c", False),
        ("_a", False),
    ],
)
def test_label_keys(key: str, ok: bool) -> None:
    assert is_label_key(key) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [("", True), ("v1.2_3-x", True), ("a" * 63, True), ("a" * 64, False)]
)
def test_label_values(value: str, ok: bool) -> None:
    assert is_label_value(value) is ok


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("shard==a", "shard=a"),
        ("shard != a", "shard!=a"),
        ("example.com/shard in (b, a),tier", "example.com/shard in (a,b),tier"),
        ("!legacy, region notin (eu)", "!legacy,region notin (eu)"),
        # The order given is kept: a shard's Lease name is derived from it.
        ("b=1,a=2", "b=1,a=2"),
    ],
)
def test_canonical_form_reads_back_as_itself(text: str, form: str) -> None:
    assert canonical(parse_labels(text)) == form
    assert parse(form) == parse(text)


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        (None, {"ring": "canary"}, False),
        ("", {"ring": "canary"}, False),
        ("ring=canary", {"ring": "canary"}, True),
        ("ring=canary", {"ring": "main"}, False),
        ("ring=canary", {}, False),
        ("ring!=canary", {}, True),
        ("ring!=canary", {"ring": "canary"}, False),
        ("ring in (a,canary)", {"ring": "canary"}, True),
        ("ring in (a,canary)", {}, False),
        ("ring notin (a,canary)", {"ring": "canary"}, False),
        ("ring notin (a,canary)", {}, True),
        ("ring", {"ring": ""}, True),
        ("!ring", {"ring": ""}, False),
        ("!ring", {}, True),
        ("ring=canary,example.com/tier in (gold)", {"ring": "canary"}, False),
        (
            "ring=canary,example.com/tier in (gold)",
            {"ring": "canary", "example.com/tier": "gold"},
            True,
        ),
        # One the grammar refuses selects nothing.
        ("ring in (canary", {"ring": "canary"}, False),
    ],
)
def test_selects(selector: str | None, labels: dict[str, str], selected: bool) -> None:
    assert selects(selector, labels) is selected
