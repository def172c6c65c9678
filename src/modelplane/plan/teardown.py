"""``teardown_steps(plan, observed) -> list[TeardownStep]``: deleting a ServingStack, in order.

Pure, like ``plan``: the operator carries the steps out one at a time and
decides only how long it is willing to wait for a step's objects to go.
Each pass of teardown observes again and asks again, so what is already
gone drops out of the steps and a crash costs one pass.

The order (design "Teardown is the plan in reverse"; upstream-facts §0.2
"Teardown chain"; the spec asks cluster owners to keep their controllers
running while a stack deletes, so they can clear finalizers):

1. configuration objects wave by wave (``TeardownWave``), each wave gone
   before the next: the Gateway and what targets it while the gateway
   controller still runs, then the GatewayClass, then the rest;
2. the CRDs of fetched manifests that carry our digest, every one the file
   brings: the GAIE manifest's two ``inference.networking.x-k8s.io`` CRDs
   as well as the InferencePool v1 its requirement checks. The product
   fetched and applied all of them alike; a CRD the cluster owner brought
   (no digest of ours) stays. The charts' ``crds/`` CRDs are not among
   them: Helm leaves those, and so does the product (docs/operating.md);
3. Helm releases, dependents before what they depend on, in Managed mode
   only (a DRA driver's once no pod holds a claim it allocated, or once
   ``spec.claimWaitTimeout`` has passed: ``plan.claims``): a Provided
   substrate is never uninstalled, even one we installed before a switch
   from Managed. Each is followed by what its hooks left
   (``DeleteHookObjects``): Helm keeps hooks out of the release, so
   ``helm uninstall`` deletes none, and only a hook's delete policy ever
   removes one (gateway-helm's topology injector webhook configuration and
   its certgen RBAC have none);
4. the last wave (the namespace), not waited for: the cluster empties it in
   its own time, and nothing of ours waits on that. With it go the release
   namespaces the product created for its releases (they carry its digest;
   one the cluster owner made does not, and stays), in Managed mode only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from modelplane.catalog.components import BY_NAME
from modelplane.catalog.configuration import TeardownWave
from modelplane.catalog.types import HelmHook
from modelplane.pins import ComponentsMode
from modelplane.plan.applied import crd_stub
from modelplane.plan.frozen import Frozen
from modelplane.plan.model import Plan, PlannedManifests, PlannedRelease
from modelplane.plan.observed import Observed
from modelplane.wire import object_key


class ObjectRef(Frozen):
    """Enough of an object to find it on the target."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> ObjectRef:
        meta = body["metadata"]
        return cls(
            api_version=body["apiVersion"],
            kind=body["kind"],
            name=meta["name"],
            namespace=meta.get("namespace") or None,
        )

    def body(self) -> dict[str, Any]:
        meta = {"name": self.name} | ({"namespace": self.namespace} if self.namespace else {})
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta}

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class DeleteObjects(Frozen):
    """Delete the objects; with ``wait``, the next step waits until they are gone."""

    step: Literal["delete"] = "delete"
    objects: list[ObjectRef]
    wait: bool


class UninstallRelease(Frozen):
    """Uninstall one Helm release.

    ``dra_driver``: the DRA driver the release runs, whose claims the pods
    holding them must let go of first (``plan.claims``); None for the others.
    """

    step: Literal["uninstall"] = "uninstall"
    release: str
    namespace: str
    dra_driver: str | None = None


class DeleteHookObjects(Frozen):
    """Delete what a release's hooks left; not waited for, as nothing after needs them gone."""

    step: Literal["delete-hooks"] = "delete-hooks"
    release: str
    objects: list[ObjectRef]


TeardownStep = Annotated[
    DeleteObjects | UninstallRelease | DeleteHookObjects, Field(discriminator="step")
]

# The hook events the product has Helm run: install, upgrade, rollback and
# uninstall. It never runs ``helm test``, so a test hook is never made.
HOOK_EVENTS_RUN = frozenset(
    {
        "pre-install",
        "post-install",
        "pre-upgrade",
        "post-upgrade",
        "pre-rollback",
        "post-rollback",
        "pre-delete",
        "post-delete",
    }
)
# What marks a live object as a hook Helm made for a release: every hook of
# the catalog's charts carries them as rendered (tests/unit/test_teardown_hooks_real.py).
HOOK_ANNOTATION = "helm.sh/hook"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
HELM = "Helm"


class HookRef(Frozen):
    """A hook object teardown looks for, and the release whose hook it would be."""

    release: str
    ref: ObjectRef


class FoundObject(Frozen):
    """A live object looked for by name, reduced to the marks teardown judges it by."""

    ref: ObjectRef
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, ref: ObjectRef, metadata: Mapping[str, Any]) -> FoundObject:
        """Only the marks, and only as strings: the rest of a target's object is not read."""
        return cls(
            ref=ref,
            labels=_strings(metadata.get("labels"), (INSTANCE_LABEL, MANAGED_BY_LABEL)),
            annotations=_strings(metadata.get("annotations"), (HOOK_ANNOTATION,)),
        )


def _strings(found: Any, keys: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(found, Mapping):
        return {}
    return {k: found[k] for k in keys if isinstance(found.get(k), str)}


def left_by_helm(hook: HelmHook) -> bool:
    """Whether Helm may leave the hook's object on the target after the release is gone.

    Helm deletes a hook object only as its delete policy says: once the hook
    succeeded (``hook-succeeded``), once it failed (``hook-failed``), or
    just before it makes it again (``before-hook-creation``, which is also
    what no policy means); ``helm uninstall`` deletes none. So a hook that
    runs at all is left unless both of its outcomes remove it: a failed
    install leaves even a ``hook-succeeded`` one.
    """
    if not HOOK_EVENTS_RUN.intersection(hook.events):
        return False
    return not {"hook-succeeded", "hook-failed"} <= set(hook.delete_policies)


def hooks_to_find(plan: Plan, observed: Observed) -> list[HookRef]:
    """The hook objects teardown looks for on the target: Managed mode only.

    Where the names come from, and why not from Helm's stored release: the
    release Secret lists its hooks, but a tenant who can write Secrets in the
    release's namespace can forge one that names any cluster-scoped object,
    and the operator deletes with the target's cluster-admin. So only the
    hooks the catalog lists for the chart (``ChartSource.hooks``, checked
    against the pinned version's real render) are looked for, and one is
    deleted only when the live object carries the release's marks
    (``is_release_hook``): the catalog's names are fixed, and a cluster
    owner's own object of that name (their own kube-prometheus-stack's
    ``prometheus-admission`` ClusterRole, say) is left. The stored release
    is gone after the uninstall anyway, while its hooks stay.

    A namespaced hook in a namespace the last step deletes is not looked
    for: the namespace takes it along.
    """
    if plan.mode != ComponentsMode.MANAGED:
        return []
    deleted = {ref.name for ref in _last_objects(plan, observed) if ref.kind == "Namespace"}
    out: list[HookRef] = []
    for release in plan.releases:
        for hook in _hooks_of(release):
            namespace = release.namespace if hook.namespaced else None
            if namespace in deleted or not left_by_helm(hook):
                continue
            ref = ObjectRef(
                api_version=hook.api_version, kind=hook.kind, name=hook.name, namespace=namespace
            )
            out.append(HookRef(release=release.name, ref=ref))
    return out


def dra_driver_of(release: PlannedRelease) -> str | None:
    """The DRA driver the release's component runs, if it is one (``Component.dra_driver``)."""
    component = BY_NAME.get(release.component)
    return component.dra_driver if component is not None else None


def _hooks_of(release: PlannedRelease) -> tuple[HelmHook, ...]:
    component = BY_NAME.get(release.component)
    chart = component.chart if component is not None else None
    return chart.hooks if chart is not None else ()


def is_release_hook(found: FoundObject, release: str) -> bool:
    """Whether the live object is a hook Helm made for ``release``, by the marks it carries.

    Helm's render of each catalog chart labels every hook with the release
    (``app.kubernetes.io/instance``) and Helm (``app.kubernetes.io/managed-by``),
    and Helm keeps the ``helm.sh/hook`` annotation on what it creates.
    Only the cluster owner (or Helm, acting for a release) can write a
    cluster-scoped object, so these marks on one are the release's own. A
    tenant of a namespace that stays could put them on a namespaced object
    of a catalog hook's name, and lose only that object of their own.
    """
    return (
        found.labels.get(INSTANCE_LABEL) == release
        and found.labels.get(MANAGED_BY_LABEL) == HELM
        and HOOK_ANNOTATION in found.annotations
    )


def teardown_steps(
    plan: Plan, observed: Observed, found: Sequence[FoundObject] = ()
) -> list[TeardownStep]:
    """What deleting the stack still has to do on the target, in order.

    Only what is there and ours: objects that carry our digest, releases
    that carry our label, hook objects (``found``: what the target holds
    of ``hooks_to_find``) that carry their release's marks. A step with
    nothing left to do is left out.
    """
    steps: list[TeardownStep] = []
    applied = [o for o in plan.objects if o.key in observed.applied]
    for wave in sorted({o.teardown_wave for o in applied} - {TeardownWave.LAST}):
        steps.append(
            DeleteObjects(
                objects=[ObjectRef.of(o.object) for o in applied if o.teardown_wave is wave],
                wait=True,
            )
        )

    crds = [
        ObjectRef.of(crd_stub(crd))
        for m in plan.manifests
        if m.teardown
        for crd in _manifest_crds(m)
        if object_key(crd_stub(crd)) in observed.applied
    ]
    if crds:
        # Not waited for: the API server removes a CRD's objects with it, and
        # no later step needs them gone.
        steps.append(DeleteObjects(objects=crds, wait=False))

    if plan.mode == ComponentsMode.MANAGED:
        left = _hooks_left(plan, observed, found)
        for r in _dependents_first(plan.releases):
            if r.name in observed.releases:
                steps.append(
                    UninstallRelease(
                        release=r.name, namespace=r.namespace, dra_driver=dra_driver_of(r)
                    )
                )
            # After the uninstall, so nothing of the release runs any more.
            # Looked for as the pass began: what the uninstall itself makes
            # and leaves (a post-delete hook that failed) only a later pass sees.
            if left.get(r.name):
                steps.append(DeleteHookObjects(release=r.name, objects=left[r.name]))

    last = _last_objects(plan, observed)
    if last:
        steps.append(DeleteObjects(objects=last, wait=False))
    return steps


def _manifest_crds(manifests: PlannedManifests) -> list[str]:
    """Every CRD the fetched file brings: those the requirements check, and the others."""
    component = BY_NAME.get(manifests.component)
    source = component.manifests if component is not None else None
    others = source.other_crds if source is not None else ()
    return [*manifests.crds, *(c for c in others if c not in manifests.crds)]


def _hooks_left(
    plan: Plan, observed: Observed, found: Sequence[FoundObject]
) -> dict[str, list[ObjectRef]]:
    """Release name -> the hook objects it left that are on the target and carry its marks."""
    release_of = {h.ref: h.release for h in hooks_to_find(plan, observed)}
    out: dict[str, list[ObjectRef]] = {}
    for f in found:
        release = release_of.get(f.ref)
        if release is not None and is_release_hook(f, release):
            out.setdefault(release, []).append(f.ref)
    return out


def _last_objects(plan: Plan, observed: Observed) -> list[ObjectRef]:
    """The last wave, and in Managed mode the release namespaces the product made."""
    last = [
        ObjectRef.of(o.object)
        for o in plan.objects
        if o.key in observed.applied and o.teardown_wave is TeardownWave.LAST
    ]
    if plan.mode == ComponentsMode.MANAGED:
        last += [
            ref
            for ref in _release_namespaces(plan.releases)
            if object_key(ref.body()) in observed.applied and ref not in last
        ]
    return last


def _release_namespaces(releases: list[PlannedRelease]) -> list[ObjectRef]:
    names = dict.fromkeys(r.namespace for r in releases)
    return [ObjectRef(api_version="v1", kind="Namespace", name=name) for name in names]


def _dependents_first(releases: list[PlannedRelease]) -> list[PlannedRelease]:
    """Each release after every release that depends on it, else in reverse plan order.

    Install order mirrored: what a release needed to come up stays until it
    has gone.
    """
    left = list(reversed(releases))
    order: list[PlannedRelease] = []
    while left:
        free = [r for r in left if not any(r.component in o.depends_on for o in left)]
        # The catalog has no cycles; if one crept in, fall back to plan order
        # rather than loop.
        nxt = free[0] if free else left[0]
        order.append(nxt)
        left.remove(nxt)
    return order
