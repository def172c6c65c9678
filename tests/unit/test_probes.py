"""The operator's /healthz and /readyz, served beside its metrics."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer
from kopf._cogs.structs.references import Insights, Resource
from typer.testing import CliRunner

from modelplane.api.models import API_GROUP, API_VERSION, PLURAL
from modelplane.cli.main import app
from modelplane.operator import metrics
from modelplane.operator.handlers import _waiting_for


async def test_healthz_answers_while_readyz_waits() -> None:
    waiting: list[str | None] = ["the operator is starting"]
    async with TestClient(TestServer(metrics.app(lambda: waiting[0]))) as client:
        assert (await client.get("/healthz")).status == 200
        not_ready = await client.get("/readyz")
        assert not_ready.status == 503
        assert "the operator is starting" in await not_ready.text()
        waiting[0] = None
        assert (await client.get("/readyz")).status == 200
        scraped = await client.get("/metrics")
        assert scraped.status == 200
        assert "modelplane_reconciles_total" in await scraped.text()


async def test_ready_once_kopf_started_and_serves_servingstacks() -> None:
    started, insights = asyncio.Event(), Insights()
    assert _waiting_for(started, insights) == "the operator is starting"
    started.set()
    # Started, but the hub's discovery did not find the CRD.
    assert "is not served by the hub" in (_waiting_for(started, insights) or "")
    insights.watched_resources.add(
        Resource(group=API_GROUP, version=API_VERSION, plural=PLURAL, namespaced=True)
    )
    assert _waiting_for(started, insights) == "no namespace to watch yet"
    insights.namespaces.add("platform")
    assert _waiting_for(started, insights) is None


def test_metrics_address_must_be_an_ip_address() -> None:
    result = CliRunner().invoke(app, ["run", "--metrics-address", "every-interface"])
    assert result.exit_code == 2
    assert "--metrics-address" in result.output
    assert "Traceback" not in result.output
