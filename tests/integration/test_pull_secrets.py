"""A missing pull Secret is named in the status and clears when it arrives; resyncs stay free.

The operator runs with ``--image-pull-secret regcred`` against a real API
server: a Provided Dynamo stack, whose product-owned ModelExpress server
runs in ``default``, so the Secret must be there. The Secrets are read by
their metadata only, one watch per name; a no-op resync still reads the
target once (the claim), counted with the API servers' own request counters.
"""

from __future__ import annotations

from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Secret
from tests.integration.hubs import Harness, HarnessOptions, measure_resyncs
from tests.integration.substrate import provide_substrate

from modelplane.catalog import components as catalog
from modelplane.plan.pull_secrets import component_namespaces

HARNESS = HarnessOptions(prefix="ps", kubeconfig_secret=True)
FLAGS = ("--image-pull-secret", "regcred", "--image-registry-mirror", "*=mirror.internal")
COMPONENT = "modelexpress-crds"


def _secret(namespace: str) -> Secret:
    return Secret.from_dict(
        {
            "metadata": {"name": "regcred", "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": '{"auths": {"mirror.internal": {}}}'},
        }
    )


CONTROLLER = "quay.io/jetstack/cert-manager-controller:v1.20.2"


def _provided_cert_manager(h: Harness) -> None:
    """The owner's cert-manager controller, still pulling from quay.io."""
    h.target.create(Namespace.from_dict({"metadata": {"name": "cert-manager"}}))
    labels = {"app": "cm"}
    h.target.create(
        Deployment.from_dict(
            {
                "metadata": {"name": "cm", "namespace": "cert-manager"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "c", "image": CONTROLLER}]},
                    },
                },
            }
        )
    )


def _message(h: Harness, component: str) -> str:
    for c in h.status().get("components", []):
        if c["name"] == component:
            return str(c.get("message", ""))
    return ""


def test_a_missing_pull_secret_is_reported_then_clears_and_resyncs_read_nothing(
    harness: Harness,
) -> None:
    provide_substrate(harness.target, catalog.Stack.DYNAMO)
    # In another namespace only: not where the server's pods run.
    harness.target.create(_secret("kube-system"))
    _provided_cert_manager(harness)
    harness.create({"stack": "Dynamo", "components": "Provided"})
    harness.start("--resync", "2", *FLAGS)

    missing = harness.wait_condition(
        "PullSecretsPresent", "False", "PullSecretMissing", deadline=120
    )
    assert missing["message"] == f"{COMPONENT}: regcred in default", missing
    assert _message(harness, COMPONENT) == "PullSecretMissing: regcred in default"
    assert harness.status()["imageMirrors"] == ["*=mirror.internal"]
    # Nothing is held back for it.
    harness.wait_condition("Ready", "True", deadline=120)
    # The provided workload outside the mirror is a warning, never unmet.
    met = harness.wait_condition("RequirementsMet", "True", deadline=60)["message"]
    assert f"Deployment cert-manager/cm pulls {CONTROLLER}, which rule *=mirror.internal" in met

    # The Secret arrives: its watch wakes the stack, and the report clears.
    harness.target.create(_secret("default"))
    present = harness.wait_condition("PullSecretsPresent", "True", "Present", deadline=60)
    assert "regcred" in present["message"]
    assert _message(harness, COMPONENT) == ""

    # Past the reconciles that follow the writes, a no-op resync reads the claim only.
    resyncs = measure_resyncs(harness)
    assert set(resyncs.target_reads) <= {"leases"}, resyncs.target_reads
    assert resyncs.target_reads.get("leases", 0.0) <= resyncs.count + 1, resyncs
    assert resyncs.target_writes == {}, "target writes"
    assert resyncs.hub_writes == {}, "hub writes"

    # Gone again: the watch sees the deletion and the report comes back.
    harness.target.delete(Secret, "regcred", namespace="default")
    harness.wait_condition("PullSecretsPresent", "False", "PullSecretMissing", deadline=60)


def test_a_managed_install_names_each_namespace_its_charts_pull_in(harness: Harness) -> None:
    standard = [
        c
        for c in catalog.components_of_stack(catalog.Stack.STANDARD)
        if c.chart is not None and c.enabled(_standard_spec())
    ]
    wanted = {(c.name, ns) for c in standard for ns in component_namespaces(c)}
    harness.create({})
    harness.start("--image-pull-secret", "regcred")
    # The releases install without the Secret (it may come later)...
    harness.wait_condition("Ready", "True", deadline=180)
    missing = harness.wait_condition(
        "PullSecretsPresent", "False", "PullSecretMissing", deadline=60
    )
    named = {
        (part.split(": ")[0], where.strip().removeprefix("regcred in "))
        for part in missing["message"].split("; ")
        for where in part.split(": ", 1)[1].split(", ")
    }
    assert named == wanted, missing["message"]
    assert "envoy-gateway-system" in {ns for _, ns in named if _ == "ai-gateway"}
    # ...and once it is in every one of them, the condition clears.
    for namespace in sorted({ns for _, ns in wanted}):
        harness.target.create(_secret(namespace))
    harness.wait_condition("PullSecretsPresent", "True", "Present", deadline=60)
    assert all(not c.get("message") for c in harness.status()["components"])


def _standard_spec() -> Any:
    from modelplane.api.spec import ServingStackSpec

    return ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}]}
    )
