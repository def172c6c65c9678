"""The lines of a watch's body (kube/watch_body.py ``Lines``): split as sent, bounded in length."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from modelplane.kube.watch_body import Lines


class _TooLong(Exception):
    pass


async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _read(chunks: list[bytes], limit: int) -> list[bytes]:
    async def run() -> list[bytes]:
        return [line async for line in Lines(_chunks(chunks), limit, _TooLong)]

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([], []),
        ([b"a\n"], [b"a"]),
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"a", b"b\nc", b"\n"], [b"ab", b"c"]),
        # The last line without its newline, as the body ends.
        ([b"a\nb"], [b"a", b"b"]),
        ([b"\n\n"], [b"", b""]),
        ([b"", b"a\n", b""], [b"a"]),
        # A line exactly at the limit passes.
        ([b"12345678\n"], [b"12345678"]),
        ([b"1234", b"5678\n9"], [b"12345678", b"9"]),
    ],
)
def test_a_body_is_split_into_its_lines(chunks: list[bytes], lines: list[bytes]) -> None:
    assert _read(chunks, limit=8) == lines


@pytest.mark.parametrize(
    "chunks",
    [
        [b"123456789\n"],
        [b"1234", b"56789"],
        # A short line first does not let a long one after it through.
        [b"a\n123456789"],
        # Nor does a newline that comes too late.
        [b"12345", b"6789", b"\n"],
    ],
)
def test_a_line_past_the_limit_is_refused(chunks: list[bytes]) -> None:
    with pytest.raises(_TooLong, match="longer than 8 bytes"):
        _read(chunks, limit=8)
