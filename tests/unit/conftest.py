"""Shared helpers of the unit tests: valid manifests to start from."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modelplane.api.models import ServingStack
from modelplane.catalog.components import BY_NAME
from modelplane.plan import Plan
from modelplane.plan.applied import crd_stub
from modelplane.plan.observed import Observed, ObservedRelease
from modelplane.wire import DIGEST_ANNOTATION, object_key

# The specification lives next to the repository (../shared/spec); a fresh
# clone elsewhere has no copy, and the tests that read it skip.
SPEC_DIR = Path(__file__).resolve().parents[3] / "shared" / "spec"
REQUIREMENTS_DOC = SPEC_DIR / "000_3c48735b7dd4bba3.txt"

# A real CA certificate: the models parse every clientCAs entry.
CLIENT_CAS = Path(__file__).resolve().parents[1] / "fixtures" / "client-cas"
CA_PEM = (CLIENT_CAS / "fleet-a.pem").read_text()
CA_PEM_B = (CLIENT_CAS / "fleet-b.pem").read_text()

Manifest = dict[str, Any]


def manifest(**spec: Any) -> Manifest:
    """A minimal valid ServingStack manifest, spec fields given in wire form."""
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "west", "namespace": "platform"},
        "spec": {
            "secrets": [{"type": "Kubeconfig", "name": "west-kubeconfig", "key": "kubeconfig"}],
            **copy.deepcopy(spec),
        },
    }


def _every_version_pin() -> dict[str, dict[str, str]]:
    """spec.versions, .standard and .dynamo with every component's field set."""
    from modelplane.catalog.components import COMPONENTS

    pins: dict[str, dict[str, str]] = {"versions": {}, "standard": {}, "dynamo": {}}
    for component in COMPONENTS:
        if component.version_field is not None:
            group, _, name = component.version_field.partition(".")
            pins[group][name] = "v1.0.0" if component.version_format == "chart" else "1"
    return pins


def full_spec() -> dict[str, Any]:
    """A valid spec with every optional field set, for limit tests."""
    return {
        "secrets": [
            {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"},
            {
                "type": "GoogleApplicationCredentials",
                "name": "sa",
                "key": "key.json",
                "namespace": "crossplane-system",
            },
        ],
        "stack": "Dynamo",
        "components": "Provided",
        "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
        **_every_version_pin(),
        "gateway": {
            "className": "eg",
            "hostname": "west.example.com",
            "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
            "clientCAs": [{"name": "fleet", "certificate": CA_PEM}],
        },
        "adopt": ["cert-manager"],
    }


StackFactory = Callable[..., ServingStack]


@pytest.fixture
def make_stack() -> StackFactory:
    def make(**spec: Any) -> ServingStack:
        return ServingStack.model_validate(manifest(**spec))

    return make


@pytest.fixture
def serve_everything() -> Callable[..., Observed]:
    """Observed facts of a target that serves every API the catalog knows."""
    from modelplane.catalog import configuration as cfg
    from modelplane.catalog.components import COMPONENTS
    from modelplane.catalog.types import CRDServes, ObjectExists

    def make(**extra: Any) -> Observed:
        apis: dict[str, dict[str, list[str]]] = {}
        objects: dict[str, list[str]] = {}

        def add(group: str, resource: str, version: str) -> None:
            versions = apis.setdefault(group, {}).setdefault(resource, [])
            if version not in versions:
                versions.append(version)

        for component in COMPONENTS:
            for r in component.requirements:
                if isinstance(r, CRDServes):
                    add(r.api.group, r.api.resource, r.api.version)
                else:
                    assert isinstance(r, ObjectExists)
                    add(r.api.group, r.api.resource, r.api.version)
                    key = r.api.key
                    objects.setdefault(key, []).append(r.name)
        for api in (cfg.ISSUERS, cfg.CERTIFICATES, cfg.QUEUES, cfg.BUNDLES):
            add(api.group, api.resource, api.version)
        return Observed.model_validate({"apis": apis, "objects": objects, **extra})

    return make


def installed(p: Plan, base: Observed | None = None) -> Observed:
    """The target once everything in ``p`` was applied and installed on top of ``base``."""
    base = base or Observed()
    releases = {
        r.name: ObservedRelease(
            name=r.name, namespace=r.namespace, revision=1, status="deployed", digest=r.digest
        )
        for r in p.releases
    }
    applied = {o.key: o.object["metadata"]["annotations"][DIGEST_ANNOTATION] for o in p.objects}
    for m in p.manifests:
        # The file's other CRDs are applied from it too, with its digest.
        source = BY_NAME[m.component].manifests
        others = source.other_crds if source is not None else ()
        applied |= {object_key(crd_stub(crd)): m.digest for crd in (*m.crds, *others)}
    return base.model_copy(update={"releases": releases, "applied": applied})
