"""The manifests and objects a stack applies, and whether each is applied as planned.

An object is applied when its digest changed, or when someone changed the
live object since (``plan.drift``); it is held while the API it needs is
not served.
"""

from __future__ import annotations

from typing import Any

from modelplane.catalog.configuration import ConfigObject, Hold
from modelplane.catalog.types import Component, CRDServes
from modelplane.plan.drift import drifted_fields
from modelplane.plan.model import ObjectAction, PlannedManifests, PlannedObject
from modelplane.plan.observed import Observed
from modelplane.plan.sources import Sources
from modelplane.wire import DIGEST_ANNOTATION, digest, object_key, stamp


def manifests_digest(url: str) -> str:
    return digest({"url": url})


def planned_manifests(
    component: Component, version: str, observed: Observed, sources: Sources, managed: bool
) -> PlannedManifests:
    assert component.manifests is not None
    url = component.manifests.url(version, sources.manifests_base_url_for.get(component.name))
    want = manifests_digest(url)
    crds = [r.crd for r in component.requirements if isinstance(r, CRDServes)]
    applied = all(observed.applied.get(object_key(crd_stub(name))) == want for name in crds)
    return PlannedManifests(
        component=component.name,
        url=url,
        version=version,
        digest=want,
        crds=crds,
        action=ObjectAction.NONE if applied else ObjectAction.APPLY,
        teardown=component.role == "config" or managed,
    )


def crd_stub(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
    }


def planned_object(config: ConfigObject, component: str, observed: Observed) -> PlannedObject:
    body = stamp(config.body)
    key = object_key(body)
    missing = [str(api) for api in config.needs if not observed.serves(api)]
    hold, reason = config.hold, config.hold_reason
    if hold is None and missing:
        hold, reason = Hold.WAITING_FOR_API, f"waits for the target to serve {', '.join(missing)}"
    drift: list[str] = []
    if hold is not None:
        action = ObjectAction.HOLD
    elif observed.applied.get(key) != body["metadata"]["annotations"][DIGEST_ANNOTATION]:
        action = ObjectAction.APPLY
    else:
        # The digest says the source is unchanged; ownership says whether
        # someone changed the live object since (see plan.drift).
        owned = observed.owned.get(key)
        drift = drifted_fields(body, owned) if owned is not None else []
        action = ObjectAction.APPLY if drift else ObjectAction.NONE
    return PlannedObject(
        key=key,
        component=component,
        object=body,
        needs=[str(api) for api in config.needs],
        action=action,
        hold=hold,
        hold_reason=reason,
        teardown_wave=config.teardown_wave,
        drift=drift,
    )
