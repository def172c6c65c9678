"""kopf's session to the hub: the kubeconfig's credentials, and few connections.

kopf's own session opens a connection for every request in flight, with no
limit; an operator starting over thousands of stacks sent one for each at
once, a TLS connection apiece. The operator gives kopf its own session
(``operator.hub.bounded_session``), so it must log in as kopf's did, against
a real kube-apiserver, and never hold more than ``HUB_CONNECTIONS`` however
many requests wait.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from tests.testenv import TestEnv
from tests.testenv.sockets import connections_to

from modelplane.operator.hub import HUB_CONNECTIONS, bounded_session, connection_info, load_config


def test_kopf_logs_in_with_the_kubeconfig_and_holds_few_connections(hub_env: TestEnv) -> None:
    info = connection_info(load_config(hub_env.kubeconfig_path))
    port = urlsplit(info.server).port
    assert port is not None
    requests = HUB_CONNECTIONS * 3

    async def run() -> tuple[list[int], int]:
        context = bounded_session(info)
        session = context.aiohttp_session
        # The sockets open to the hub, counted as each answer begins: while
        # the server holds that watch open, so are the others in flight.
        seen: list[int] = []
        try:

            async def one() -> int:
                # A watch that the server ends after a second: each holds
                # its connection that long, so all of them want one at once.
                url = f"{info.server}/api/v1/namespaces?watch=1&timeoutSeconds=1"
                async with session.get(url) as answer:
                    seen.append(connections_to(port))
                    await answer.read()
                    return answer.status

            statuses = await asyncio.gather(*(one() for _ in range(requests)))
            return list(statuses), max(seen)
        finally:
            await session.close()

    statuses, most = asyncio.run(run())
    # Logged in: the hub's CA verified, its token taken.
    assert statuses == [200] * requests
    assert 0 < most <= HUB_CONNECTIONS
