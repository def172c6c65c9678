"""``untrusted.json_cost``: never under what a parse builds, and not far over it for real objects.

What a parse builds is measured with tracemalloc (a count of bytes, not a
duration): each hostile shape the estimate must cover, and real objects'
JSON, which it must not refuse for being real.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs

from modelplane.untrusted import Limits, UntrustedInputError, json_cost, load_json

SIZE = 256 * 1024


def _repeat(unit: bytes, open_: bytes = b"[", close: bytes = b"0]") -> bytes:
    return open_ + unit * (SIZE // len(unit)) + close


def built_by(text: bytes) -> int:
    """Bytes the parse of ``text`` allocated and still holds in what it returned."""
    tracemalloc.start()
    try:
        doc: Any = load_json(text, Limits(max_bytes=len(text) + 1, max_depth=512))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del doc
    return held


SHAPES = {
    "empty objects": _repeat(b"{},", close=b"{}]"),
    "empty lists": _repeat(b"[],", close=b"[]]"),
    "lists in lists": _repeat(b"[[]],", close=b"[]]"),
    "objects in objects": _repeat(b'{"a":{}},', close=b"{}]"),
    "objects of one entry": _repeat(b'{"a":1},', close=b"{}]"),
    "small ints": _repeat(b"1,"),
    "large ints": _repeat(b"123456789012,"),
    "floats": _repeat(b"1.5,"),
    "empty strings": _repeat(b'"",'),
    "short strings": _repeat(b'"a",'),
    "booleans": _repeat(b"true,"),
    "keys": b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(SIZE // 16)) + b"}",
    "a wide character then ASCII": ('["\U0001f600' + "a" * SIZE + '"]').encode(),
    "an escaped wide character": ('["\\ud83d\\ude00' + "a" * SIZE + '"]').encode(),
    "short wide strings": b"[" + b",".join(['"\U0001f600a"'.encode()] * (SIZE // 9)) + b"]",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_estimate_is_never_under_what_the_parse_builds(shape: str) -> None:
    text = SHAPES[shape]
    assert json_cost(text) >= built_by(text)
    assert json_cost(text.decode()) >= built_by(text)


@pytest.mark.parametrize(
    ("chart", "version", "name"),
    [
        ("lws", "v0.8.0", "crds.yaml"),
        ("cert-manager", "v1.20.2", "rendered-standard.yaml"),
        ("kube-prometheus-stack", "84.4.0", "rendered-standard.yaml"),
    ],
)
def test_real_objects_are_estimated_within_four_times_what_they_build(
    chart: str, version: str, name: str
) -> None:
    docs = yaml_docs(real_chart(chart, version) / name)
    # As an API server sends a LIST: compact JSON.
    text = json.dumps({"items": docs}, separators=(",", ":")).encode()
    built = built_by(text)
    assert built <= json_cost(text) <= 4 * built


def test_json_past_its_built_limit_is_refused_before_it_is_parsed() -> None:
    text = SHAPES["empty objects"]
    limits = Limits(max_bytes=len(text), max_built=json_cost(text) - 1)
    with pytest.raises(UntrustedInputError, match="would build about"):
        load_json(text, limits)
    assert load_json(text, Limits(max_bytes=len(text), max_built=json_cost(text)))
