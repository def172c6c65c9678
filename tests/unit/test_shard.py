"""Shard selectors and leader Lease naming: what `modelplane run` accepts and derives."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.operator.leader import LeaderElection, lease_name
from modelplane.operator.shard import normalize_selector
from modelplane.plan.decisions import blocked_retry_delay as retry_delay


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("shard=a", "shard=a"),
        ("shard==a", "shard=a"),
        ("shard != a", "shard!=a"),
        ("example.com/shard in (b, a),tier", "example.com/shard in (a,b),tier"),
        ("!legacy, region notin (eu)", "!legacy,region notin (eu)"),
        ("shard=", "shard="),
    ],
)
def test_selector_grammar_is_the_api_servers(given: str, canonical: str) -> None:
    assert normalize_selector(given) == canonical


@pytest.mark.parametrize(
    ("given", "names"),
    [
        ("", "empty"),
        ("shard=a,", "stray comma"),
        ("shard=a b", "'shard=a b'"),
        ("sh ard=a", "is not a label requirement"),
        ("shard in ()", "empty entry"),
        ("-shard=a", "'-shard' is not a label key"),
        ("shard=-a", "'-a' is not a label value"),
        ("shard>3", "'shard>3' is not a label key"),
    ],
)
def test_a_bad_selector_says_what_is_wrong(given: str, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        normalize_selector(given)


def test_run_rejects_a_bad_selector_naming_the_option() -> None:
    result = CliRunner().invoke(app, ["run", "--selector", "shard in (a"])
    assert result.exit_code == 2
    assert "--selector" in result.output
    assert "Traceback" not in result.output


def test_run_rejects_a_renew_deadline_past_the_lease() -> None:
    result = CliRunner().invoke(
        app, ["run", "--leader-elect", "--leader-election-renew-deadline", "20"]
    )
    assert result.exit_code == 2
    assert "renew deadline must be shorter than the lease duration" in result.output


def test_each_shard_has_its_own_lease_and_replicas_share_theirs() -> None:
    whole = lease_name([], None)
    a = lease_name(["platform"], "shard=a")
    b = lease_name(["platform"], "shard=b")
    assert len({whole, a, b, lease_name(["other"], None)}) == 4
    assert a == lease_name(["platform", "platform"], "shard=a")
    assert lease_name(["x", "y"], None) == lease_name(["y", "x"], None)
    assert all(len(n) <= 63 for n in (whole, a, b))


def test_lease_timing_keeps_the_step_down_margin() -> None:
    with pytest.raises(ValueError, match="retry period must be shorter"):
        LeaderElection(namespace="ns", name="l", renew_deadline_seconds=2, retry_period_seconds=2)
    assert (
        LeaderElection(namespace="ns", name="l").identity
        != LeaderElection(namespace="ns", name="l").identity
    )


def test_blocked_stacks_back_off_up_to_a_ceiling_with_jitter() -> None:
    delays = [retry_delay(n, 300.0) for n in range(1, 8)]
    assert 9.0 <= delays[0] <= 10.0
    assert 18.0 <= delays[1] <= 20.0
    assert all(108.0 <= d <= 120.0 for d in delays[4:])
    # A short resync period is the ceiling: tests and small hubs retry as often.
    assert retry_delay(6, 30.0) <= 30.0
    assert len({retry_delay(3, 300.0) for _ in range(20)}) > 1
