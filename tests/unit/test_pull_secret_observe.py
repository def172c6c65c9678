"""The pull Secrets' presence: one metadata-only watch per name, turned into namespaces.

That a real API server answers these requests with metadata only is shown
in tests/integration/test_pull_secrets.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2

from modelplane.kube.discovery import APIS, Served
from modelplane.observe.state import Listed, to_observed, wanted
from modelplane.observe.watches import WatchCache, pull_secret_key, watch_keys

from .test_watch_cache import SERVED, SPEC


def _secret(namespace: Any, name: str = "regcred") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}}


def test_each_name_is_one_metadata_only_watch_across_namespaces() -> None:
    keys = watch_keys(wanted(SPEC, ("regcred", "other")), SERVED) - watch_keys(wanted(SPEC), SERVED)
    assert {(k.api.resource, k.namespace, k.fields, k.metadata_only) for k in keys} == {
        ("secrets", None, "metadata.name=regcred", True),
        ("secrets", None, "metadata.name=other", True),
    }


def test_the_namespaces_a_secret_is_in_and_only_real_ones() -> None:
    listed = Listed(
        apis={},
        pull_secrets={
            "regcred": [
                _secret("cert-manager"),
                _secret("monitoring"),
                _secret("cert-manager"),
                _secret("x" * 64),  # longer than a namespace can be
                _secret("Evil\x1b[2J"),
                _secret(None),
                _secret("kube-system", name="not-it"),  # a field selector the server ignored
            ],
            "absent": [],
        },
    )
    assert to_observed(listed).pull_secrets == {
        "regcred": ["cert-manager", "monitoring"],
        "absent": [],
    }


def test_the_cache_answers_the_secrets_its_watches_hold() -> None:
    async def run() -> None:
        cache = WatchCache(httpx2.AsyncClient(), wanted(SPEC, ("regcred",)), lambda: None)
        cache.learn(SERVED)
        for reflector in cache.reflectors.values():
            reflector.synced = True
        cache.reflectors[pull_secret_key("regcred")].items = {
            "cert-manager/regcred": _secret("cert-manager")
        }
        apis: APIS = {"": {"secrets": ["v1"], "configmaps": ["v1"]}}
        cache._served, cache._apis_generation = Served(apis), cache.api_generation
        listed = await cache.listed(None)  # type: ignore[arg-type]
        assert listed is not None
        assert to_observed(listed).pull_secrets == {"regcred": ["cert-manager"]}
        # A watch not current yet: no answer, rather than a Secret said missing.
        cache.reflectors[pull_secret_key("regcred")].synced = False
        assert await cache.listed(None) is None  # type: ignore[arg-type]

    asyncio.run(run())
