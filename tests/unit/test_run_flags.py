"""``modelplane run``'s own checks of its flags, each a function of a few of them."""

from __future__ import annotations

import pytest
import typer

from modelplane.cli.run import Election, check_listeners, leader_election, shard_selector


@pytest.mark.parametrize(
    ("address", "metrics", "health", "refused"),
    [
        ("0.0.0.0", 8443, 8081, None),
        ("127.0.0.1", None, None, None),
        ("::1", 8443, None, None),
        ("every-interface", 8443, 8081, "--metrics-address"),
        ("0.0.0.0", 8080, 8080, "--health-port"),
    ],
)
def test_listeners(
    address: str, metrics: int | None, health: int | None, refused: str | None
) -> None:
    if refused is None:
        check_listeners(address, metrics, health)
        return
    with pytest.raises(typer.BadParameter) as caught:
        check_listeners(address, metrics, health)
    assert caught.value.param_hint == refused


@pytest.mark.parametrize(
    ("given", "canonical"),
    [(None, None), ("shard == a", "shard=a"), ("!x,y in (b,a)", "!x,y in (a,b)")],
)
def test_shard_selector(given: str | None, canonical: str | None) -> None:
    assert shard_selector(given) == canonical


def test_a_bad_selector_names_the_flag() -> None:
    with pytest.raises(typer.BadParameter) as caught:
        shard_selector("a in (b")
    assert caught.value.param_hint == "--selector"


def test_leader_election_names_its_timing_flags() -> None:
    given = Election(None, None, lease_duration=15.0, renew_deadline=20.0, retry_period=2.0)
    with pytest.raises(typer.BadParameter) as caught:
        leader_election(given, ["platform"], None)
    assert "renew-deadline" in str(caught.value.param_hint)
    ok = leader_election(Election("ns", "lease", 15.0, 10.0, 2.0), ["platform"], None)
    assert (ok.namespace, ok.name) == ("ns", "lease")
