"""``plan(stack, observed)``: pure, and every rule of the install plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from modelplane.catalog.components import components_for, components_of_stack
from modelplane.catalog.configuration import Hold
from modelplane.catalog.types import Component
from modelplane.pins import Stack
from modelplane.plan import Observed, Plan, plan
from modelplane.plan.model import (
    ObjectAction,
    ReleaseAction,
    ReleaseState,
    RequirementStatus,
)
from modelplane.plan.observed import ObservedRelease
from modelplane.plan.releases import release_action, release_state
from modelplane.plan.sources import Sources
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY_LABEL

from .conftest import CA_PEM, StackFactory, installed

HOST = "west.example.com"
GKE_ROOT = "/home/kubernetes/bin/nvidia"
CAS = [{"name": "fleet", "certificate": CA_PEM}]
ServeAll = Callable[..., Observed]


def _of_stack(stack: Stack, kind: str) -> list[Component]:
    # From the catalog, so a component added there is expected here too.
    return [c for c in components_of_stack(stack) if c.kind == kind]


STANDARD_CHARTS = [c.release_name for c in _of_stack(Stack.STANDARD, "chart")]
DYNAMO_CHARTS = [c.release_name for c in _of_stack(Stack.DYNAMO, "chart")]


def _release(p: Plan, name: str) -> Any:
    [r] = [r for r in p.releases if r.name == name]
    return r


def _object(p: Plan, kind: str, name: str | None = None) -> Any:
    found = [
        o
        for o in p.objects
        if o.object["kind"] == kind and (name is None or o.object["metadata"]["name"] == name)
    ]
    assert len(found) == 1, [o.key for o in found]
    return found[0]


# --- nothing observed ----------------------------------------------------------


def test_nothing_observed_lists_everything_standard(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    assert [r.name for r in p.releases] == STANDARD_CHARTS
    assert all(r.state is ReleaseState.ABSENT for r in p.releases)
    assert [m.component for m in p.manifests] == [
        c.name for c in _of_stack(Stack.STANDARD, "manifests")
    ]
    kinds = [o.object["kind"] for o in p.objects]
    assert kinds == ["Namespace", "EnvoyProxy", "GatewayClass", "Gateway"]
    assert (p.stack, p.mode, p.name, p.namespace) == ("Standard", "Managed", "west", "platform")


def test_nothing_observed_lists_everything_dynamo(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo", gateway={"hostname": HOST, "clientCAs": CAS}))
    assert [r.name for r in p.releases] == DYNAMO_CHARTS
    assert [m.component for m in p.manifests] == [
        c.name for c in _of_stack(Stack.DYNAMO, "manifests")
    ]
    kinds = {o.object["kind"] for o in p.objects}
    assert kinds >= {"Queue", "Deployment", "Service", "Bundle", "ClientTrafficPolicy"}


def test_config_objects_held_back_naming_the_missing_api(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo", gateway={"hostname": HOST, "clientCAs": CAS}))
    for o in p.objects:
        if o.needs:
            assert o.action is ObjectAction.HOLD, o.key
            assert o.hold is not None and o.hold_reason is not None
            for api in o.needs:
                assert api in o.hold_reason, (o.key, o.hold_reason)
        else:
            assert o.action is ObjectAction.APPLY, o.key
    gateway = _object(p, "Gateway")
    assert gateway.hold_reason == (
        "waits for the target to serve gateways.gateway.networking.k8s.io/v1"
    )
    assert _object(p, "Deployment").hold_reason == (
        "waits for the target to serve modelmetadatas.modelexpress.nvidia.com/v1alpha1"
    )
    assert _object(p, "Queue", "modelplane").hold_reason == (
        "waits for the target to serve queues.scheduling.run.ai/v2"
    )


def test_objects_are_stamped(make_stack: StackFactory) -> None:
    for o in plan(make_stack()).objects:
        meta = o.object["metadata"]
        assert meta["labels"][MANAGED_BY_LABEL] == "modelplane"
        assert len(meta["annotations"][DIGEST_ANNOTATION]) == 16


def test_plan_is_pure_and_deterministic(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    stack = make_stack(stack="Dynamo", gateway={"hostname": HOST, "clientCAs": CAS})
    observed = serve_everything()
    before = observed.model_dump()
    assert plan(stack, observed) == plan(stack, observed)
    assert observed.model_dump() == before


# --- Managed and Provided ----------------------------------------------------------


@pytest.mark.parametrize("stack", ["Standard", "Dynamo"])
def test_provided_plans_no_releases(make_stack: StackFactory, stack: str) -> None:
    p = plan(make_stack(stack=stack, components="Provided", nvidiaDriverRoot=GKE_ROOT))
    assert p.releases == []
    # Substrate manifests are the cluster's; the product's own CRDs are not.
    expected = [c.name for c in _of_stack(Stack(stack), "manifests") if c.role == "config"]
    assert [m.component for m in p.manifests] == expected
    assert expected == (["modelexpress-crds"] if stack == "Dynamo" else [])
    # The substrate's own objects (the GKE quota) are not installed either.
    assert all(o.component == "configuration" for o in p.objects)
    assert {o.object["kind"] for o in p.objects} >= {
        "Namespace",
        "EnvoyProxy",
        "GatewayClass",
        "Gateway",
    }
    substrate = [c for c in p.components if c.name != "modelexpress-crds"]
    assert all(c.mode == "Provided" for c in substrate)
    assert any("Provided mode" in note for note in p.notes)


def test_provided_checks_requirements(make_stack: StackFactory) -> None:
    p = plan(make_stack(components="Provided"))
    titles = {r.requirement for r in p.requirements}
    assert "CRD certificates.cert-manager.io serving v1" in titles
    assert "DeviceClass gpu.nvidia.com (resource.k8s.io/v1)" in titles
    assert "CRD leaderworkersets.leaderworkerset.x-k8s.io serving v1" in titles
    assert not p.requirements_met
    by_name = {c.name: c for c in p.components}
    assert by_name["cert-manager"].state == "Unmet"
    assert "certificates.cert-manager.io" in by_name["cert-manager"].message


def test_provided_met_when_everything_is_served(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    p = plan(make_stack(components="Provided", stack="Dynamo"), serve_everything())
    assert p.requirements_met
    assert all(c.state == "Met" for c in p.components if c.mode == "Provided")
    # With the APIs served, configuration is applied in Provided mode too.
    assert all(o.action is ObjectAction.APPLY for o in p.objects)


def test_managed_gke_root_plans_the_quota_before_the_driver(make_stack: StackFactory) -> None:
    p = plan(make_stack(nvidiaDriverRoot=GKE_ROOT))
    quota = _object(p, "ResourceQuota")
    assert quota.component == "dra-driver-critical-pods-quota"
    assert quota.object["metadata"]["namespace"] == "nvidia-dra-driver"
    dra = _release(p, "mp-dra-driver-nvidia-gpu")
    assert dra.values["nvidiaDriverRoot"] == GKE_ROOT
    assert dra.action is ReleaseAction.WAIT
    assert dra.waiting_for == ["dra-driver-critical-pods-quota"]


def test_managed_default_root_has_no_quota(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    assert not [o for o in p.objects if o.object["kind"] == "ResourceQuota"]
    dra = _release(p, "mp-dra-driver-nvidia-gpu")
    assert "nvidiaDriverRoot" not in dra.values
    assert dra.action is ReleaseAction.INSTALL


def test_lws_only_on_standard_grove_kai_modelexpress_only_on_dynamo(
    make_stack: StackFactory,
) -> None:
    standard = {c.name for c in plan(make_stack()).components}
    dynamo = {c.name for c in plan(make_stack(stack="Dynamo")).components}
    assert "leader-worker-set" in standard - dynamo
    assert {"grove", "kai-scheduler", "modelexpress-crds"} <= dynamo - standard


def test_version_overrides_reach_the_release(make_stack: StackFactory) -> None:
    p = plan(make_stack(versions={"certManager": "v1.21.1"}))
    assert _release(p, "mp-cert-manager").version == "v1.21.1"
    by_name = {c.name: c for c in p.components}
    assert by_name["cert-manager"].version == "v1.21.1"


def test_sources_point_charts_and_manifests_at_mirrors(make_stack: StackFactory) -> None:
    sources = Sources(
        chart_repository="oci://mirror.internal/charts",
        chart_repository_for={"cert-manager": "https://mirror.internal/jetstack"},
        manifests_base_url_for={"gaie-crds": "https://mirror.internal/gaie"},
    )
    p = plan(make_stack(), sources=sources)
    assert _release(p, "mp-cert-manager").repository == "https://mirror.internal/jetstack"
    assert _release(p, "mp-lws").repository == "oci://mirror.internal/charts"
    [gaie] = p.manifests
    assert gaie.url.startswith("https://mirror.internal/gaie/")
    by_name = {c.name: c for c in p.components}
    assert by_name["cert-manager"].repository == "https://mirror.internal/jetstack"


# --- releases: state machine and dependencies ------------------------------------


def _seen(status: str, revision: int = 1, digest: str | None = "d") -> ObservedRelease:
    return ObservedRelease(
        name="mp-x", namespace="x", revision=revision, status=status, digest=digest
    )


@pytest.mark.parametrize(
    ("seen", "state", "action"),
    [
        (None, ReleaseState.ABSENT, ReleaseAction.INSTALL),
        (_seen("deployed"), ReleaseState.IN_SYNC, ReleaseAction.NONE),
        (_seen("deployed", digest="other"), ReleaseState.OUT_OF_SYNC, ReleaseAction.UPGRADE),
        (_seen("deployed", digest=None), ReleaseState.OUT_OF_SYNC, ReleaseAction.UPGRADE),
        (_seen("pending-install"), ReleaseState.LOCKED, ReleaseAction.REINSTALL),
        (_seen("pending-upgrade", revision=3), ReleaseState.LOCKED, ReleaseAction.ROLLBACK),
        (_seen("pending-rollback", revision=3), ReleaseState.LOCKED, ReleaseAction.ROLLBACK),
        (_seen("failed"), ReleaseState.FAILED, ReleaseAction.REINSTALL),
        (_seen("failed", revision=2), ReleaseState.FAILED, ReleaseAction.UPGRADE),
    ],
)
def test_release_state_machine(
    seen: ObservedRelease | None, state: ReleaseState, action: ReleaseAction
) -> None:
    assert release_state("d", seen) is state
    assert release_action(state, seen) is action


def test_release_states_in_a_plan(make_stack: StackFactory) -> None:
    stack = make_stack()
    fresh = plan(stack)
    cm = _release(fresh, "mp-cert-manager")
    observed = Observed(
        releases={
            "mp-cert-manager": ObservedRelease(
                name="mp-cert-manager",
                namespace="cert-manager",
                revision=4,
                status="pending-upgrade",
                digest=cm.digest,
            ),
            "mp-lws": ObservedRelease(
                name="mp-lws", namespace="lws-system", revision=2, status="deployed", digest="x"
            ),
        }
    )
    p = plan(stack, observed)
    assert _release(p, "mp-cert-manager").state is ReleaseState.LOCKED
    assert _release(p, "mp-cert-manager").action is ReleaseAction.ROLLBACK
    assert _release(p, "mp-lws").state is ReleaseState.OUT_OF_SYNC
    assert _release(p, "mp-lws").action is ReleaseAction.UPGRADE
    # A locked dependency keeps its dependents waiting.
    assert _release(p, "mp-gateway-helm").action is ReleaseAction.WAIT


def test_dependency_waits(make_stack: StackFactory) -> None:
    stack = make_stack(stack="Dynamo")
    p = plan(stack)
    waits = {r.name: r.waiting_for for r in p.releases if r.action is ReleaseAction.WAIT}
    # On an empty target a release waits for every dependency the spec enables.
    enabled = {c.name for c in components_for(stack.spec)}
    expected = {
        c.release_name: [d for d in c.depends_on if d in enabled]
        for c in _of_stack(Stack.DYNAMO, "chart")
        if any(d in enabled for d in c.depends_on)
    }
    assert waits == expected
    assert waits["mp-ai-gateway-helm"] == ["ai-gateway-crds", "envoy-gateway"]
    assert waits["mp-grove-charts"] == ["kai-scheduler"]
    assert any("mp-gateway-helm waits for cert-manager" in x for x in p.pending)


def test_dependency_in_sync_releases_the_wait(make_stack: StackFactory) -> None:
    stack = make_stack()
    cm = _release(plan(stack), "mp-cert-manager")
    observed = Observed(
        releases={
            cm.name: ObservedRelease(
                name=cm.name,
                namespace=cm.namespace,
                revision=1,
                status="deployed",
                digest=cm.digest,
            )
        }
    )
    p = plan(stack, observed)
    assert _release(p, "mp-cert-manager").action is ReleaseAction.NONE
    assert _release(p, "mp-gateway-helm").action is ReleaseAction.INSTALL
    assert _release(p, "mp-trust-manager").action is ReleaseAction.INSTALL
    # ai-gateway still waits for envoy-gateway and its CRDs.
    assert _release(p, "mp-ai-gateway-helm").waiting_for == ["ai-gateway-crds", "envoy-gateway"]


@pytest.mark.parametrize(
    ("status", "action"),
    [
        # An upgrade goes in dependency order, as a first install does.
        ("deployed", ReleaseAction.WAIT),
        # A release to recover is recovered at once, whatever its dependencies do.
        ("failed", ReleaseAction.UPGRADE),
        ("pending-upgrade", ReleaseAction.ROLLBACK),
    ],
)
def test_an_upgrade_waits_for_its_dependencies_but_a_recovery_does_not(
    make_stack: StackFactory, status: str, action: ReleaseAction
) -> None:
    observed = Observed(
        releases={
            "mp-gateway-helm": ObservedRelease(
                name="mp-gateway-helm",
                namespace="envoy-gateway-system",
                revision=2,
                status=status,
                digest="old",
            )
        }
    )
    p = plan(make_stack(), observed)
    release = _release(p, "mp-gateway-helm")
    assert release.action is action
    assert release.waiting_for == (["cert-manager"] if action is ReleaseAction.WAIT else [])


def test_release_records(make_stack: StackFactory) -> None:
    eg = _release(plan(make_stack()), "mp-gateway-helm")
    assert (eg.chart, eg.repository, eg.version, eg.namespace) == (
        "gateway-helm",
        "oci://docker.io/envoyproxy",
        "v1.8.4",
        "envoy-gateway-system",
    )
    assert eg.wait is True
    assert eg.depends_on == ["cert-manager"]
    assert eg.values["config"]["envoyGateway"]["extensionApis"] == {"enableBackend": True}


def test_digest_changes_with_values(make_stack: StackFactory) -> None:
    a = _release(plan(make_stack()), "mp-dra-driver-nvidia-gpu")
    b = _release(plan(make_stack(nvidiaDriverRoot=GKE_ROOT)), "mp-dra-driver-nvidia-gpu")
    c = _release(plan(make_stack(versions={"nvidiaDraDriver": "0.5.0"})), a.name)
    assert len({a.digest, b.digest, c.digest}) == 3


# --- converged target: nothing to do ------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"stack": "Dynamo", "gateway": {"hostname": HOST, "clientCAs": CAS}},
        {"nvidiaDriverRoot": GKE_ROOT, "gateway": {"hostname": HOST}},
        {"components": "Provided", "stack": "Dynamo", "gateway": {"hostname": HOST}},
    ],
)
def test_observed_digests_mean_nothing_to_do(
    make_stack: StackFactory, serve_everything: ServeAll, fields: dict[str, Any]
) -> None:
    stack = make_stack(**fields)
    base = serve_everything()
    done = installed(plan(stack, base), base)
    p = plan(stack, done)
    assert all(r.action is ReleaseAction.NONE for r in p.releases)
    assert all(r.state is ReleaseState.IN_SYNC for r in p.releases)
    assert all(m.action is ObjectAction.NONE for m in p.manifests)
    for o in p.objects:
        withheld = o.hold is Hold.WITHHELD
        assert o.action is (ObjectAction.HOLD if withheld else ObjectAction.NONE), o.key
    assert p.pending == []
    assert all(c.state in ("Ready", "Met") for c in p.components)


def test_changed_object_is_applied_again(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    base = serve_everything()
    done = installed(plan(make_stack(), base), base)
    p = plan(make_stack(gateway={"className": "other"}), done)
    changed = {o.object["kind"] for o in p.objects if o.action is ObjectAction.APPLY}
    assert changed == {"GatewayClass", "Gateway"}


def test_manifests_digest_follows_the_url(make_stack: StackFactory) -> None:
    base = Observed()
    done = installed(plan(make_stack()), base)
    mirrored = Sources(manifests_base_url_for={"gaie-crds": "https://mirror.internal"})
    [m] = plan(make_stack(), done, mirrored).manifests
    assert m.action is ObjectAction.APPLY


# --- gateway report and notes -----------------------------------------------------------


def test_gateway_address_and_ca_from_observed(make_stack: StackFactory) -> None:
    observed = Observed(gateway_addresses=["34.1.2.3", "34.1.2.4"], bundle_ca_certificate=CA_PEM)
    p = plan(make_stack(gateway={"hostname": HOST}), observed)
    assert p.gateway.address == "34.1.2.3"
    assert p.gateway.ca_certificate == CA_PEM
    # No hostname: no PKI, so a stale ConfigMap is not reported as the CA.
    p = plan(make_stack(), observed)
    assert p.gateway.address == "34.1.2.3"
    assert p.gateway.ca_certificate is None
    assert plan(make_stack()).gateway.address is None


def test_notes_without_hostname(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    assert any("plain HTTP" in n and "no fleet traffic" in n for n in p.notes)


def test_notes_hostname_without_client_ca(make_stack: StackFactory) -> None:
    p = plan(make_stack(gateway={"hostname": HOST}))
    assert not any("plain HTTP" in n for n in p.notes)
    [note] = [n for n in p.notes if "HTTPS listener" in n]
    assert HOST in note and "any client" in note


def test_client_cas_without_hostname_are_held_back_on_purpose(make_stack: StackFactory) -> None:
    p = plan(make_stack(gateway={"clientCAs": CAS}))
    policy = _object(p, "ClientTrafficPolicy")
    assert policy.action is ObjectAction.HOLD and policy.hold is Hold.WITHHELD
    assert policy.hold_reason is not None and "hostname" in policy.hold_reason
    assert any("hostname" in n for n in p.notes if n.startswith("Held back"))
    assert all("ClientTrafficPolicy" not in x for x in p.pending)


def test_hostname_and_client_cas_add_https(make_stack: StackFactory) -> None:
    p = plan(make_stack(gateway={"hostname": HOST, "clientCAs": CAS}))
    listeners = _object(p, "Gateway").object["spec"]["listeners"]
    assert [x["name"] for x in listeners] == ["http", "https"]
    assert not any("HTTPS listener" in n for n in p.notes)
    assert _object(p, "ClientTrafficPolicy").hold is not Hold.WITHHELD


# --- requirements ----------------------------------------------------------------------------


def _result(p: Plan, title: str) -> Any:
    [r] = [r for r in p.requirements if r.requirement == title]
    return r


def test_crd_serving_another_version_is_unmet(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    observed = serve_everything()
    apis = {g: dict(rs) for g, rs in observed.apis.items()}
    apis["gateway.networking.k8s.io"]["gateways"] = ["v1beta1"]
    p = plan(make_stack(components="Provided"), observed.model_copy(update={"apis": apis}))
    r = _result(p, "CRD gateways.gateway.networking.k8s.io serving v1")
    assert r.status is RequirementStatus.UNMET
    assert "CRD gateways.gateway.networking.k8s.io serves v1beta1, not v1" in r.message
    assert [u.requirement for u in p.unmet] == [r.requirement]
    # Its siblings in the group stay met.
    sibling = _result(p, "CRD httproutes.gateway.networking.k8s.io serving v1")
    assert sibling.status is RequirementStatus.MET


def test_missing_crd_is_unmet_while_its_group_is_served(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    observed = serve_everything()
    apis = {g: dict(rs) for g, rs in observed.apis.items()}
    del apis["monitoring.coreos.com"]["servicemonitors"]
    p = plan(make_stack(components="Provided"), observed.model_copy(update={"apis": apis}))
    r = _result(p, "CRD servicemonitors.monitoring.coreos.com serving v1")
    assert r.status is RequirementStatus.UNMET
    assert "is not served" in r.message
    assert _result(p, "CRD podmonitors.monitoring.coreos.com serving v1").status is (
        RequirementStatus.MET
    )
    by_name = {c.name: c for c in p.components}
    assert by_name["kube-prometheus-stack"].state == "Unmet"


def test_device_class_requirement(make_stack: StackFactory, serve_everything: ServeAll) -> None:
    title = "DeviceClass gpu.nvidia.com (resource.k8s.io/v1)"
    observed = serve_everything()
    assert _result(plan(make_stack(), observed), title).status is RequirementStatus.MET
    no_class = observed.model_copy(update={"objects": {}})
    r = _result(plan(make_stack(), no_class), title)
    assert r.status is RequirementStatus.UNMET and "does not exist" in r.message
    apis = {g: dict(rs) for g, rs in observed.apis.items()}
    apis["resource.k8s.io"] = {"deviceclasses": ["v1beta1"]}
    old_dra = observed.model_copy(update={"apis": apis, "objects": {}})
    r = _result(plan(make_stack(), old_dra), title)
    assert r.status is RequirementStatus.UNMET
    assert "resource.k8s.io/v1 deviceclasses is not served" in r.message


def test_every_requirement_met_when_served(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    for stack in ("Standard", "Dynamo"):
        p = plan(make_stack(stack=stack), serve_everything())
        assert p.requirements_met, [r.message for r in p.unmet]
        assert all(r.message for r in p.requirements)


def test_unmet_messages_say_how_to_fix(make_stack: StackFactory) -> None:
    for r in plan(make_stack(stack="Dynamo")).requirements:
        assert r.status is RequirementStatus.UNMET
        _, _, fix = r.message.partition(": ")
        assert fix.startswith(("install", "apply")), r.message


def test_observed_apis_per_resource(make_stack: StackFactory, serve_everything: ServeAll) -> None:
    observed = serve_everything()
    apis = {g: dict(rs) for g, rs in observed.apis.items()}
    del apis["gateway.envoyproxy.io"]["clienttrafficpolicies"]
    p = plan(
        make_stack(gateway={"hostname": HOST, "clientCAs": CAS}),
        observed.model_copy(update={"apis": apis}),
    )
    policy = _object(p, "ClientTrafficPolicy")
    assert policy.action is ObjectAction.HOLD
    assert "clienttrafficpolicies.gateway.envoyproxy.io/v1alpha1" in (policy.hold_reason or "")
    assert _object(p, "EnvoyProxy").action is ObjectAction.APPLY


def test_https_conflict_is_one_note(make_stack: StackFactory) -> None:
    listeners = [{"name": "https", "port": 8443, "protocol": "TCP"}]
    p = plan(make_stack(gateway={"hostname": HOST, "clientCAs": CAS, "listeners": listeners}))
    held = [n for n in p.notes if n.startswith("Held back")]
    assert len(held) == 1 and "'https'" in held[0]
    policy = _object(p, "ClientTrafficPolicy")
    assert policy.action is ObjectAction.HOLD and policy.hold is Hold.WITHHELD
