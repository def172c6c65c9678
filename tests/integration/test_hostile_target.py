"""A target's tenants do not steer the operator: look-alikes, alias bombs, a bad CA.

Against a real hub and target API server and real helm. A tenant can write
Secrets, Gateways and ConfigMaps in its own namespace with any labels; none
of them may change the plan, the target or what the hub publishes. Memory
is asserted from the operator process's own peak (VmHWM), not a clock; the
before-and-after figures are bench/bench_alias_bomb.py's.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Secret
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions
from tests.integration.substrate import provide_substrate
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, NS
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL, RELEASE_DIGEST_LABEL

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
HARNESS = HarnessOptions(prefix="x", kubeconfig_secret=True)
TENANT = "tenant-a"
EG_NAMESPACE = catalog.BY_NAME["envoy-gateway"].namespace
OUR_ADDRESS = "203.0.113.10"
TENANT_ADDRESS = "198.51.100.66"
# The operator's peak resident memory with the bomb on the target. It runs
# near 150 MiB; the bomb, expanded, takes 1.4 GB (bench/bench_alias_bomb.py).
MEMORY_CEILING_KIB = 400 * 1024


def alias_bomb(levels: int = 9) -> str:
    """532 bytes that expand to 9**levels nodes, where the extensionManager belongs."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    lines.append(f"extensionManager: *a{levels}")
    return "\n".join(lines) + "\n"


def _tenant(h: Harness) -> None:
    h.target.create(Namespace.from_dict({"metadata": {"name": TENANT}}))


def _release_revisions(h: Harness) -> dict[str, list[str]]:
    """Helm's storage Secrets in each release's own namespace, by release."""
    out: dict[str, list[str]] = {}
    for component in catalog.components_of_stack(catalog.Stack.STANDARD):
        if component.chart is None:
            continue
        secrets = h.target.list(
            Secret,
            namespace=component.namespace,
            labels={"owner": "helm", "name": component.release_name},
        )
        out[component.release_name] = sorted(
            f"{s.metadata.name}:{(s.metadata.labels or {}).get('status')}"
            for s in secrets
            if s.metadata is not None
            and s.metadata.name is not None
            # Helm's own storage name for the release: a look-alike is no revision.
            and s.metadata.name.startswith(f"sh.helm.release.v1.{component.release_name}.v")
        )
    return out


def _fake_release_secret() -> dict[str, Any]:
    # Helm's own name and labels for a newer, stuck revision of the real
    # release: what made the plan roll back or reinstall cert-manager.
    return {
        "metadata": {
            "name": "sh.helm.release.v1.mp-cert-manager.v2",
            "namespace": TENANT,
            "labels": {
                "owner": "helm",
                "name": "mp-cert-manager",
                "status": "pending-install",
                "version": "2",
                RELEASE_DIGEST_LABEL: "0000000000000000",
            },
        },
        "type": "helm.sh/release.v1",
        "stringData": {"release": "not a release"},
    }


def _gateway_with_address(h: Harness, namespace: str, address: str) -> None:
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": address}]}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


def _resyncs(h: Harness, n: int) -> None:
    count = h.reconciles()
    wait_for(f"{n} resyncs", lambda: h.reconciles() >= count + n, deadline=90)


def test_tenant_look_alikes_change_neither_the_releases_nor_the_hub(harness: Harness) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    _gateway_with_address(harness, NS, OUR_ADDRESS)
    wait_for(
        "our address on the hub",
        lambda: (harness.status().get("gateway") or {}).get("address") == OUR_ADDRESS,
        deadline=60,
    )
    before = _release_revisions(harness)
    assert all(before.values()), before

    _tenant(harness)
    harness.target.create(Secret.from_dict(_fake_release_secret()))
    # A Gateway of the tenant's own, named and labelled as the product's.
    harness.target.create(
        GATEWAY.from_dict(
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": {
                    "name": GATEWAY_NAME,
                    "namespace": TENANT,
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                },
                "spec": {"gatewayClassName": "envoy", "listeners": []},
            }
        )
    )
    _gateway_with_address(harness, TENANT, TENANT_ADDRESS)
    # Every resync sees both look-alikes (the watches' copy and the direct
    # reads alike); five of them leave everything as it was.
    _resyncs(harness, 5)
    assert _release_revisions(harness) == before
    assert harness.condition("Ready")["status"] == "True", harness.status()
    assert (harness.status().get("gateway") or {}).get("address") == OUR_ADDRESS
    # Nor did the operator touch the tenant's objects.
    tenant_gateway = harness.target.get(GATEWAY, GATEWAY_NAME, namespace=TENANT).to_dict()
    assert tenant_gateway["status"]["addresses"][0]["value"] == TENANT_ADDRESS
    assert harness.target.get(Secret, _fake_release_secret()["metadata"]["name"], namespace=TENANT)


def test_a_bundle_configmap_holding_a_private_key_is_not_published(harness: Harness) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    certificate = harness.target_env.ca_pem.decode()
    key = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        .decode()
    )
    harness.target.apply(
        ConfigMap.from_dict(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CLUSTER_CA, "namespace": NS},
                "data": {"ca.crt": certificate + key},
            }
        ),
        field_manager="trust-manager",
    )
    _resyncs(harness, 3)
    status = harness.status()
    gateway = status.get("gateway") or {}
    assert "caCertificate" not in gateway, gateway
    # No part of the key reaches the hub; the status says why no CA is there.
    key_body = "".join(key.splitlines()[1:-1])
    assert "-----BEGIN PRIVATE KEY-----" not in str(status)
    assert key_body[:40] not in str(status)
    published = harness.condition("CACertificatePublished")
    assert (published.get("status"), published.get("reason")) == ("False", "NotPublished")
    assert "PRIVATE KEY block" in published["message"]

    # The certificate alone is published.
    harness.target.apply(
        ConfigMap.from_dict(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CLUSTER_CA, "namespace": NS},
                "data": {"ca.crt": certificate},
            }
        ),
        field_manager="trust-manager",
    )
    wait_for(
        "the CA on the hub",
        lambda: (harness.status().get("gateway") or {}).get("caCertificate") == certificate,
        deadline=60,
    )


def _peak_rss_kib(h: Harness) -> int:
    assert h.proc is not None
    status = Path(f"/proc/{h.proc.pid}/status").read_text()
    (line,) = [x for x in status.splitlines() if x.startswith("VmHWM:")]
    return int(line.split()[1])


def test_an_alias_bomb_configmap_is_a_warning(harness: Harness) -> None:
    provide_substrate(harness.target)
    # Where Envoy Gateway's configuration is read, and nowhere else: whoever
    # may write ConfigMaps there may write this.
    harness.target.create(Namespace.from_dict({"metadata": {"name": EG_NAMESPACE}}))
    harness.target.create(
        ConfigMap.from_dict(
            {
                "metadata": {"name": "envoy-gateway-config", "namespace": EG_NAMESPACE},
                "data": {"envoy-gateway.yaml": alias_bomb()},
            }
        )
    )
    harness.create({"components": "Provided"})
    harness.start("--resync", "2")
    met = harness.wait_condition("RequirementsMet", "True", deadline=120)
    # The advisory read the bomb and refused it: a warning naming the
    # ConfigMap and the bound, never its text.
    assert f"ConfigMap {EG_NAMESPACE}/envoy-gateway-config key envoy-gateway.yaml" in met["message"]
    assert "aliases are expanded" in met["message"], met
    assert "*a8" not in met["message"]
    _resyncs(harness, 3)
    assert harness.proc is not None and harness.proc.poll() is None, "the operator died"
    assert _peak_rss_kib(harness) < MEMORY_CEILING_KIB


# Past the release Secrets' budget of 32 MiB (kube.budget): 40 Secrets of
# some 900 KiB each, which the API server stores (under etcd's 1.5 MiB).
TENANT_SECRETS = 40
TENANT_SECRET_BYTES = 675 * 1024  # base64 on the wire: 900 KiB
# Helm's Secrets are read only in the release namespaces, so a tenant's
# look-alikes elsewhere never reach the operator; what is left is a team that
# owns one of those namespaces (the monitoring team's, say) filling it.
OWNED_RELEASE_NS = catalog.BY_NAME["kube-prometheus-stack"].namespace


def _release_like_secret(i: int) -> dict[str, Any]:
    # The labels the operator's release-Secret LIST selects on, and data
    # as large as a Secret may hold: what a tenant can write in its own
    # namespace.
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.filler-{i}.v1",
            "namespace": OWNED_RELEASE_NS,
            "labels": {
                "owner": "helm",
                "name": catalog.BY_NAME["kube-prometheus-stack"].release_name,
                RELEASE_DIGEST_LABEL: "forged",
            },
        },
        "type": "helm.sh/release.v1",
        "data": {"release": base64.b64encode(os.urandom(TENANT_SECRET_BYTES)).decode()},
    }


def _warning_events(h: Harness, reason: str) -> list[Event]:
    return [
        e
        for e in h.hub.list(Event, namespace=h.ns)
        if e.involvedObject.kind == "ServingStack" and e.reason == reason and e.type == "Warning"
    ]


def test_release_like_secrets_past_the_budget_are_refused_and_lose_nothing(
    harness: Harness,
) -> None:
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    before = _release_revisions(harness)
    assert all(before.values()), before

    # Written while the operator is down, as a tenant quicker than its
    # reconciles would: Secrets Helm reads as revisions are deleted once the
    # collection fits its budget (they are not the operator's), so past the
    # budget is the state this test is about.
    harness.stop()
    for i in range(TENANT_SECRETS):
        harness.target.create(Secret.from_dict(_release_like_secret(i)))
    harness.start("--resync", "2")
    # The watch's copy passes the budget and is dropped; the reconcile's
    # own LIST stops reading at it. Said in Ready and in one event, naming
    # the collection and the budget, not as an unreachable target.
    ready = harness.wait_condition("Ready", "False", "TargetCollectionTooLarge", deadline=120)
    assert ready["message"].startswith(
        f"the target's secrets (namespace {OWNED_RELEASE_NS}, labels owner=helm"
    ), ready
    assert "over the budget of 1000 objects, 32 MiB and 128 MiB of memory" in ready["message"], (
        ready
    )
    wait_for(
        "one event",
        lambda: len(_warning_events(harness, "TargetCollectionTooLarge")) == 1,
        deadline=30,
    )
    _resyncs(harness, 3)
    assert len(_warning_events(harness, "TargetCollectionTooLarge")) == 1
    assert harness.proc is not None and harness.proc.poll() is None, "the operator died"
    assert _peak_rss_kib(harness) < MEMORY_CEILING_KIB
    # Nothing installed was touched while the releases could not be read.
    assert _release_revisions(harness) == before

    # The tenant's Secrets gone, the stack is Ready again by itself.
    for i in range(TENANT_SECRETS):
        harness.target.delete(
            Secret, _release_like_secret(i)["metadata"]["name"], namespace=OWNED_RELEASE_NS
        )
    harness.wait_condition("Ready", "True", deadline=120)
    assert _release_revisions(harness) == before
