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
from pathlib import Path
from urllib.parse import urlsplit

from lightkube import Client
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness, ensure_namespace, put_stack, stack_body
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv
from tests.testenv.sockets import connection_inodes
from tests.waiting import wait_for

from modelplane.operator.handlers import FINALIZER
from modelplane.operator.hub import HUB_CONNECTIONS, bounded_session, connection_info, load_config


def test_kopf_logs_in_with_the_kubeconfig_and_holds_few_connections(hub_env: TestEnv) -> None:
    info = connection_info(load_config(hub_env.kubeconfig_path))
    port = urlsplit(info.server).port
    assert port is not None
    requests = HUB_CONNECTIONS * 3

    async def run() -> tuple[list[int], int]:
        # No watch of kopf's here: every connection is for the requests.
        context = bounded_session(info, watches=0)
        session = context.aiohttp_session
        # The session's sockets to the hub, counted as each answer begins:
        # while the server holds that watch open, so are the others in
        # flight. The process's other clients of the hub (a fixture's, kept
        # alive) held theirs before, and are left out.
        before = connection_inodes(port)
        seen: list[int] = []
        try:

            async def one() -> int:
                # A watch that the server ends after a second: each holds
                # its connection that long, so all of them want one at once.
                url = f"{info.server}/api/v1/namespaces?watch=1&timeoutSeconds=1"
                async with session.get(url) as answer:
                    seen.append(len(connection_inodes(port) - before))
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


def test_an_operator_watching_more_namespaces_than_the_bound_still_patches(
    hub: Client, hub_env: TestEnv, tmp_path: Path
) -> None:
    # Each watched namespace is a kopf watch holding a connection for its
    # life: with more of them than HUB_CONNECTIONS and no room made for
    # them, the last namespaces would never be watched, nor any stack patched.
    namespaces = [f"many-ns-{i}" for i in range(HUB_CONNECTIONS + 5)]
    for ns in namespaces:
        ensure_namespace(hub, ns)
    last = namespaces[-1]
    put_stack(hub, stack_body(last, "far", secret="missing"))
    nowhere = Substrate("http://127.0.0.1:9/charts", "http://127.0.0.1:9/manifests", tmp_path)
    h = Harness(hub, hub_env, hub_env, nowhere, tmp_path, namespaces[0])
    try:
        h.start(*(arg for ns in namespaces[1:] for arg in ("--namespace", ns)))

        def finalized() -> bool:
            stack = hub.get(SS, "far", namespace=last).to_dict()
            return FINALIZER in (stack["metadata"].get("finalizers") or [])

        # kopf's patch, on a stack seen by its last namespace's watch.
        wait_for("the stack in the last namespace finalized", finalized, deadline=90)
    finally:
        h.stop()
        hub.patch(
            SS,
            "far",
            {"metadata": {"finalizers": None}},
            namespace=last,
            patch_type=PatchType.MERGE,
        )
        hub.delete(SS, "far", namespace=last)
