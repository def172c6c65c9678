"""The watch-fed cache answers only when every watch is current, with observe's conversion."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2

from modelplane.api.models import ServingStackSpec
from modelplane.observe.state import to_observed, wanted
from modelplane.observe.watches import CRDS, WatchCache, WatchKey, watch_keys
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL

SPEC = ServingStackSpec.model_validate(
    {
        "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
        "gateway": {"hostname": "west.example.com"},
    }
)


def _gateway(address: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "inference-gateway",
            "namespace": "modelplane-system",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {DIGEST_ANNOTATION: "d1"},
        },
        "status": {"addresses": [{"type": "IPAddress", "value": address}]},
    }


def _cache() -> WatchCache:
    return WatchCache(httpx2.AsyncClient(), wanted(SPEC), lambda: None)


def test_the_ca_configmap_is_watched_only_with_a_hostname() -> None:
    with_hostname = watch_keys(wanted(SPEC))
    without = watch_keys(
        wanted(
            SPEC.model_copy(update={"gateway": SPEC.gateway.model_copy(update={"hostname": None})})
        )
    )
    # The private CA's kinds come with the hostname too; the CA ConfigMap
    # by its name only, as trust-manager writes it without our label.
    ca = [k for k in with_hostname - without if k.api.resource == "configmaps"]
    assert [k.fields for k in ca] == ["metadata.name=modelplane-cluster-ca"]
    assert WatchKey(CRDS) in without


def test_no_answer_until_every_watch_has_listed() -> None:
    async def run() -> None:
        cache = _cache()
        assert await cache.listed(None) is None  # type: ignore[arg-type]
        for reflector in cache.reflectors.values():
            reflector.synced = True
        gateways = next(k for k in cache.reflectors if k.api.resource == "gateways")
        cache.reflectors[gateways].items = {
            "modelplane-system/inference-gateway": _gateway("203.0.113.9")
        }
        apis = {
            "gateway.networking.k8s.io": {"gateways": ["v1"]},
            "": {"secrets": ["v1"], "configmaps": ["v1"]},
        }
        cache._apis, cache._apis_generation = apis, cache.api_generation
        listed = await cache.listed(None)  # type: ignore[arg-type]
        assert listed is not None
        assert to_observed(listed).gateway_addresses == ["203.0.113.9"]
        cache.reflectors[gateways].synced = False
        assert await cache.listed(None) is None  # type: ignore[arg-type]

    asyncio.run(run())


def test_a_crd_event_makes_the_served_apis_stale() -> None:
    cache = _cache()
    generation = cache.api_generation
    cache._on_change(WatchKey(CRDS), "MODIFIED")
    assert cache.api_generation == generation + 1
    secrets = next(k for k in cache.reflectors if k.api.resource == "secrets")
    cache._on_change(secrets, "MODIFIED")
    assert cache.api_generation == generation + 1


def test_a_stack_with_client_cas_watches_configmaps_twice() -> None:
    # Client CAs are a ConfigMap of ours (by label) and the CA ConfigMap is
    # watched by name: two keys on one API, which must still order, or the
    # watcher cannot start for any stack with a hostname and clientCAs.
    spec = ServingStackSpec.model_validate(
        {
            "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
            "gateway": {
                "hostname": "west.example.com",
                "clientCAs": [{"name": "fleet", "certificate": "PEM"}],
            },
        }
    )
    keys = [k for k in watch_keys(wanted(spec)) if k.api.resource == "configmaps"]
    assert len(keys) == 2
    cache = WatchCache(httpx2.AsyncClient(), wanted(spec), lambda: None)
    assert set(cache.reflectors) == watch_keys(wanted(spec))
