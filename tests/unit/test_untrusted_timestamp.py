"""untrusted.timestamp: an API server's RFC 3339 time, or None for anything else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from modelplane.untrusted import timestamp

NOON = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        pytest.param("2026-12-06T12:00:00Z", NOON, id="as the API server writes it"),
        pytest.param("2026-12-06T12:00:00+00:00", NOON, id="with an offset"),
        pytest.param(
            "2026-12-06T13:00:00+01:00",
            datetime(2026, 12, 6, 13, 0, tzinfo=timezone(timedelta(hours=1))),
            id="another zone, kept",
        ),
        pytest.param("2026-12-06T12:00:00", NOON, id="no zone: UTC"),
        pytest.param("2026-12-06T12:00:00.123456Z", NOON.replace(microsecond=123456), id="micro"),
        pytest.param("yesterday", None, id="not a time"),
        pytest.param("", None, id="empty"),
        pytest.param(1733486400, None, id="a number"),
        pytest.param(None, None, id="absent"),
        pytest.param("2026-12-06T12:00:00Z" + " " * 60, None, id="longer than a time can be"),
    ],
)
def test_timestamp(value: object, parsed: datetime | None) -> None:
    assert timestamp(value) == parsed
