"""YAML read as Kubernetes reads it: sigs.k8s.io/yaml over go-yaml v2, then JSON.

Every expected value here is what sigs.k8s.io/yaml v1.6.0's ``YAMLToJSON``
(go.yaml.in/yaml/v2 v2.4.2) gives for the same text, an int or a float as
go-yaml typed it.
"""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.kubeyaml import float32_text, resolve_plain
from modelplane.untrusted import Limits, UntrustedInputError, load_yaml, load_yaml_all

SCALARS: list[tuple[str, Any]] = [
    # YAML 1.1's ``value`` tag to PyYAML; a string to Kubernetes.
    ("=", "="),
    # Booleans: YAML 1.1's words, and go-yaml's single letters too.
    ("y", True),
    ("Y", True),
    ("yes", True),
    ("Yes", True),
    ("YES", True),
    ("on", True),
    ("ON", True),
    ("true", True),
    ("True", True),
    ("n", False),
    ("N", False),
    ("no", False),
    ("off", False),
    ("Off", False),
    ("FALSE", False),
    ("tRUE", "tRUE"),
    ("yEs", "yEs"),
    # Nulls.
    ("~", None),
    ("null", None),
    ("Null", None),
    ("NULL", None),
    ("nULL", "nULL"),
    # Ints: Go's base prefixes, a leading 0 as octal, underscores dropped.
    ("0", 0),
    ("-0", 0),
    ("+12", 12),
    ("0x1F", 31),
    ("0X1f", 31),
    ("-0x1F", -31),
    ("0o17", 15),
    ("0O17", 15),
    ("010", 8),
    ("00", 0),
    ("0b101", 5),
    ("-0b101", -5),
    ("0b-101", -5),
    ("1_000", 1000),
    ("1__0", 10),
    ("1_", 1),
    ("+_1", 1),
    ("0_x1F", 31),
    ("_1", "_1"),
    ("0x", "0x"),
    ("0o", "0o"),
    ("0b", "0b"),
    ("0o8", "0o8"),
    ("9223372036854775807", 9223372036854775807),
    ("18446744073709551615", 18446744073709551615),  # uint64
    # Floats: an exponent alone makes one, and so does an octal that is not.
    ("1e3", 1000.0),
    ("1E3", 1000.0),
    ("+1e3", 1000.0),
    ("1.", 1.0),
    ("1.5", 1.5),
    (".5", 0.5),
    ("-.5", -0.5),
    (".5_0", 0.5),
    ("1_0.5", 10.5),
    ("-0.0", -0.0),
    ("08", 8.0),
    ("0_9", 9.0),
    ("18446744073709551616", 1.8446744073709552e19),  # past uint64
    ("+9223372036854775808", 9.223372036854776e18),  # uint64 takes no sign
    ("-9223372036854775809", -9.223372036854776e18),
    ("1e-400", 0.0),
    # Past float64, or not Go's syntax: strings.
    ("1e400", "1e400"),
    (".5e999", ".5e999"),
    ("0x1FFFFFFFFFFFFFFFF", "0x1FFFFFFFFFFFFFFFF"),
    ("0x1p3", "0x1p3"),
    ("1e", "1e"),
    (".", "."),
    ("+", "+"),
    ("._5", "._5"),
    ("+.nan", "+.nan"),
    (".iNf", ".iNf"),
    ("inf", "inf"),
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("1,000", "1,000"),
    ("0.0.0", "0.0.0"),
    ("123abc", "123abc"),
    # Base 60 and dates: YAML 1.1 numbers and timestamps, strings here.
    ("1:59", "1:59"),
    ("-1:30.5", "-1:30.5"),
    ("2001-12-14", "2001-12-14"),
    ("2001-13-01", "2001-13-01"),
    ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"),
    # A merge key's text anywhere but a key.
    ("<<", "<<"),
]


def _same(got: Any, want: Any) -> bool:
    # repr tells True from 1, 1.0 from 1 and -0.0 from 0.0.
    return type(got) is type(want) and repr(got) == repr(want)


@pytest.mark.parametrize(("text", "want"), SCALARS)
def test_a_plain_scalar_is_what_kubernetes_reads(text: str, want: Any) -> None:
    got = load_yaml(f"v: {text}\n")["v"]
    assert _same(got, want), (text, got)
    assert _same(resolve_plain(text)[1], want)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("!!int 0o17", 15),
        ("!!int '12'", 12),
        ("!!float 1", 1.0),
        ("!!bool y", True),
        ("!!null ''", None),
        ("!!str yes", "yes"),
        ("'y'", "y"),
        ('"1e3"', "1e3"),
        ("!!timestamp 2001-12-14", "2001-12-14"),
        ("!!merge <<", "<<"),
    ],
)
def test_an_explicit_tag_or_quotes_are_read_as_kubernetes_reads_them(text: str, want: Any) -> None:
    assert _same(load_yaml(f"v: {text}\n")["v"], want)


@pytest.mark.parametrize(
    "text",
    [
        "!!int 1:59",  # go-yaml: cannot decode !!str as !!int
        "!!int 1.5",
        "!!float 1e400",
        "!!float 18446744073709551615",  # a uint64 is not made a float
        "!!bool maybe",
        "!!null x",
    ],
)
def test_a_text_that_is_not_of_its_explicit_tag_is_refused(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="line 1, column 4 cannot be read"):
        load_yaml(f"v: {text}\n")


@pytest.mark.parametrize("text", [".inf", "-.Inf", "+.INF", ".nan", "!!float .inf"])
def test_nan_and_infinity_are_refused_as_the_api_server_refuses_them(text: str) -> None:
    # go-yaml reads them; encoding/json then refuses the document
    # ("json: unsupported value: +Inf"), and JSON has no such number.
    with pytest.raises(UntrustedInputError, match="NaN or infinite"):
        load_yaml(f"v: {text}\n")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("y", "true"),
        ("on", "true"),
        ("n", "false"),
        ("1", "1"),
        ("0x1F", "31"),
        ("010", "8"),
        ("08", "8"),
        ("1.5", "1.5"),
        ("1e3", "1000"),
        ("0.1", "0.1"),
        ("0.3", "0.3"),
        ("0.0001", "0.0001"),
        ("1e-5", "1e-05"),
        ("123456", "123456"),
        ("123456.0", "123456"),
        ("1234567.0", "1.234567e+06"),
        ("1e6", "1e+06"),
        ("1e20", "1e+20"),
        ("3.14159265358979", "3.1415927"),
        ("16777217.0", "1.6777216e+07"),
        ("1e-45", "1e-45"),
        ("3.4028235e38", "3.4028235e+38"),
        ("1e39", ".inf"),
        ("-0.0", "-0"),
        (".inf", ".inf"),
        ("-.inf", "-.inf"),
        (".nan", ".nan"),
        ("2001-12-14", "2001-12-14"),
        ("=", "="),
        ("'1'", "1"),
    ],
)
def test_a_key_is_the_string_sigs_k8s_yaml_writes(text: str, want: str) -> None:
    assert load_yaml(f"{text}: v\n") == {want: "v"}


@pytest.mark.parametrize("value", [0.1, 1e-40, 2.5e-39, 123.456, 9.999999e9, 3.4028234e38, 7e-45])
def test_a_float_key_reads_back_as_its_float32(value: float) -> None:
    import struct

    single = struct.unpack("<f", struct.pack("<f", value))[0]
    assert struct.unpack("<f", struct.pack("<f", float(float32_text(value))))[0] == single


@pytest.mark.parametrize(
    "text",
    [
        "~: v\n",
        "null: v\n",
        "18446744073709551615: v\n",  # a uint64
        "? [1]\n: v\n",
        "? {a: 1}\n: v\n",
    ],
)
def test_a_key_json_cannot_hold_is_refused(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="has no JSON form"):
        load_yaml(text)


def test_keys_that_are_one_value_to_go_yaml_are_one_key() -> None:
    # (An int 1 and a string "1" are two keys to go-yaml, which then makes
    # one JSON key of them in its map's random order: no row for that.)
    assert load_yaml("y: 1\ntrue: 2\n") == {"true": 2}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # A merge lands where its ``<<`` stands: over a key before it, under
        # one after (PyYAML lets the mapping's own keys win wherever they are).
        ("b: &b {p: 1, q: 1}\na: {p: 0, <<: *b, q: 2}\n", {"p": 1, "q": 2}),
        ("a: {<<: {x: 1}, x: 2}\n", {"x": 2}),
        # Of a list, the first mapping wins.
        ("a: {p: 0, <<: [{p: 1, q: 1}, {q: 2, r: 2}], r: 3}\n", {"p": 1, "q": 1, "r": 3}),
        # A merge inside a merged mapping, in its own order.
        ("b: &b {<<: {x: 1}, x: 2}\na: {<<: *b}\n", {"x": 2}),
        # Quoted, ``<<`` is a key like any other.
        ("a: {'<<': {x: 1}}\n", {"<<": {"x": 1}}),
        ("a: [<<, =]\n", ["<<", "="]),
    ],
)
def test_a_merge_is_in_go_yaml_v2_order(text: str, want: Any) -> None:
    assert load_yaml(text)["a"] == want


@pytest.mark.parametrize("text", ["a: {<<: 3}\n", "a: {<<: [{x: 1}, 3]}\n"])
def test_a_merge_of_what_is_no_mapping_is_refused(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="a merge takes a mapping"):
        load_yaml(text)


def test_a_long_number_is_refused_before_it_is_converted() -> None:
    with pytest.raises(UntrustedInputError, match="longer than 10 characters"):
        load_yaml("a: 0x" + "f" * 9, Limits(max_number=10))
    with pytest.raises(UntrustedInputError, match="longer than 10 characters"):
        load_yaml("a: 1" + "_0" * 5, Limits(max_number=10))
    # A long text that is no number is a string, however long.
    assert load_yaml("a: 1" + "x" * 20, Limits(max_number=10)) == {"a": "1" + "x" * 20}


def test_the_alertmanager_match_type_enum_reads_as_the_api_server_has_it() -> None:
    # kube-prometheus-stack 84.4.0's AlertmanagerConfig CRD writes its
    # matchType enum as plain scalars.
    docs = list(load_yaml_all("enum:\n- '!='\n- =\n- =~\n- '!~'\n"))
    assert docs == [{"enum": ["!=", "=", "=~", "!~"]}]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # A tag go-yaml does not read is as good as none: a scalar its text.
        ("!foo 12", "12"),
        ("!!foo yes", "yes"),
        ("! 12", "12"),
        ("!!value =", "="),
        ("!foo [1]", [1]),
        ("!foo {x: y}", {"x": True}),
        ("!!set {x, q}", {"x": None, "q": None}),
        ("!!set [1]", [1]),
        ("!!omap [{x: 1}, {q: 2}]", [{"x": 1}, {"q": 2}]),
        ("!!pairs [{x: 1}, {x: 2}]", [{"x": 1}, {"x": 2}]),
        # Binary: its bytes as text, each byte that is not UTF-8 a U+FFFD.
        ("!!binary aGVsbG8=", "hello"),
        ("!!binary |\n  aGVs\n  bG8=", "hello"),
        ("!!binary /w==", "\ufffd"),
        ("!!binary 4oI=", "\ufffd\ufffd"),  # a cut three-byte sequence
        ("!!binary 7aCA", "\ufffd\ufffd\ufffd"),  # an encoded surrogate
    ],
)
def test_other_tags_are_read_as_go_yaml_reads_them(text: str, want: Any) -> None:
    assert load_yaml(f"v: {text}\n")["v"] == want


@pytest.mark.parametrize("text", ["!!binary aGVsbG8", '!!binary "aGV sbG8="'])
def test_binary_that_is_not_base64_is_refused(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="binary value at line 1, column 4"):
        load_yaml(f"v: {text}\n")
