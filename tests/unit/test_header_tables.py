"""A target connection's HPACK encoder keeps no table, and what it sends decodes."""

from __future__ import annotations

import hpack
import pytest

from modelplane.kube.header_tables import TablelessEncoder

HEADERS = [
    (b":method", b"GET"),
    (b":path", b"/apis/gateway.networking.k8s.io/v1/gateways?watch=true"),
    (b"user-agent", b"python-httpx2"),
    (b"accept", b"application/json"),
]


@pytest.mark.parametrize("allowed", [None, 4096, 65536])
def test_the_encoder_keeps_no_table_whatever_the_server_allows(allowed: int | None) -> None:
    encoder = TablelessEncoder()
    if allowed is not None:
        # What h2 does with each SETTINGS_HEADER_TABLE_SIZE of the server's.
        encoder.header_table_size = allowed
    decoder = hpack.Decoder()
    for _ in range(3):
        block = encoder.encode(HEADERS)
        assert decoder.decode(block, raw=True) == HEADERS
    assert encoder.header_table_size == 0
    assert len(encoder.header_table.dynamic_entries) == 0
    # The server's decoder was told: its table for our headers is empty too.
    assert len(decoder.header_table.dynamic_entries) == 0
