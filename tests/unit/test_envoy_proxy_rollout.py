"""The EnvoyProxy sets the proxies' rollout so the gateway keeps serving while they roll."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.shared_fixtures import upstream_dir, yaml_docs

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.configuration import configuration_for
from modelplane.catalog.images import ProductImages

from .conftest import StackFactory


def _proxy_kubernetes(spec: ServingStackSpec) -> dict[str, Any]:
    [body] = [
        o.body for o in configuration_for(spec, ProductImages()) if o.body["kind"] == "EnvoyProxy"
    ]
    kubernetes: dict[str, Any] = body["spec"]["provider"]["kubernetes"]
    return kubernetes


def _count(value: int | str, replicas: int, rounding: Any) -> int:
    """An int-or-percent as the Deployment controller reads it."""
    if isinstance(value, int):
        return value
    return int(rounding(replicas * int(value.rstrip("%")) / 100))


def least_ready_during_a_roll(replicas: int, strategy: dict[str, Any]) -> int:
    """The fewest pods the Deployment controller keeps available while it rolls.

    Kubernetes' rule: maxUnavailable rounds down, maxSurge up, and a
    Recreate takes every old pod away first.
    """
    if strategy.get("type") == "Recreate":
        return 0
    rolling = strategy.get("rollingUpdate") or {}
    unavailable = _count(rolling.get("maxUnavailable", "25%"), replicas, math.floor)
    surge = _count(rolling.get("maxSurge", "25%"), replicas, math.ceil)
    if unavailable == 0 and surge == 0:
        unavailable = 1  # the API server refuses both 0; as if one
    return max(replicas - unavailable, 0)


@pytest.mark.parametrize(
    ("replicas", "strategy", "least"),
    [
        (2, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}, 2),
        (1, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}, 1),
        # What the product guards against: a roll that takes every proxy at once.
        (2, {"type": "Recreate"}, 0),
        (2, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}, 0),
        (4, {"type": "RollingUpdate"}, 3),
    ],
)
def test_least_ready_during_a_roll(replicas: int, strategy: dict[str, Any], least: int) -> None:
    assert least_ready_during_a_roll(replicas, strategy) == least


def test_the_proxies_never_roll_to_zero_and_a_drain_leaves_one(make_stack: StackFactory) -> None:
    kubernetes = _proxy_kubernetes(make_stack().spec)
    deployment = kubernetes["envoyDeployment"]
    replicas = deployment["replicas"]
    assert least_ready_during_a_roll(replicas, deployment["strategy"]) == replicas
    # A drain takes at most one: one is left serving.
    assert kubernetes["envoyPDB"] == {"maxUnavailable": 1} and replicas >= 2
    # The Service the spec names is untouched.
    assert kubernetes["envoyService"] == {"externalTrafficPolicy": "Cluster"}


def test_the_budget_satisfies_envoy_gateways_own_rule(make_stack: StackFactory) -> None:
    path = upstream_dir() / "envoy-gateway" / "gateway.envoyproxy.io_envoyproxies.yaml"
    if not path.exists():
        pytest.skip(f"no upstream CRD at {path}")
    [crd] = [d for d in yaml_docs(path) if d]
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    kubernetes = spec["properties"]["provider"]["properties"]["kubernetes"]["properties"]
    [rule] = kubernetes["envoyPDB"]["x-kubernetes-validations"]
    assert rule["message"] == "only one of minAvailable or maxUnavailable can be specified"
    pdb = _proxy_kubernetes(make_stack().spec)["envoyPDB"]
    assert ("minAvailable" in pdb) != ("maxUnavailable" in pdb)
    rolling = kubernetes["envoyDeployment"]["properties"]["strategy"]["properties"]
    assert {"maxUnavailable", "maxSurge"} <= set(rolling["rollingUpdate"]["properties"])
