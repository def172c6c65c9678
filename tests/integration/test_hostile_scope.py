"""What a target's tenants write outside the product's namespaces is never read as the product's.

Against a real hub and target API server and real helm. A tenant can write
anything, with any labels, in a namespace of its own; and whoever can write
Secrets in a namespace the catalog installs into can write a revision of
the release there. Neither may reach what the operator reads, restores or
reports beyond that release's own namespace.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import httpx2
import yaml
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Secret
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import Harness, HarnessOptions, forget_release_records
from tests.waiting import wait_for

from modelplane.catalog import components as catalog
from modelplane.wire import RELEASE_DIGEST_LABEL

HARNESS = HarnessOptions(prefix="scope", kubeconfig_secret=True)
TENANT = "tenant-a"
# A namespace the catalog installs into that a team may already own.
MONITORING = catalog.BY_NAME["kube-prometheus-stack"]
# What a forged revision asks the operator to put back, with its credentials.
ESCAPE = "node-shell"
ESCAPE_DAEMONSET: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": ESCAPE, "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app": ESCAPE}},
        "template": {
            "metadata": {"labels": {"app": ESCAPE}},
            "spec": {
                "hostPID": True,
                "containers": [
                    {
                        "name": "shell",
                        "image": "busybox",
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                    }
                ],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            },
        },
    },
}


def _secret_reads(h: Harness) -> dict[tuple[str, str], float]:
    return _reads(h, "secrets")


def _reads(h: Harness, resource: str) -> dict[tuple[str, str], float]:
    """(verb, scope) -> LISTs served and WATCHes open of ``resource``, by the target's metrics.

    A WATCH is counted in ``apiserver_request_total`` only once it ends, so
    the open ones are read from ``apiserver_longrunning_requests``.
    """
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(h.target_env.metrics_text()):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("resource") != resource:
                continue
            if sample.name == "apiserver_request_total" and labels.get("verb") == "LIST":
                key = ("LIST", labels.get("scope", ""))
            elif sample.name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
                key = ("WATCH", labels.get("scope", ""))
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


def _resyncs(h: Harness, n: int) -> None:
    count = h.reconciles()
    wait_for(f"{n} resyncs", lambda: h.reconciles() >= count + n, deadline=90)


def _tenant_release_look_alikes(h: Harness, count: int) -> None:
    h.target.create(Namespace.from_dict({"metadata": {"name": TENANT}}))
    for i in range(count):
        h.target.create(
            Secret.from_dict(
                {
                    "metadata": {
                        "name": f"sh.helm.release.v1.mp-cert-manager.v{i + 2}",
                        "namespace": TENANT,
                        "labels": {
                            "owner": "helm",
                            "name": "mp-cert-manager",
                            "status": "deployed",
                            "version": str(i + 2),
                            RELEASE_DIGEST_LABEL: "0000000000000000",
                        },
                    },
                    "type": "helm.sh/release.v1",
                    # 256 KiB each, which the operator must never be sent.
                    "stringData": {"release": "x" * (256 * 1024)},
                }
            )
        )


def test_release_secrets_are_read_only_in_the_release_namespaces(harness: Harness) -> None:
    # The API server's own Secret informer lists and watches the cluster.
    server_own = _secret_reads(harness)
    harness.create({})
    harness.start("--resync", "2", "--relist", "4")
    harness.wait_condition("Ready", "True", deadline=180)
    _tenant_release_look_alikes(harness, 8)
    # Direct reads (--relist) and the watches' copy alike.
    _resyncs(harness, 4)
    reads = {k: v - server_own.get(k, 0.0) for k, v in _secret_reads(harness).items()}
    # Every Secret LIST and WATCH named a namespace: none spanned the
    # cluster, so no tenant's Secret was ever sent to the operator.
    assert reads.get(("LIST", "cluster"), 0) == 0, reads
    assert reads.get(("WATCH", "cluster"), 0) == 0, reads
    assert reads.get(("LIST", "namespace"), 0) > 0, reads
    assert reads.get(("WATCH", "namespace"), 0) > 0, reads
    assert harness.condition("Ready")["status"] == "True", harness.status()


def test_the_products_own_kinds_are_read_only_where_it_applies_them(harness: Harness) -> None:
    # A hostname adds the gateway's PKI: Issuers and Certificates.
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.start("--resync", "2", "--relist", "4")
    harness.wait_condition("Ready", "True", deadline=180)
    _resyncs(harness, 3)
    # The namespaced kinds the product applies, all in modelplane-system:
    # labelled look-alikes in a tenant's namespace are never sent.
    for resource in ("gateways", "envoyproxies", "certificates", "issuers"):
        reads = _reads(harness, resource)
        assert reads.get(("LIST", "cluster"), 0) == 0, (resource, reads)
        assert reads.get(("WATCH", "cluster"), 0) == 0, (resource, reads)
        assert reads.get(("LIST", "namespace"), 0) > 0, (resource, reads)
        assert reads.get(("WATCH", "namespace"), 0) > 0, (resource, reads)


def _forge_newer_revision(h: Harness) -> str:
    """A revision of the real release, one newer, whose manifest adds ``ESCAPE_DAEMONSET``.

    What anyone who can write Secrets in the release's namespace can do:
    copy the latest revision (its labels, digest included) and add to it.
    """
    secrets = h.target.list(
        Secret,
        namespace=MONITORING.namespace,
        labels={"owner": "helm", "name": MONITORING.release_name},
    )
    latest = max(secrets, key=lambda s: int((s.metadata.labels or {})["version"]))
    assert latest.metadata is not None and latest.data is not None
    stored = base64.b64decode(base64.b64decode(latest.data["release"]))
    release = json.loads(gzip.decompress(stored))
    revision = int((latest.metadata.labels or {})["version"]) + 1
    release["version"] = revision
    release["manifest"] += "\n---\n" + yaml.safe_dump(ESCAPE_DAEMONSET)
    name = f"sh.helm.release.v1.{MONITORING.release_name}.v{revision}"
    text = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    h.target.create(
        Secret.from_dict(
            {
                "metadata": {
                    "name": name,
                    "namespace": MONITORING.namespace,
                    "labels": {
                        **(latest.metadata.labels or {}),
                        "version": str(revision),
                        "status": "deployed",
                    },
                },
                "type": "helm.sh/release.v1",
                "stringData": {"release": text},
            }
        )
    )
    return name


def _escaped(h: Harness) -> bool:
    try:
        h.target.get(DaemonSet, ESCAPE, namespace="kube-system")
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return True


def _events(h: Harness, reason: str) -> list[str]:
    items = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").json()
    return [
        e["message"]
        for e in items["items"]
        if e["reason"] == reason and e["involvedObject"].get("name") == "stack"
    ]


def test_a_revision_reaching_outside_its_namespace_is_refused(harness: Harness) -> None:
    """Refused even where the hub holds no record to tell it from the operator's.

    A forged revision newer than the hub's record is removed before anything
    of it is read (tests/integration/test_release_records.py); without a
    record (a stack managed before the record was kept), the newest is taken
    as found, and this is the line that holds.
    """
    harness.create({})
    # --release-drift=correct is the default: a release's deleted workload is put back.
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    harness.stop()
    forget_release_records(harness)
    _forge_newer_revision(harness)
    harness.start("--resync", "2")
    wait_for(
        "the operator's first reconcile",
        lambda: harness.reconciles() >= 1,
        deadline=60,
        not_yet=(httpx2.TransportError,),
    )
    _resyncs(harness, 5)
    # Nothing was created outside the release's namespace ...
    assert not _escaped(harness)
    # ... and the status and an event say which release and namespace.
    ready = harness.wait_condition("Ready", "False", "ReleaseOutsideNamespace", deadline=60)
    for words in (
        MONITORING.release_name,
        f"DaemonSet kube-system/{ESCAPE}",
        f"namespace {MONITORING.namespace}",
    ):
        assert words in ready["message"], ready
    component = next(c for c in harness.status()["components"] if c["name"] == MONITORING.name)
    assert component["state"] == "Degraded", component
    wait_for("the event", lambda: _events(harness, "ReleaseRevisionRefused"), deadline=30)
    (event,) = _events(harness, "ReleaseRevisionRefused")
    assert f"outside the release's namespace {MONITORING.namespace}" in event
    assert not _escaped(harness)
