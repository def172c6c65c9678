"""Mirror rules and pull Secrets through the plan: the values each chart gets, the own objects."""

from __future__ import annotations

from typing import Any

import pytest
from tests.shared_fixtures import upstream_dir, yaml_docs

from modelplane.catalog import configuration as cfg
from modelplane.catalog.components import envoy_gateway, modelexpress_crds
from modelplane.catalog.configuration import ConfigObject, configuration_for
from modelplane.catalog.images import ProductImages
from modelplane.plan import Plan, plan
from modelplane.plan.images import parse_rules
from modelplane.plan.sources import Sources

from .conftest import StackFactory

MIRROR = Sources(image_mirrors=parse_rules(["*=mirror.internal"]), image_pull_secrets=("pull",))
PULL = [{"name": "pull"}]


def _get(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        assert isinstance(node, dict) and key in node, f"{path}: no {key!r}"
        node = node[key]
    return node


def _values(p: Plan, component: str) -> dict[str, Any]:
    [release] = [r for r in p.releases if r.component == component]
    return release.values


def _kind(objects: list[Any], kind: str) -> dict[str, Any]:
    bodies = [o.object if hasattr(o, "object") else o.body for o in objects]
    [body] = [b for b in bodies if b["kind"] == kind]
    return body


# What the plan sets where, for each shape a chart sets its images in (the
# paths are the charts' own, images.md per chart).
VALUES = [
    ("cert-manager", "image.repository", "mirror.internal/jetstack/cert-manager-controller"),
    ("cert-manager", "webhook.image.repository", "mirror.internal/jetstack/cert-manager-webhook"),
    (
        "cert-manager",
        "acmesolver.image.repository",
        "mirror.internal/jetstack/cert-manager-acmesolver",
    ),
    ("cert-manager", "global.imagePullSecrets", PULL),
    ("kube-prometheus-stack", "prometheusOperator.image.registry", "mirror.internal"),
    (
        "kube-prometheus-stack",
        "prometheusOperator.image.repository",
        "prometheus-operator/prometheus-operator",
    ),
    (
        "kube-prometheus-stack",
        "prometheusOperator.prometheusConfigReloader.image.registry",
        "mirror.internal",
    ),
    (
        "kube-prometheus-stack",
        "prometheusOperator.admissionWebhooks.patch.image.registry",
        "mirror.internal",
    ),
    ("kube-prometheus-stack", "prometheus.prometheusSpec.image.registry", "mirror.internal"),
    ("kube-prometheus-stack", "kube-state-metrics.image.registry", "mirror.internal"),
    ("kube-prometheus-stack", "prometheus-node-exporter.image.registry", "mirror.internal"),
    ("kube-prometheus-stack", "global.imagePullSecrets", PULL),
    (
        "node-feature-discovery",
        "image.repository",
        "mirror.internal/nfd/node-feature-discovery",
    ),
    ("node-feature-discovery", "imagePullSecrets", PULL),
    (
        "nvidia-dra-driver-gpu",
        "image.repository",
        "mirror.internal/dra-driver-nvidia/dra-driver-nvidia-gpu",
    ),
    ("nvidia-dra-driver-gpu", "imagePullSecrets", PULL),
    (
        "envoy-gateway",
        "global.images.envoyGateway.image",
        "mirror.internal/envoyproxy/gateway:v1.8.4",
    ),
    ("envoy-gateway", "global.imagePullSecrets", PULL),
    (
        "ai-gateway",
        "controller.image.repository",
        "mirror.internal/envoyproxy/ai-gateway-controller",
    ),
    ("ai-gateway", "extProc.image.repository", "mirror.internal/envoyproxy/ai-gateway-extproc"),
    ("ai-gateway", "controller.imagePullSecrets", PULL),
    ("ai-gateway", "extProc.imagePullSecrets", PULL),
    ("trust-manager", "image.repository", "mirror.internal/jetstack/trust-manager"),
    ("trust-manager", "imagePullSecrets", PULL),
    ("leader-worker-set", "image.manager.repository", "mirror.internal/lws/lws"),
    ("leader-worker-set", "imagePullSecrets", PULL),
    ("kai-scheduler", "global.registry", "mirror.internal/kai-scheduler/kai-scheduler"),
    ("kai-scheduler", "global.imagePullSecrets", PULL),
    ("grove", "image.repository", "mirror.internal/ai-dynamo/grove/grove-operator"),
    (
        "grove",
        "deployment.env",
        [
            {
                "name": "GROVE_INIT_CONTAINER_IMAGE",
                "value": "mirror.internal/ai-dynamo/grove/grove-initc",
            }
        ],
    ),
]


@pytest.mark.parametrize(("component", "path", "expected"), VALUES)
def test_the_release_values_carry_each_path(
    make_stack: StackFactory, component: str, path: str, expected: Any
) -> None:
    stack = "Standard" if component == "leader-worker-set" else "Dynamo"
    p = plan(make_stack(stack=stack), sources=MIRROR)
    assert _get(_values(p, component), path) == expected


def test_grove_at_its_pin_gets_no_pull_secrets_and_the_plan_says_so(
    make_stack: StackFactory,
) -> None:
    # grove-charts v0.1.0-alpha.12-rc2 (rc1's sources) reads no pull-secret value.
    p = plan(make_stack(stack="Dynamo"), sources=MIRROR)
    [grove] = [r for r in p.releases if r.component == "grove"]
    assert "imagePullSecrets" not in grove.values
    assert grove.refused == ["imagePullSecrets"]
    said = (
        "grove-charts v0.1.0-alpha.12-rc2 reads no pull-secret value, so its pods pull "
        "without one (imagePullSecrets left unset)"
    )
    assert f"{said}." in p.notes
    [component] = [c for c in p.components if c.name == "grove"]
    assert said in component.message
    # Every other release takes the Secrets where its chart reads them.
    assert [r.component for r in p.releases if r.refused] == ["grove"]


def test_grove_at_another_version_is_composed_unchecked(make_stack: StackFactory) -> None:
    # The catalog does not know what another version reads (main reads
    # imagePullSecrets), so nothing is refused there.
    stack = make_stack(stack="Dynamo", dynamo={"grove": "v0.1.0-alpha.13"})
    p = plan(stack, sources=MIRROR)
    assert _get(_values(p, "grove"), "imagePullSecrets") == PULL
    assert not any("pull-secret" in note for note in p.notes)


def test_the_mirror_keeps_each_chart_values_of_its_own(make_stack: StackFactory) -> None:
    # The overlay merges: kube-prometheus-stack still has Grafana off and
    # its scrape selectors, the DRA driver its override, and so on.
    p = plan(make_stack(stack="Dynamo"), sources=MIRROR)
    kps = _values(p, "kube-prometheus-stack")
    assert kps["grafana"]["enabled"] is False
    assert kps["prometheus"]["prometheusSpec"]["podMonitorNamespaceSelector"] == {}
    assert _values(p, "nvidia-dra-driver-gpu")["gpuResourcesEnabledOverride"] is True
    assert _values(p, "trust-manager")["defaultPackage"] == {"enabled": False}


def test_without_rules_or_secrets_no_release_value_changes(make_stack: StackFactory) -> None:
    stack = make_stack(stack="Dynamo")
    bare, empty = plan(stack), plan(stack, sources=Sources())
    assert [r.digest for r in bare.releases] == [r.digest for r in empty.releases]
    for release in bare.releases:
        assert "imagePullSecrets" not in str(release.values)


# --- the product's own objects -------------------------------------------------------


def _spec(make_stack: StackFactory, **fields: Any) -> Any:
    return make_stack(**fields).spec


def _proxy_kubernetes(objects: list[ConfigObject]) -> dict[str, Any]:
    body = _kind(objects, "EnvoyProxy")
    kubernetes: dict[str, Any] = body["spec"]["provider"]["kubernetes"]
    return kubernetes


# What the EnvoyProxy sets of the proxy Deployment whatever the images: its rollout.
ROLLOUT = {
    "replicas": 2,
    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
}


def test_the_envoy_proxy_is_untouched_without_a_mirror(make_stack: StackFactory) -> None:
    kubernetes = _proxy_kubernetes(configuration_for(_spec(make_stack)))
    assert kubernetes["envoyService"] == {"externalTrafficPolicy": "Cluster"}
    assert kubernetes["envoyDeployment"] == ROLLOUT


def test_the_envoy_proxy_gets_the_mirrored_image_and_pull_secrets(
    make_stack: StackFactory,
) -> None:
    moved = "mirror.internal/envoyproxy/envoy:distroless-v1.38.3"
    images = ProductImages({envoy_gateway.ENVOY_PROXY: moved}, ("pull",))
    kubernetes = _proxy_kubernetes(configuration_for(_spec(make_stack), images))
    assert kubernetes["envoyDeployment"] == {
        **ROLLOUT,
        "container": {"image": moved},
        "pod": {"imagePullSecrets": PULL},
    }
    assert kubernetes["envoyService"] == {"externalTrafficPolicy": "Cluster"}


def test_pull_secrets_alone_leave_the_proxy_image_to_envoy_gateway(
    make_stack: StackFactory,
) -> None:
    kubernetes = _proxy_kubernetes(
        configuration_for(_spec(make_stack), ProductImages(pull_secrets=("pull",)))
    )
    assert kubernetes["envoyDeployment"] == {**ROLLOUT, "pod": {"imagePullSecrets": PULL}}


def _modelexpress_pod(objects: list[Any]) -> dict[str, Any]:
    pod: dict[str, Any] = _kind(objects, "Deployment")["spec"]["template"]["spec"]
    return pod


def test_the_modelexpress_server_is_mirrored_with_pull_secrets(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo"), sources=MIRROR)
    pod = _modelexpress_pod(p.objects)
    assert pod["containers"][0]["image"] == (
        "mirror.internal/nvidia/ai-dynamo/modelexpress-server:0.4.1"
    )
    assert pod["imagePullSecrets"] == PULL
    bare = _modelexpress_pod(plan(make_stack(stack="Dynamo")).objects)
    assert bare["containers"][0]["image"] == f"{cfg.MODELEXPRESS_IMAGE}:0.4.1"
    assert "imagePullSecrets" not in bare


@pytest.mark.parametrize("mode", ["Managed", "Provided"])
def test_the_plan_lists_the_product_images_under_their_component(
    make_stack: StackFactory, mode: str
) -> None:
    # Applied in both modes, so moved and listed in both.
    p = plan(make_stack(stack="Dynamo", components=mode), sources=MIRROR)
    own = {(u.component, u.image): u.mirrored for u in p.images}
    proxy = ("envoy-gateway", envoy_gateway.ENVOY_PROXY.image)
    server = (
        modelexpress_crds.COMPONENT.name,
        "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.4.1",
    )
    assert own[proxy] == "mirror.internal/envoyproxy/envoy:distroless-v1.38.3"
    assert own[server] == "mirror.internal/nvidia/ai-dynamo/modelexpress-server:0.4.1"
    body = _kind(p.objects, "EnvoyProxy")
    assert (
        body["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"]["image"]
        == (own[proxy])
    )
    assert p.image_mirrors == ["*=mirror.internal"]


def _unknown_fields(value: Any, schema: dict[str, Any], at: str) -> list[str]:
    """The fields of ``value`` the structural schema has no place for."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return []
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out: list[str] = []
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                out.append(f"{at}.{key}")
            else:
                out += _unknown_fields(child, sub, f"{at}.{key}")
        return out
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _unknown_fields(v, schema["items"], at)]
    return []


def test_the_mirrored_envoy_proxy_fits_envoy_gateways_own_schema(make_stack: StackFactory) -> None:
    # A field the CRD does not know would be pruned by the API server, and
    # the proxy would pull from docker.io after all.
    path = upstream_dir() / "envoy-gateway" / "gateway.envoyproxy.io_envoyproxies.yaml"
    if not path.exists():
        pytest.skip(f"no upstream CRD at {path}")
    [crd] = [d for d in yaml_docs(path) if d]
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    body = _kind(plan(make_stack(), sources=MIRROR).objects, "EnvoyProxy")
    assert "envoyDeployment" in body["spec"]["provider"]["kubernetes"]
    assert _unknown_fields(body["spec"], schema, "spec") == []


QUAY_ONLY = Sources(
    image_mirrors=parse_rules(["quay.io=mirror.internal/quay"]), image_pull_secrets=("pull",)
)


def test_with_rules_only_the_components_they_move_take_the_pull_secrets(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack(stack="Dynamo"), sources=QUAY_ONLY)
    # cert-manager pulls from quay.io, so from the mirror, with its Secret.
    assert _get(_values(p, "cert-manager"), "global.imagePullSecrets") == PULL
    # NFD pulls from registry.k8s.io, which no rule names: the mirror's
    # Secret means nothing there, and is not asked for in its namespace.
    assert "imagePullSecrets" not in _values(p, "node-feature-discovery")
    assert "imagePullSecrets" not in _modelexpress_pod(p.objects)
    assert _proxy_kubernetes(p.objects)["envoyDeployment"] == ROLLOUT


def test_without_rules_every_component_takes_the_pull_secrets(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo"), sources=Sources(image_pull_secrets=("pull",)))
    assert _get(_values(p, "node-feature-discovery"), "imagePullSecrets") == PULL
    assert _modelexpress_pod(p.objects)["imagePullSecrets"] == PULL
