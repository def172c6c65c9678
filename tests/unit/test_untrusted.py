"""The bounds on untrusted text: aliases, depth, size, and what may be shown."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from modelplane.untrusted import (
    Limits,
    UntrustedInputError,
    check_depth,
    load_json,
    load_yaml,
    load_yaml_all,
    printable,
)


def alias_bomb(levels: int) -> str:
    """Nine references per level: 9**levels nodes from a few hundred bytes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_anything_walks_it() -> None:
    text = alias_bomb(9)
    assert len(text) < 600
    with pytest.raises(UntrustedInputError, match="aliases are expanded"):
        load_yaml(text)


def test_aliases_within_the_bound_load_as_usual() -> None:
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


def test_an_alias_inside_the_node_it_names_is_refused() -> None:
    with pytest.raises(UntrustedInputError, match="contains it"):
        load_yaml("&a [*a]")


@pytest.mark.parametrize(
    "text", ["[" * 10_000, "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200))]
)
def test_deep_yaml_is_refused_without_recursion_error(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="nested deeper"):
        load_yaml(text)


def test_deep_json_is_refused_without_recursion_error() -> None:
    with pytest.raises(UntrustedInputError, match="nested deeper"):
        load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UntrustedInputError, match="nested deeper"):
        load_json("[" * 100 + "]" * 100)


def test_size_is_checked_before_parsing() -> None:
    with pytest.raises(UntrustedInputError, match="over the limit of 10"):
        load_yaml("a: 12345678901", Limits(max_bytes=10))
    with pytest.raises(UntrustedInputError, match="over the limit of 10"):
        load_json('"12345678901"', Limits(max_bytes=10))


def test_a_non_printable_character_is_a_parse_error_not_a_crash() -> None:
    with pytest.raises(UntrustedInputError, match="#x0007 at position 3"):
        load_yaml("a: \x07b")


def test_a_parse_error_never_quotes_the_text() -> None:
    secret = "hunter2-secret-value"
    with pytest.raises(UntrustedInputError) as err:
        load_yaml(f"a: [{secret}")
    assert secret not in str(err.value)


def test_a_stream_with_a_trailing_separator_yields_an_empty_document() -> None:
    assert list(load_yaml_all("a: 1\n---\nb: 2\n---\n")) == [{"a": 1}, {"b": 2}, None]


def test_more_than_one_document_where_one_is_expected_is_refused() -> None:
    with pytest.raises(UntrustedInputError, match="more than one"):
        load_yaml("a: 1\n---\nb: 2\n")


@pytest.mark.parametrize(
    "text",
    [
        "a: 2001-13-01\n",  # a date that is no date: ValueError from datetime
        "a: !!timestamp 'zz'\n",  # AttributeError from PyYAML's own constructor
        "a: !!timestamp 2001-02-30\n",
        "a: !!bool maybe\n",  # KeyError
        "a: !!int twelve\n",  # ValueError quoting the text
        "a: !!float x\n",
        "a: " + "1" * 4301 + "\n",  # past Python's int conversion limit
        "a: !!int '" + "1" * 4301 + "'\n",
        "a: " + "1" * 5000 + ".5\n",
    ],
)
def test_a_value_no_constructor_can_build_is_refused_never_raised(text: str) -> None:
    try:
        doc = load_yaml(text)
    except UntrustedInputError as err:
        assert "twelve" not in str(err) and "zz" not in str(err)
    else:
        # Only a date's text may load, and then as that text.
        assert doc == {"a": "2001-13-01"}, doc


def test_a_date_is_its_text_as_the_api_server_has_it() -> None:
    doc = load_yaml("a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\nc: !!timestamp 2001-12-14\n")
    assert doc == {"a": "2001-12-14", "b": "2001-12-14t21:59:43.10-05:00", "c": "2001-12-14"}


def test_a_base_60_number_is_a_string_and_cheap() -> None:
    assert load_yaml("a: 1:59\nb: -1:30.5\nc: 190\nd: 0x1f\ne: 1.5\n") == {
        "a": "1:59",
        "b": "-1:30.5",
        "c": 190,
        "d": 31,
        "e": 1.5,
    }
    # 180 KB of it took 3.8 s as a YAML 1.1 int (the cost is the square of
    # the length, building the int); as a string it is a scan. The string is
    # what is checked here; bench/bench_yaml_scalars.py times both.
    text = "a: 1" + ":59" * 60_000 + "\n"
    assert load_yaml(text) == {"a": text[3:-1]}


def test_an_explicit_base_60_int_is_refused_and_bounded_by_the_number_limit() -> None:
    # go-yaml has no base 60: to the API server ``!!int 1:59`` is a string
    # under an int's tag, which it refuses.
    with pytest.raises(UntrustedInputError, match="int value at line 1, column 4"):
        load_yaml("a: !!int 1:59\n")
    with pytest.raises(UntrustedInputError, match="longer than 256 characters"):
        load_yaml("a: !!int " + "1" + ":59" * 60_000 + "\n")


def test_the_number_limit_is_a_limit() -> None:
    assert load_yaml("a: " + "9" * 19) == {"a": int("9" * 19)}
    assert load_yaml("a: " + "9" * 20) == {"a": 1e20}  # past uint64, go-yaml's float
    with pytest.raises(UntrustedInputError, match="line 2, column 4 is longer than 10"):
        load_yaml("b: 1\na: " + "9" * 11, Limits(max_number=10))


def test_a_constructor_error_in_a_stream_is_refused_at_its_document() -> None:
    docs = load_yaml_all("a: 1\n---\nb: !!int x\n")
    assert next(docs) == {"a": 1}
    with pytest.raises(UntrustedInputError, match="int value at line 3, column 4"):
        next(docs)


def test_printable_escapes_control_and_format_characters() -> None:
    shown = printable("red\x1b[31m\u202eflip\x00\nnext", 100)
    assert shown == "red\\u001b[31m\\u202eflip\\u0000 next"


def test_printable_escapes_the_unicode_line_and_paragraph_separators() -> None:
    # Editors, browsers and JavaScript break a line at both: a forged line.
    assert printable("ok\u2028ERROR forged\u2029x", 100) == "ok\\u2028ERROR forged\\u2029x"


@pytest.mark.parametrize(("limit", "shown"), [(0, ""), (1, "…"), (5, "abcd…"), (8, "abcdefgh")])
def test_printable_cuts_to_the_limit_with_a_marker(limit: int, shown: str) -> None:
    assert printable("abcdefgh", limit) == shown


def test_a_printable_character_is_never_escaped_nor_replaced() -> None:
    # What lets printable answer a short str.isprintable() string as it is.
    import sys
    import unicodedata

    from modelplane.untrusted import _ESCAPED

    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if char.isprintable():
            assert unicodedata.category(char) not in _ESCAPED and char not in "\n\t\r", code


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("plain", 5, "plain"),  # at the limit: as it is
        ("plain", 4, "pla…"),  # past it: cut
        ("caf\u00e9 \u4e2d", 10, "caf\u00e9 \u4e2d"),  # printable beyond ASCII
        ("a\u00a0b", 10, "a\u00a0b"),  # a non-ASCII space: kept, by the long way
        ("a\u200bb", 10, "a\\u200bb"),  # a format character: escaped
    ],
)
def test_printable_short_and_long_ways_agree(text: str, limit: int, shown: str) -> None:
    assert printable(text, limit) == shown


def test_printable_never_splits_an_escape() -> None:
    shown = printable("ab\x1bcdef", 6)
    assert shown == "ab…"
    assert len(shown) <= 6


def test_base64_is_decoded_within_its_bound() -> None:
    import base64

    from modelplane.untrusted import decode_base64

    assert decode_base64(base64.b64encode(b"hello"), 5) == b"hello"
    with pytest.raises(UntrustedInputError, match="more than 4 bytes"):
        decode_base64(base64.b64encode(b"hello"), 4)
    with pytest.raises(UntrustedInputError, match="not base64"):
        decode_base64("not*base64", 100)


def test_gzip_is_decompressed_within_its_bound() -> None:
    import gzip

    from modelplane.untrusted import gunzip

    assert gunzip(gzip.compress(b"x" * 100), 100) == b"x" * 100
    with pytest.raises(UntrustedInputError, match="not gzip"):
        gunzip(b"plain text", 100)
    with pytest.raises(UntrustedInputError, match="truncated"):
        gunzip(gzip.compress(b"x" * 100)[:-10], 100)
    with pytest.raises(UntrustedInputError, match="after the gzip data"):
        gunzip(gzip.compress(b"x") + b"more", 100)


def test_a_gzip_bomb_is_refused_without_decompressing_it_whole() -> None:
    import gzip
    import tracemalloc

    from modelplane.untrusted import gunzip

    # 256 MiB of zeros compresses to a quarter of a MiB; past the bound of
    # 1 MiB nothing more is decompressed, so little more than that is held.
    bomb = gzip.compress(b"\0" * (256 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(UntrustedInputError, match="more than 1048576 bytes"):
            gunzip(bomb, 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


# What the standard library's parser makes of each (or refuses), the fast
# parser must too: the edges where msgspec alone would differ among them.
_JSON_EDGES = [
    '{"a": [1, 2.50, true, null, "\\u00e9"], "b": {}}',
    '{"a": 1, "a": 2}',
    '{"big": 123456789012345678901234567890}',
    "1e400",
    "-1e400",
    "NaN",
    '{"x": Infinity}',
    '"\\ud800"',
    '"\\u0000"',
    "  [1]  ",
    "[1] x",
    "",
    "{",
]


def _parsed(parse: Callable[[], Any]) -> tuple[str, ...]:
    """What a parse gave, as text (NaN is not equal to itself), or that it refused."""
    try:
        return ("parsed", json.dumps(parse(), sort_keys=True))
    except (UntrustedInputError, ValueError):
        return ("refused",)


@pytest.mark.parametrize("text", _JSON_EDGES)
def test_json_is_parsed_as_the_standard_library_parses_it(text: str) -> None:
    expected = _parsed(lambda: json.loads(text))
    assert _parsed(lambda: load_json(text)) == expected
    # And as bytes, as a target's answer arrives.
    assert _parsed(lambda: load_json(text.encode("utf-8", "surrogatepass"))) == expected


def test_invalid_utf8_is_refused_as_not_json() -> None:
    with pytest.raises(UntrustedInputError, match="not JSON"):
        load_json(b'{"a": "\xff"}')


def _nested(depth: int, wide: bool) -> Any:
    doc: Any = "leaf"
    for level in range(depth):
        doc = {"k": doc, "n": [1, "x"]} if (wide and level % 2) else [doc, 2]
    return doc


@pytest.mark.parametrize("depth", [0, 1, 2, 5, 6, 7, 40])
@pytest.mark.parametrize("wide", [False, True])
def test_depth_is_counted_in_containers_from_the_root(depth: int, wide: bool) -> None:
    doc = _nested(depth, wide)
    # ``depth`` containers nest: allowed at a bound of ``depth``, refused below it.
    check_depth(doc, depth)
    if depth:
        with pytest.raises(UntrustedInputError, match=f"nested deeper than {depth - 1} levels"):
            check_depth(doc, depth - 1)
