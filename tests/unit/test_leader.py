"""The leader election's retry policy: client-go's fixed period, whatever the count of tries."""

from __future__ import annotations

import pytest

from modelplane.operator.leader import LeaderElection, retry_policy


@pytest.mark.parametrize("attempt", [0, 1, 2, 10, 1100, 100_000])
@pytest.mark.parametrize("period", [1.0, 2.0, 0.5])
def test_every_try_at_the_lease_waits_one_retry_period(attempt: int, period: float) -> None:
    # A standby tries every period for as long as another replica leads:
    # days of tries must neither grow the wait nor overflow it.
    config = LeaderElection(
        namespace="ns", name="lease", retry_period_seconds=period, renew_deadline_seconds=5
    )
    assert retry_policy(config).delay(attempt) == period
