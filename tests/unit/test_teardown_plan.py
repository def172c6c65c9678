"""``teardown_steps(plan, observed)``: what deleting a ServingStack does, in order."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.actions.apply import namespace_body
from modelplane.catalog.types import HelmHook
from modelplane.plan import Observed, Plan, plan
from modelplane.plan.teardown import (
    DeleteHookObjects,
    DeleteObjects,
    FoundObject,
    ObjectRef,
    TeardownStep,
    UninstallRelease,
    hooks_to_find,
    is_release_hook,
    left_by_helm,
    teardown_steps,
)
from modelplane.wire import object_key

from .conftest import CA_PEM, StackFactory, installed

HOST = "west.example.com"
CAS = [{"name": "fleet", "certificate": CA_PEM}]
# All of the fetched file's CRDs: the one the requirements check, and the
# two it brings beside it (applied with the same digest, so ours alike).
GAIE_CRDS = [
    "CustomResourceDefinition inferencepools.inference.networking.k8s.io",
    "CustomResourceDefinition inferencepools.inference.networking.x-k8s.io",
    "CustomResourceDefinition inferenceobjectives.inference.networking.x-k8s.io",
]


def described(steps: list[TeardownStep]) -> list[tuple[Any, ...]]:
    """Steps as a table a person reads: (verb, what, waits)."""
    out: list[tuple[Any, ...]] = []
    for step in steps:
        if isinstance(step, UninstallRelease):
            out.append(("uninstall", f"{step.namespace}/{step.release}"))
        elif isinstance(step, DeleteHookObjects):
            out.append(("delete hooks", step.release, [str(ref) for ref in step.objects]))
        else:
            out.append(("delete", [str(ref) for ref in step.objects], step.wait))
    return out


def test_managed_goes_gateway_first_then_crds_releases_and_the_namespace_last(
    make_stack: StackFactory,
) -> None:
    stack = make_stack(gateway={"hostname": HOST, "clientCAs": CAS})
    p = plan(stack)
    steps = described(teardown_steps(p, installed(p)))
    uninstalls = [s for s in steps if s[0] == "uninstall"]
    assert steps == [
        # The gateway controller must still run to clear the Gateway's finalizers.
        (
            "delete",
            ["Gateway inference-gateway", "ClientTrafficPolicy cluster-gateway-client-auth"],
            True,
        ),
        ("delete", ["GatewayClass envoy"], True),
        (
            "delete",
            [
                "EnvoyProxy inference-gateway",
                "Issuer modelplane-selfsigned",
                "Certificate modelplane-cluster-ca",
                "Issuer modelplane-cluster-ca",
                "Certificate cluster-gateway-serving",
                "Bundle modelplane-cluster-ca",
                "ConfigMap modelplane-fleet-gateway-cas",
            ],
            True,
        ),
        ("delete", GAIE_CRDS, False),
        *uninstalls,
        # trust-manager lives in it: after the releases, and not waited for.
        ("delete", ["Namespace modelplane-system"], False),
    ]
    # Every release, in its namespace, in reverse plan order: each before what
    # it depends on, since the plan installs dependencies first.
    assert uninstalls == [("uninstall", f"{r.namespace}/{r.name}") for r in reversed(p.releases)]
    order = [r.name for r in reversed(p.releases)]
    names = {r.component: r.name for r in p.releases}
    for r in p.releases:
        for dep in r.depends_on:
            assert order.index(r.name) < order.index(names[dep]), (r.name, dep)
    assert (order[0], order[-1]) == ("mp-lws", "mp-cert-manager")


def test_kai_queue_goes_before_its_parent(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo"))
    steps = described(teardown_steps(p, installed(p)))
    [leaf] = [i for i, s in enumerate(steps) if "Queue modelplane" in s[1]]
    [root] = [i for i, s in enumerate(steps) if "Queue modelplane-root" in s[1]]
    assert leaf < root
    assert steps[leaf][2] is True  # the parent waits until the child is gone


def test_delete_steps_carry_what_the_api_needs_to_find_the_object(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack(stack="Dynamo"))
    first = teardown_steps(p, installed(p))[0]
    assert isinstance(first, DeleteObjects)
    bodies = {ref.kind: ref.body() for ref in first.objects}
    assert bodies["Gateway"] == {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "inference-gateway", "namespace": "modelplane-system"},
    }
    # Queues are cluster-scoped: no namespace to look them up in. Both
    # leaves (the engines' and the scheduler probe's) go before their parent.
    queues = [ref.body() for ref in first.objects if ref.kind == "Queue"]
    assert queues == [
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}}
        for name in ("modelplane", "modelplane-probe")
    ]


def test_every_release_goes_after_the_releases_that_depend_on_it(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack(stack="Dynamo"))
    # Listed the wrong way round, a dependency first in reverse would go too early.
    shuffled = p.model_copy(update={"releases": list(reversed(p.releases))})
    for candidate in (p, shuffled):
        order = [
            s.release
            for s in teardown_steps(candidate, installed(p))
            if isinstance(s, UninstallRelease)
        ]
        assert sorted(order) == sorted(r.name for r in p.releases)
        for r in p.releases:
            for dependency in r.depends_on:
                [dep] = [x.name for x in p.releases if x.component == dependency]
                assert order.index(r.name) < order.index(dep), (r.name, dep)


@pytest.mark.parametrize("stack", ["Standard", "Dynamo"])
def test_provided_never_uninstalls_even_what_managed_installed(
    make_stack: StackFactory, stack: str
) -> None:
    # Installed while Managed; the spec switched to Provided since.
    managed = plan(make_stack(stack=stack))
    p = plan(make_stack(stack=stack, components="Provided"))
    steps = teardown_steps(p, installed(managed))
    assert not [s for s in steps if isinstance(s, UninstallRelease)]
    deleted = [str(ref) for s in steps if isinstance(s, DeleteObjects) for ref in s.objects]
    # The substrate's CRDs stay with the substrate; the configuration still goes.
    assert not set(GAIE_CRDS) & set(deleted)
    assert "Gateway inference-gateway" in deleted
    assert "Namespace modelplane-system" in deleted


def test_provided_dynamo_deletes_the_modelexpress_crds_it_applied(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack(stack="Dynamo", components="Provided"))
    crd_steps = [
        s
        for s in teardown_steps(p, installed(p))
        if isinstance(s, DeleteObjects) and s.objects[0].kind == "CustomResourceDefinition"
    ]
    assert described(crd_steps) == [
        (
            "delete",
            [
                "CustomResourceDefinition modelmetadatas.modelexpress.nvidia.com",
                "CustomResourceDefinition modelcacheentries.modelexpress.nvidia.com",
            ],
            False,
        )
    ]


def test_only_what_carries_our_marks_is_deleted(make_stack: StackFactory) -> None:
    p = plan(make_stack())
    observed = installed(p)
    # The cluster owner brought the GAIE CRDs (no digest of ours); the
    # Gateway is gone already; cert-manager was installed by someone else.
    applied = {
        key: value
        for key, value in observed.applied.items()
        if "CustomResourceDefinition" not in key and "/Gateway/" not in key
    }
    releases = {k: v for k, v in observed.releases.items() if k != "mp-cert-manager"}
    steps = described(
        teardown_steps(p, observed.model_copy(update={"applied": applied, "releases": releases}))
    )
    assert steps[0] == ("delete", ["GatewayClass envoy"], True)
    assert not [s for s in steps if s[0] == "delete" and "CustomResourceDefinition" in s[1][0]]
    assert ("uninstall", "cert-manager/mp-cert-manager") not in steps
    assert steps[-1] == ("delete", ["Namespace modelplane-system"], False)


def test_nothing_of_ours_on_the_target_means_nothing_to_do(make_stack: StackFactory) -> None:
    p = plan(make_stack(stack="Dynamo", gateway={"hostname": HOST, "clientCAs": CAS}))
    assert teardown_steps(p, Observed()) == []


def test_the_release_namespaces_the_product_made_go_last_the_owners_stay(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack())
    observed = installed(p)
    made = {r.namespace for r in p.releases} - {"modelplane-system"}
    # Namespaces the product created for its releases carry its digest; the
    # cluster owner's "monitoring" does not.
    ours = {
        object_key(namespace_body(name)): "digest" for name in sorted(made) if name != "monitoring"
    }
    steps = described(
        teardown_steps(p, observed.model_copy(update={"applied": observed.applied | ours}))
    )
    last = steps[-1]
    assert last[0] == "delete" and last[2] is False
    assert steps.index(last) > max(i for i, s in enumerate(steps) if s[0] == "uninstall")
    assert set(last[1]) == {"Namespace modelplane-system"} | {
        f"Namespace {name}" for name in made - {"monitoring"}
    }
    # In Provided mode no release is uninstalled, so none of their namespaces goes.
    provided = plan(make_stack(components="Provided"))
    steps = described(
        teardown_steps(provided, observed.model_copy(update={"applied": observed.applied | ours}))
    )
    assert steps[-1] == ("delete", ["Namespace modelplane-system"], False)


@pytest.mark.parametrize(
    ("ours", "deleted"),
    [
        # Each of the file's CRDs goes only if it carries our digest: one the
        # cluster owner brought before (say the x-k8s.io ones) stays.
        (GAIE_CRDS, GAIE_CRDS),
        (GAIE_CRDS[:1], GAIE_CRDS[:1]),
        (GAIE_CRDS[1:], GAIE_CRDS[1:]),
        ([], []),
    ],
)
def test_the_fetched_files_crds_go_when_they_carry_our_digest(
    make_stack: StackFactory, ours: list[str], deleted: list[str]
) -> None:
    p = plan(make_stack())
    observed = installed(p)
    names = {crd.split()[-1] for crd in GAIE_CRDS} - {crd.split()[-1] for crd in ours}
    applied = {k: v for k, v in observed.applied.items() if k.rpartition("/")[2] not in names}
    steps = described(teardown_steps(p, observed.model_copy(update={"applied": applied})))
    crds = [s[1] for s in steps if s[0] == "delete" and "CustomResourceDefinition" in s[1][0]]
    assert crds == ([deleted] if deleted else [])


# -- what the releases' hooks left -------------------------------------------------

NO_POLICY: tuple[str, ...] = ()
UNLESS_FAILED = ("before-hook-creation", "hook-succeeded")


@pytest.mark.parametrize(
    ("events", "policies", "left"),
    [
        # gateway-helm's certgen and topology injector: no policy means
        # before-hook-creation, which deletes it only before making it again.
        (("pre-install", "pre-upgrade"), NO_POLICY, True),
        (("pre-install",), ("before-hook-creation",), True),
        # Deleted once it succeeds, so a failed hook (and install) leaves it.
        (("post-install",), UNLESS_FAILED, True),
        (("post-delete",), ("hook-failed",), True),
        # Gone whichever way it ends.
        (("post-delete",), ("hook-succeeded", "hook-failed"), False),
        (("pre-install",), ("before-hook-creation", "hook-failed", "hook-succeeded"), False),
        # The product never runs helm test: such a hook is never made.
        (("test",), NO_POLICY, False),
        (("test-success",), NO_POLICY, False),
        # Made on a rollback, which the product runs.
        (("pre-rollback", "test"), NO_POLICY, True),
    ],
)
def test_which_hooks_helm_may_leave(
    events: tuple[str, ...], policies: tuple[str, ...], left: bool
) -> None:
    hook = HelmHook("v1", "ServiceAccount", "x", True, events, policies)
    assert left_by_helm(hook) is left


MARKS = {
    "labels": {
        "app.kubernetes.io/instance": "mp-gateway-helm",
        "app.kubernetes.io/managed-by": "Helm",
    },
    "annotations": {"helm.sh/hook": "pre-install, pre-upgrade"},
}
MWC = ObjectRef(
    api_version="admissionregistration.k8s.io/v1",
    kind="MutatingWebhookConfiguration",
    name="envoy-gateway-topology-injector.envoy-gateway-system",
)
CERTGEN_ROLE = ObjectRef(
    api_version="rbac.authorization.k8s.io/v1",
    kind="Role",
    name="mp-gateway-helm-certgen",
    namespace="envoy-gateway-system",
)


def _with(metadata: dict[str, Any], part: str, **changes: Any) -> dict[str, Any]:
    return {**metadata, part: {**metadata[part], **changes}}


@pytest.mark.parametrize(
    ("metadata", "ours"),
    [
        (MARKS, True),
        # More labels and annotations than the marks change nothing.
        (_with(_with(MARKS, "labels", app="x"), "annotations", note="y"), True),
        # Another release's, or not Helm's: a cluster owner's own object of that name.
        (_with(MARKS, "labels", **{"app.kubernetes.io/instance": "gateway-helm"}), False),
        (_with(MARKS, "labels", **{"app.kubernetes.io/managed-by": "kubectl"}), False),
        ({"labels": MARKS["labels"]}, False),  # not made as a hook
        ({"annotations": MARKS["annotations"]}, False),
        ({}, False),
        # A target's garbage is no evidence of anything.
        ({"labels": ["app.kubernetes.io/instance"], "annotations": "helm.sh/hook"}, False),
        (_with(MARKS, "labels", **{"app.kubernetes.io/instance": ["mp-gateway-helm"]}), False),
    ],
)
def test_a_live_object_is_the_releases_hook_only_by_its_marks(
    metadata: dict[str, Any], ours: bool
) -> None:
    assert is_release_hook(FoundObject.of(MWC, metadata), "mp-gateway-helm") is ours


def _namespaces_ours(p: Plan, observed: Observed) -> Observed:
    """The release namespaces made by the product, so the last step deletes them."""
    made = {object_key(namespace_body(r.namespace)): "digest" for r in p.releases}
    return observed.model_copy(update={"applied": observed.applied | made})


def test_only_hooks_outside_the_namespaces_teardown_deletes_are_looked_for(
    make_stack: StackFactory,
) -> None:
    p = plan(make_stack())
    cluster_scoped = [
        ("mp-kube-prometheus-stack", "ClusterRole prometheus-admission"),
        ("mp-kube-prometheus-stack", "ClusterRoleBinding prometheus-admission"),
        ("mp-node-feature-discovery", "ClusterRole mp-node-feature-discovery-prune"),
        ("mp-node-feature-discovery", "ClusterRoleBinding mp-node-feature-discovery-prune"),
        ("mp-gateway-helm", "ClusterRole mp-gateway-helm-certgen:envoy-gateway-system"),
        ("mp-gateway-helm", "ClusterRoleBinding mp-gateway-helm-certgen:envoy-gateway-system"),
        ("mp-gateway-helm", f"MutatingWebhookConfiguration {MWC.name}"),
    ]
    wanted = hooks_to_find(p, _namespaces_ours(p, installed(p)))
    assert sorted((h.release, str(h.ref)) for h in wanted) == sorted(cluster_scoped)
    assert all(h.ref.namespace is None for h in wanted)
    # In a namespace of the cluster owner's, which stays, the namespaced ones too.
    wanted = hooks_to_find(p, installed(p))
    assert CERTGEN_ROLE in {h.ref for h in wanted}
    assert len(wanted) > len(cluster_scoped)
    # Provided: nothing was installed by the product, nothing of a hook is its to delete.
    assert hooks_to_find(plan(make_stack(components="Provided")), installed(p)) == []


ALL_RELEASES = "all"


def _observed_for(p: Plan, releases: str, namespaces_ours: bool) -> Observed:
    observed = installed(p)
    if releases != ALL_RELEASES:
        observed = observed.model_copy(
            update={"releases": {k: v for k, v in observed.releases.items() if k != releases}}
        )
    return _namespaces_ours(p, observed) if namespaces_ours else observed


MWC_LEFT = ("delete hooks", "mp-gateway-helm", [f"MutatingWebhookConfiguration {MWC.name}"])
FORGED = ObjectRef(
    api_version="rbac.authorization.k8s.io/v1", kind="ClusterRoleBinding", name="cluster-admin"
)


@pytest.mark.parametrize(
    ("components", "releases", "namespaces_ours", "found", "hook_steps"),
    [
        # Left by the release, with its marks: deleted right after its uninstall.
        ("Managed", ALL_RELEASES, True, [(MWC, MARKS)], [MWC_LEFT]),
        # The release went on an earlier pass: what it left still goes.
        ("Managed", "mp-gateway-helm", True, [(MWC, MARKS)], [MWC_LEFT]),
        # Someone else's object of that name stays.
        ("Managed", ALL_RELEASES, True, [(MWC, {})], []),
        (
            "Managed",
            ALL_RELEASES,
            True,
            [(MWC, _with(MARKS, "labels", **{"app.kubernetes.io/instance": "mp-lws"}))],
            [],
        ),
        # Marks on an object the catalog names no hook of (a forged
        # stored release could name any): never deleted.
        ("Managed", ALL_RELEASES, True, [(FORGED, MARKS)], []),
        # A namespaced one goes with its namespace when the product made
        # that, and on its own when the namespace is the owner's and stays.
        ("Managed", ALL_RELEASES, True, [(CERTGEN_ROLE, MARKS)], []),
        (
            "Managed",
            ALL_RELEASES,
            False,
            [(MWC, MARKS), (CERTGEN_ROLE, MARKS)],
            [
                (
                    "delete hooks",
                    "mp-gateway-helm",
                    [f"MutatingWebhookConfiguration {MWC.name}", "Role mp-gateway-helm-certgen"],
                )
            ],
        ),
        # Provided: the substrate is not the product's to clean.
        ("Provided", ALL_RELEASES, True, [(MWC, MARKS)], []),
    ],
)
def test_what_the_hooks_left_goes_after_its_release(
    make_stack: StackFactory,
    components: str,
    releases: str,
    namespaces_ours: bool,
    found: list[tuple[ObjectRef, dict[str, Any]]],
    hook_steps: list[tuple[Any, ...]],
) -> None:
    managed = plan(make_stack())
    p = plan(make_stack(components=components))
    observed = _observed_for(managed, releases, namespaces_ours)
    steps = described(
        teardown_steps(p, observed, [FoundObject.of(ref, meta) for ref, meta in found])
    )
    assert [s for s in steps if s[0] == "delete hooks"] == hook_steps
    for step in hook_steps:
        at = steps.index(step)
        # After its own release's uninstall (when there is one to do), and
        # before the namespaces.
        uninstall = ("uninstall", "envoy-gateway-system/mp-gateway-helm")
        if uninstall in steps:
            assert steps[at - 1] == uninstall
        assert at < len(steps) - 1 and "Namespace modelplane-system" in steps[-1][1]
