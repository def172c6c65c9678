"""The CRD watch parses only what its outlines read, and outlines what a whole parse does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.shared_fixtures import upstream_dir, yaml_docs

from modelplane.kube.reflector import MAX_WATCH_LINE
from modelplane.observe.crd_outline import crd_outline
from modelplane.observe.crd_reads import decode_crds
from modelplane.untrusted import Limits, UntrustedInputError, load_json
from modelplane.wire import DIGEST_ANNOTATION

LIMITS = Limits(max_bytes=MAX_WATCH_LINE, max_depth=256)


def _real_crds() -> list[dict[str, Any]]:
    root = upstream_dir()
    if not root.is_dir():
        pytest.skip(f"the upstream CRDs are not at {root} (../shared/fixtures/upstream)")
    return [
        doc
        for path in sorted((root / "envoy-gateway").glob("*.yaml"))
        for doc in yaml_docs(path)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def _outlined(answer: Any) -> list[dict[str, Any]]:
    items = answer.get("items") or [answer.get("object")]
    return [crd_outline(item) for item in items]


def _both(doc: dict[str, Any]) -> tuple[Any, Any]:
    text = json.dumps(doc).encode()
    return decode_crds(text, LIMITS), load_json(text, LIMITS)


def test_a_page_of_real_crds_outlines_as_the_whole_parse_does_without_the_schemas() -> None:
    crds = _real_crds()
    crds[0]["metadata"]["annotations"] = {DIGEST_ANNOTATION: "d", "other": "x" * 1000}
    page = {"kind": "CustomResourceDefinitionList", "metadata": {"resourceVersion": "9"}}
    read, whole = _both({**page, "items": crds})
    assert read["metadata"] == whole["metadata"]
    assert _outlined(read) == _outlined(whole)
    assert "openAPIV3Schema" not in json.dumps(read)
    assert read["items"][0]["metadata"]["annotations"] == {DIGEST_ANNOTATION: "d"}


@pytest.mark.parametrize(
    "event",
    [
        {"type": "MODIFIED", "object": {"metadata": {"name": "a.b", "resourceVersion": "3"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4"}}},
        # The Status of an ERROR event: its "status" is a string, not a CRD's.
        {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410}},
        # Shapes a CRD never has: parsed whole, outlined as before.
        {"type": "ADDED", "object": {"spec": {"versions": "v1"}, "metadata": []}},
        {"type": "ADDED", "object": {"spec": {"versions": [1, {"name": "v1"}]}}},
    ],
)
def test_an_event_reads_as_the_whole_parse_does_for_the_watch(event: dict[str, Any]) -> None:
    read, whole = _both(event)
    assert read["type"] == whole["type"]
    assert _outlined(read) == _outlined(whole)
    assert (read["object"] or {}).get("code") == (whole["object"] or {}).get("code")


# Nested past the limit where the outline reads (labels), and past the
# parser's recursion anywhere: what is read past is never built, but is no
# deeper than the parser recurses.
KEPT_DEEP = b'{"items": [{"metadata": {"labels": ' + b"[" * 300 + b"]" * 300 + b"}}]}"


@pytest.mark.parametrize(
    "text", [b"not json", KEPT_DEEP, b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"]
)
def test_what_a_whole_parse_refuses_is_refused(text: bytes) -> None:
    with pytest.raises(UntrustedInputError):
        decode_crds(text, LIMITS)
