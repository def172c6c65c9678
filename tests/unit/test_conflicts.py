"""plan.conflicts: what a release would clash with on the target, each case a row."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.actions.conflict_scan import metadata_of
from modelplane.plan.conflicts import (
    Conflict,
    ConflictKind,
    LiveWorkload,
    ObjectRef,
    Release,
    adoption,
    advertising,
    crd_conflicts,
    device_plugin_nodes,
    gateway_class,
    image_name,
    live_workload,
    owner_of,
    planned_refs,
    second_instances,
    taken,
)

RELEASE = Release("cert-manager", "mp-cert-manager", "cert-manager")
OURS = frozenset({("mp-cert-manager", "cert-manager"), ("mp-gateway-helm", "envoy-gateway-system")})
HELM = "meta.helm.sh/release-name"
HELM_NS = "meta.helm.sh/release-namespace"


def helm_meta(name: str, namespace: str) -> dict[str, Any]:
    return {"annotations": {HELM: name, HELM_NS: namespace}}


@pytest.mark.parametrize(
    ("meta", "owner"),
    [
        (helm_meta("cm", "security"), "Helm release security/cm"),
        ({"labels": {"olm.owner": "cert-manager.v1.14"}}, "OLM operator cert-manager.v1.14"),
        ({"labels": {"operators.coreos.com/cert-manager.ns": ""}}, "OLM (operators.coreos.com/"),
        (
            {"labels": {"addonmanager.kubernetes.io/mode": "Reconcile"}},
            "the add-on manager (addonmanager.kubernetes.io/mode=Reconcile)",
        ),
        ({"labels": {"app.kubernetes.io/managed-by": "argocd"}}, "managed-by=argocd"),
        (
            {
                "managedFields": [
                    {"manager": "kubectl-client-side-apply"},
                    {"manager": "kube-controller-manager", "subresource": "status"},
                ]
            },
            "written by kubectl-client-side-apply",
        ),
        ({}, "owner unknown"),
        # A hostile owner's name is shown, never acted on.
        (helm_meta("a\x1b[31mb", "x"), "Helm release x/a\\u001b[31mb"),
    ],
)
def test_owner_of(meta: dict[str, Any], owner: str) -> None:
    assert owner in owner_of(meta)


@pytest.mark.parametrize(
    ("docs", "refs"),
    [
        (
            [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "cm"}}],
            [ObjectRef("v1", "ServiceAccount", "cert-manager", "cm")],
        ),
        (
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": "cm", "namespace": "ignored"},
                }
            ],
            [ObjectRef("rbac.authorization.k8s.io/v1", "ClusterRole", "", "cm")],
        ),
        (
            [
                {
                    "apiVersion": "v1",
                    "kind": "Role",
                    "metadata": {"name": "le", "namespace": "kube-system"},
                }
            ],
            [ObjectRef("v1", "Role", "kube-system", "le")],
        ),
        # Not objects, or twice the same: skipped, or once.
        ([None, "text", {"kind": "X"}, {"apiVersion": "v1", "kind": "X", "metadata": {}}], []),
        (
            [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}] * 2,
            [ObjectRef("v1", "Service", "cert-manager", "s")],
        ),
    ],
)
def test_planned_refs(docs: list[Any], refs: list[ObjectRef]) -> None:
    assert planned_refs(docs, "cert-manager") == refs


SA = ObjectRef("v1", "ServiceAccount", "cert-manager", "cert-manager")


@pytest.mark.parametrize(
    ("live", "owner"),
    [
        # Absent: nothing to clash with.
        (None, None),
        # The release's own (an upgrade), or another release of the product's.
        (helm_meta("mp-cert-manager", "cert-manager"), None),
        (helm_meta("mp-gateway-helm", "envoy-gateway-system"), None),
        # Another Helm release of the same name in another namespace is not ours.
        (helm_meta("mp-cert-manager", "elsewhere"), "Helm release elsewhere/mp-cert-manager"),
        (helm_meta("cm", "security"), "Helm release security/cm"),
        ({"managedFields": [{"manager": "kubectl"}]}, "written by kubectl"),
        ({}, "owner unknown"),
    ],
)
def test_taken(live: dict[str, Any] | None, owner: str | None) -> None:
    found = taken(RELEASE, [SA], {SA: live} if live is not None else {}, OURS)
    if owner is None:
        assert found == []
        return
    assert found == [
        Conflict(
            component="cert-manager",
            kind=ConflictKind.TAKEN,
            object="ServiceAccount cert-manager/cert-manager",
            owner=owner,
            detail="exists, and release mp-cert-manager would take it over",
        )
    ]
    assert found[0].adoptable


def crd(
    versions: list[str],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "certificates.cert-manager.io",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "group": "cert-manager.io",
            "names": {"plural": "certificates"},
            "versions": [{"name": v, "served": True} for v in versions],
        },
    }


THE_RELEASES = {
    "app.kubernetes.io/managed-by": "modelplane",
    "modelplane.ai/chart-crds": "mp-cert-manager",
}


@pytest.mark.parametrize(
    ("live", "kind", "words"),
    [
        (None, None, ""),
        (crd(["v1"], THE_RELEASES), None, ""),
        (crd(["v1"]), ConflictKind.CRD_OWNER, "not labelled as the product's"),
        (crd(["v1"], {"app.kubernetes.io/managed-by": "Helm"}), ConflictKind.CRD_OWNER, "Helm"),
        # The release's own, newer than the chart's: a downgrade.
        (crd(["v1", "v2"], THE_RELEASES), ConflictKind.CRD_DOWNGRADE, "serves v2"),
        (
            crd(["v1"], THE_RELEASES, {"controller-gen.kubebuilder.io/version": "v0.19.0"}),
            ConflictKind.CRD_DOWNGRADE,
            "controller-gen",
        ),
    ],
)
def test_crd_conflicts(live: dict[str, Any] | None, kind: ConflictKind | None, words: str) -> None:
    desired = crd(["v1"], annotations={"controller-gen.kubebuilder.io/version": "v0.18.0"})
    found = crd_conflicts(
        RELEASE, [desired], {"certificates.cert-manager.io": live} if live else {}
    )
    assert [c.kind for c in found] == ([kind] if kind else [])
    if kind is not None:
        assert words in found[0].message
        assert found[0].object == "CustomResourceDefinition certificates.cert-manager.io"
        assert not found[0].adoptable


@pytest.mark.parametrize(
    ("image", "name"),
    [
        ("quay.io/jetstack/cert-manager-controller:v1.20.2", "cert-manager-controller"),
        ("mirror.example:5000/jetstack/cert-manager-webhook@sha256:abc", "cert-manager-webhook"),
        ("localhost:5000/gpu-operator", "gpu-operator"),
        ("busybox", "busybox"),
    ],
)
def test_image_name(image: str, name: str) -> None:
    assert image_name(image) == name


def workload(
    kind: str,
    image: str,
    command: list[str] | None = None,
    release: tuple[str, str] | None = None,
    name: str = "w",
) -> LiveWorkload:
    meta: dict[str, Any] = {"namespace": "other", "name": name}
    if release is not None:
        meta.update(helm_meta(*release))
    return live_workload(
        kind,
        {
            "metadata": meta,
            "spec": {
                "template": {"spec": {"containers": [{"image": image, "command": command or []}]}}
            },
        },
    )


NFD_IMAGE = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"


@pytest.mark.parametrize(
    ("component", "live", "what"),
    [
        (
            "cert-manager",
            workload("Deployment", "quay.io/jetstack/cert-manager-webhook:v1.19.0"),
            "another cert-manager",
        ),
        (
            "cert-manager",
            workload(
                "Deployment",
                "quay.io/jetstack/cert-manager-controller:v1.20.2",
                release=("mp-cert-manager", "cert-manager"),
            ),
            None,
        ),
        (
            "cert-manager",
            workload("Deployment", "quay.io/prometheus-operator/prometheus-operator"),
            None,
        ),
        (
            "kube-prometheus-stack",
            workload("Deployment", "quay.io/prometheus-operator/prometheus-operator:v0.80.0"),
            "another Prometheus Operator",
        ),
        (
            "node-feature-discovery",
            workload("Deployment", NFD_IMAGE, ["nfd-master"]),
            "another NFD master",
        ),
        # NFD's worker and gc run the same image: not a second master.
        ("node-feature-discovery", workload("DaemonSet", NFD_IMAGE, ["nfd-worker"]), None),
        ("node-feature-discovery", workload("Deployment", NFD_IMAGE, ["nfd-gc"]), None),
        (
            "nvidia-dra-driver-gpu",
            workload("DaemonSet", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
            "an NVIDIA device plugin",
        ),
        (
            "nvidia-dra-driver-gpu",
            workload("Deployment", "nvcr.io/nvidia/gpu-operator:v25.3.0"),
            "GPU Operator",
        ),
        # A component with no such rule never clashes so.
        (
            "leader-worker-set",
            workload("Deployment", "quay.io/jetstack/cert-manager-webhook"),
            None,
        ),
    ],
)
def test_second_instances(component: str, live: LiveWorkload, what: str | None) -> None:
    found = second_instances(component, [live], OURS)
    assert [what in c.message for c in found] == ([True] if what else [])
    if what:
        assert found[0].kind is ConflictKind.SECOND_INSTANCE and not found[0].adoptable


@pytest.mark.parametrize(
    ("planned", "second"),
    [
        # Another release's workload of the same name in the same place: the
        # very object the release writes, a taken conflict, not a second one.
        ([ObjectRef("apps/v1", "Deployment", "other", "w")], False),
        # Same name elsewhere, or another kind: a second instance.
        ([ObjectRef("apps/v1", "Deployment", "cert-manager", "w")], True),
        ([ObjectRef("apps/v1", "DaemonSet", "other", "w")], True),
        ([], True),
    ],
)
def test_a_workload_the_release_renders_is_no_second_instance(
    planned: list[ObjectRef], second: bool
) -> None:
    live = workload("Deployment", "quay.io/jetstack/cert-manager-webhook:v1.19.0")
    assert bool(second_instances("cert-manager", [live], OURS, planned)) is second


def test_live_workload_of_a_hostile_object_is_cut_not_refused() -> None:
    w = live_workload(
        "Deployment",
        {
            "metadata": "x",
            "spec": {"template": {"spec": {"containers": [{"image": 3}, "y"] * 100}}},
        },
    )
    assert w.images == frozenset() and w.name == "" and w.owner == "owner unknown"


@pytest.mark.parametrize(
    ("nodes", "advertised"),
    [
        ({"a": {"nvidia.com/gpu": "8"}, "b": {"nvidia.com/gpu": "0"}, "c": {}}, ["a"]),
        ({}, []),
    ],
)
def test_advertising(nodes: dict[str, dict[str, str]], advertised: list[str]) -> None:
    assert advertising(nodes) == advertised


def test_device_plugin_nodes_only_for_the_dra_driver_and_named() -> None:
    names = [f"gpu-{i}" for i in range(7)]
    assert device_plugin_nodes("cert-manager", names) == []
    assert device_plugin_nodes("nvidia-dra-driver-gpu", []) == []
    (found,) = device_plugin_nodes("nvidia-dra-driver-gpu", names)
    assert found.object == "Node gpu-0, gpu-1, gpu-2, gpu-3, gpu-4 and 2 more"
    assert "nvidia.com/gpu" in found.message


@pytest.mark.parametrize(
    ("live", "clash"),
    [
        (None, False),
        ({"spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}}, False),
        (
            {
                "metadata": helm_meta("istio", "istio-system"),
                "spec": {"controllerName": "istio.io/gateway-controller"},
            },
            True,
        ),
    ],
)
def test_gateway_class(live: dict[str, Any] | None, clash: bool) -> None:
    found = gateway_class(
        "configuration", "modelplane", "gateway.envoyproxy.io/gatewayclass-controller", live
    )
    assert bool(found) is clash
    if clash:
        assert "istio.io/gateway-controller" in found[0].message
        assert "Helm release istio-system/istio" in found[0].message


def conflict(component: str, kind: ConflictKind, name: str = "x") -> Conflict:
    return Conflict(
        component=component, kind=kind, object=f"Thing {name}", owner="Helm release a/b"
    )


TAKEN, CRD_OWNER, SECOND = ConflictKind.TAKEN, ConflictKind.CRD_OWNER, ConflictKind.SECOND_INSTANCE


@pytest.mark.parametrize(
    ("conflicts", "adopt", "adopted", "held"),
    [
        # Nothing adopted: every conflict holds its component back.
        ([conflict("cert-manager", TAKEN)], set(), [], ["cert-manager"]),
        # An object of an adopted component is taken over.
        ([conflict("cert-manager", TAKEN)], {"cert-manager"}, ["cert-manager"], []),
        # Another component's object is not.
        (
            [conflict("cert-manager", TAKEN), conflict("trust-manager", TAKEN)],
            {"cert-manager"},
            ["cert-manager"],
            ["trust-manager"],
        ),
        # A CRD of another owner and a second instance are never taken over.
        (
            [
                conflict("kube-prometheus-stack", TAKEN, "a"),
                conflict("kube-prometheus-stack", CRD_OWNER, "b"),
                conflict("kube-prometheus-stack", SECOND, "c"),
                conflict("kube-prometheus-stack", ConflictKind.CRD_DOWNGRADE, "d"),
            ],
            {"kube-prometheus-stack"},
            ["kube-prometheus-stack"],
            ["kube-prometheus-stack"] * 3,
        ),
    ],
)
def test_adoption(
    conflicts: list[Conflict], adopt: set[str], adopted: list[str], held: list[str]
) -> None:
    taken_over, standing = adoption(conflicts, adopt)
    assert [c.component for c in taken_over] == adopted
    assert [c.component for c in standing] == held
    assert all(c.kind is TAKEN for c in taken_over)


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        (CRD_OWNER, "does not take over a CRD of another owner"),
        (ConflictKind.CRD_DOWNGRADE, "does not take a CRD back to an older version"),
        (SECOND, "would leave two"),
    ],
)
def test_what_adopting_leaves_says_why(kind: ConflictKind, why: str) -> None:
    c = conflict("cert-manager", kind).model_copy(update={"detail": "exists"})
    # Of a component not adopted: said as found.
    assert adoption([c], set())[1] == [c]
    (held,) = adoption([c], {"cert-manager"})[1]
    assert held.message.startswith("Thing x (Helm release a/b): exists (spec.adopt ")
    assert why in held.message


def test_what_an_adoption_takes_over_is_named_with_its_owner() -> None:
    (c,) = adoption([conflict("cert-manager", TAKEN)], {"cert-manager"})[0]
    assert c.adopted == "Thing x from Helm release a/b"


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ({"kind": "ConfigMap", "metadata": {"name": "values", "namespace": "ns"}}, True),
        ({"kind": "ConfigMap", "metadata": {"name": "other", "namespace": "ns"}}, False),
        ({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}, False),
        ({"kind": "ConfigMap"}, False),
        ({"metadata": "not a mapping"}, False),
        (["not", "an", "object"], False),
        ("<html></html>", False),
    ],
)
def test_only_an_answer_that_is_the_named_object_shows_it_exists(answer: Any, found: bool) -> None:
    ref = ObjectRef("v1", "ConfigMap", "ns", "values")
    assert (metadata_of(answer, ref) is not None) is found
