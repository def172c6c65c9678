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
   only: a Provided substrate is never uninstalled, even one we installed
   before a switch from Managed;
4. the last wave (the namespace), not waited for: the cluster empties it in
   its own time, and nothing of ours waits on that. With it go the release
   namespaces the product created for its releases (they carry its digest;
   one the cluster owner made does not, and stays), in Managed mode only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from modelplane.catalog.components import BY_NAME
from modelplane.catalog.configuration import TeardownWave
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
    """Uninstall one Helm release."""

    step: Literal["uninstall"] = "uninstall"
    release: str
    namespace: str


TeardownStep = Annotated[DeleteObjects | UninstallRelease, Field(discriminator="step")]


def teardown_steps(plan: Plan, observed: Observed) -> list[TeardownStep]:
    """What deleting the stack still has to do on the target, in order.

    Only what is there and ours: objects that carry our digest, releases
    that carry our label. A step with nothing left to do is left out.
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
        steps += [
            UninstallRelease(release=r.name, namespace=r.namespace)
            for r in _dependents_first(plan.releases)
            if r.name in observed.releases
        ]

    last = [ObjectRef.of(o.object) for o in applied if o.teardown_wave is TeardownWave.LAST]
    if plan.mode == ComponentsMode.MANAGED:
        last += [
            ref
            for ref in _release_namespaces(plan.releases)
            if object_key(ref.body()) in observed.applied and ref not in last
        ]
    if last:
        steps.append(DeleteObjects(objects=last, wait=False))
    return steps


def _manifest_crds(manifests: PlannedManifests) -> list[str]:
    """Every CRD the fetched file brings: those the requirements check, and the others."""
    component = BY_NAME.get(manifests.component)
    source = component.manifests if component is not None else None
    others = source.other_crds if source is not None else ()
    return [*manifests.crds, *(c for c in others if c not in manifests.crds)]


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
