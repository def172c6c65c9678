"""A kind's plural: the core group's from Kubernetes' models, every other from discovery."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig

from modelplane.kube.client import TargetClient
from modelplane.kube.resources import KindNotServed, plural_of

CONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "t",
    "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
    "clusters": [{"name": "c", "cluster": {"server": "http://203.0.113.10:6443"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
}
# A server whose discovery serves Gateways only (besides the core group).
DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {
        "kind": "APIGroupList",
        "groups": [
            {
                "name": "gateway.networking.k8s.io",
                "versions": [{"groupVersion": "gateway.networking.k8s.io/v1", "version": "v1"}],
            }
        ],
    },
    "/apis/gateway.networking.k8s.io/v1": {
        "kind": "APIResourceList",
        "groupVersion": "gateway.networking.k8s.io/v1",
        "resources": [{"name": "gateways", "kind": "Gateway", "namespaced": True}],
    },
}


def _client(paths: list[str]) -> TargetClient:
    def answer(request: httpx2.Request) -> httpx2.Response:
        paths.append(request.url.path)
        return httpx2.Response(200, json=DISCOVERY.get(request.url.path, {}))

    params = ConnectionParams(transport=httpx2.MockTransport(answer))  # type: ignore[arg-type]
    return TargetClient(KubeConfig.from_dict(CONFIG).get(), params)


@pytest.mark.parametrize(
    ("kind", "plural"),
    [
        ("Namespace", "namespaces"),
        ("ConfigMap", "configmaps"),
        ("ServiceAccount", "serviceaccounts"),
    ],
)
async def test_a_core_kind_needs_no_discovery(kind: str, plural: str) -> None:
    paths: list[str] = []
    client = _client(paths)
    try:
        assert await plural_of(client, "v1", kind) == plural
    finally:
        await client.close()
    assert paths == []


async def test_any_other_group_is_read_from_discovery() -> None:
    paths: list[str] = []
    client = _client(paths)
    try:
        assert await plural_of(client, "gateway.networking.k8s.io/v1", "Gateway") == "gateways"
        assert paths and paths[0] == "/api"
        with pytest.raises(KindNotServed):
            await plural_of(client, "gateway.networking.k8s.io/v1", "HTTPRoute")
    finally:
        await client.close()
