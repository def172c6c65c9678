"""A watch whose connection is cut continues from its copy on a real API server.

Issue 42: a broken watch used to list its collection again (a target's CRDs
are 6 MB); it now watches again from the last resourceVersion it took in,
as client-go does, and lists only if the server answers 410. Here the
connection to a real kube-apiserver (with its watch cache) runs through a
relay the test cuts; a ConfigMap written while it is cut must reach the
copy through the resumed watch, with no second LIST. What a resume saves
at scale is measured by bench/bench_watch_resume.py.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx2
from lightkube.resources.core_v1 import ConfigMap, Namespace
from tests.integration.hubs import client_for
from tests.relay import Relay
from tests.testenv import TestEnv
from tests.waiting import wait_for_async

from modelplane.kube.link import Link
from modelplane.kube.reflector import Reflector, WatchKey
from modelplane.observe.watches import CONFIGMAPS

NAMESPACE = "resumed-watch"
DEADLINE = 30.0


def _cm(name: str) -> ConfigMap:
    return ConfigMap.from_dict({"metadata": {"name": name, "namespace": NAMESPACE}})


async def test_a_watch_cut_off_resumes_from_its_copy_and_misses_nothing(
    target_env: TestEnv,
) -> None:
    client = client_for(target_env)
    client.create(Namespace.from_dict({"metadata": {"name": NAMESPACE}}))
    client.create(_cm("before"))
    requests: list[dict[str, str]] = []

    async def record(request: httpx2.Request) -> None:
        if request.url.path.endswith("/configmaps"):
            requests.append(dict(request.url.params))

    async with Relay(urlsplit(target_env.server).port or 443) as relay:
        http = httpx2.AsyncClient(
            base_url=relay.url,
            verify=target_env.ssl_context(),
            headers={"Authorization": f"Bearer {target_env.token}"},
            event_hooks={"request": [record]},
        )
        changes: list[str] = []
        reflector = Reflector(
            http,
            WatchKey(CONFIGMAPS, namespace=NAMESPACE),
            Link(http, "resume"),
            lambda _key, kind, _name: changes.append(kind),
            label="resume",
        )

        async def holds(name: str) -> bool:
            return reflector.synced and f"{NAMESPACE}/{name}" in reflector.items

        async def watching() -> bool:
            return any(r.get("watch") == "true" for r in requests)

        async def lost() -> bool:
            return "LOST" in changes

        task = asyncio.create_task(reflector.run())
        try:
            await wait_for_async("the first watch", watching, deadline=DEADLINE)
            await wait_for_async("the copy", lambda: holds("before"), deadline=DEADLINE)
            relay.cut()
            await wait_for_async("the watch lost", lost, deadline=DEADLINE)
            # Written while nothing watches: only the resumed watch brings it.
            written = await asyncio.to_thread(client.create, _cm("during"))
            during = int(written.metadata.resourceVersion)  # type: ignore[union-attr]
            relay.mend()
            await wait_for_async(
                "the change made while cut off", lambda: holds("during"), deadline=DEADLINE
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await http.aclose()
    lists = [r for r in requests if r.get("watch") != "true"]
    watches = [r for r in requests if r.get("watch") == "true"]
    assert len(lists) == 1 and reflector.lists == 1, requests
    assert reflector.resumes >= 1, changes
    # Resumed from the version the copy had taken in before the write.
    assert 0 < int(watches[-1]["resourceVersion"]) < during, watches
    assert changes[0] == "LIST" and "RESUMED" in changes, changes
    assert changes.index("LOST") < changes.index("RESUMED") < changes.index("ADDED"), changes
