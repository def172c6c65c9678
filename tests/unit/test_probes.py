"""The operator's /healthz and /readyz, served in plain HTTP on a port of their own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner

from modelplane.cli.main import app
from modelplane.operator import metrics
from modelplane.operator.hub import Watched
from modelplane.operator.leader import Elector
from modelplane.operator.process import _readiness


async def test_healthz_answers_while_readyz_waits() -> None:
    now = [metrics.Readiness(ready=False, detail="the operator is starting")]
    async with TestClient(TestServer(metrics.probes_app(lambda: now[0]))) as client:
        assert (await client.get("/healthz")).status == 200
        not_ready = await client.get("/readyz")
        assert not_ready.status == 503
        assert "the operator is starting" in await not_ready.text()
        now[0] = metrics.READY
        assert (await client.get("/readyz")).status == 200
        now[0] = metrics.Readiness(ready=True, detail="standby: the Lease ns/l is held by a")
        standby = await client.get("/readyz")
        assert standby.status == 200
        assert (await standby.text()).startswith("standby: ")
        # /metrics is not here: it is served over HTTPS, to callers the hub allows.
        assert (await client.get("/metrics")).status == 404


def _served() -> Watched:
    return Watched(["platform"], served=True)


async def test_ready_once_kopf_started_and_serves_servingstacks() -> None:
    started, watched = asyncio.Event(), Watched(["platform"])
    assert _readiness(started, watched, None).detail == "the operator is starting"
    started.set()
    # Started, but the startup check found no ServingStacks on the hub.
    watched.served = False
    waiting = _readiness(started, watched, None)
    assert not waiting.ready and "is not served by the hub" in waiting.detail
    watched.served = True
    assert _readiness(started, watched, None) == metrics.READY


@pytest.mark.parametrize(
    ("namespaces", "clusterwide", "ready"),
    [
        ([], True, True),
        (["platform"], False, True),
        (["platform", "team-*"], False, True),
        # Patterns only: with scanning off, kopf watches no namespace at all.
        (["team-*", "!kube-system"], False, False),
    ],
)
async def test_patterns_alone_give_no_namespace_to_watch(
    namespaces: list[str], clusterwide: bool, ready: bool
) -> None:
    started = asyncio.Event()
    started.set()
    watched = Watched.of(namespaces, clusterwide)
    watched.served = True
    answer = _readiness(started, watched, None)
    assert answer.ready is ready
    if not ready:
        assert answer.detail == "no namespace to watch yet"


@dataclass
class _Candidate:
    """What _readiness reads of an Elector; tests/integration/test_chart_rbac.py runs real ones."""

    leading: bool = False
    standing_by_for: str | None = None
    error: str | None = None
    lease: str = "modelplane/mp-modelplane"


async def test_a_standby_that_reads_its_lease_is_ready_and_says_standby() -> None:
    # kopf never starts on a standby: without this a rolling update of two
    # replicas would wait on the new pod for ever.
    started = asyncio.Event()
    candidate = _Candidate(standing_by_for="mp-modelplane-0_1a2b")
    standby = _readiness(started, Watched([]), cast(Elector, candidate))
    assert standby.ready
    assert standby.detail == (
        "standby: the Lease modelplane/mp-modelplane is held by mp-modelplane-0_1a2b"
    )


async def test_a_standby_that_cannot_read_its_lease_is_not_ready() -> None:
    started = asyncio.Event()
    before_first_try = _readiness(started, Watched([]), cast(Elector, _Candidate()))
    assert not before_first_try.ready and before_first_try.detail == "the operator is starting"
    refused = _Candidate(error='403 Forbidden: leases "mp-modelplane" is forbidden')
    answer = _readiness(started, Watched([]), cast(Elector, refused))
    assert not answer.ready
    assert "the Lease modelplane/mp-modelplane cannot be read: 403 Forbidden" in answer.detail


async def test_a_new_leader_is_ready_only_once_kopf_serves() -> None:
    started = asyncio.Event()
    leader = cast(Elector, _Candidate(leading=True))
    assert _readiness(started, _served(), leader).detail == "the operator is starting"
    started.set()
    assert _readiness(started, _served(), leader) == metrics.READY


def test_metrics_address_must_be_an_ip_address() -> None:
    result = CliRunner().invoke(app, ["run", "--metrics-address", "every-interface"])
    assert result.exit_code == 2
    assert "--metrics-address" in result.output
    assert "Traceback" not in result.output


def test_probes_and_metrics_need_a_port_each() -> None:
    result = CliRunner().invoke(app, ["run", "--metrics-port", "8443", "--health-port", "8443"])
    assert result.exit_code == 2
    assert "--health-port" in result.output
    assert "Traceback" not in result.output
