"""What a target's tenants write outside the product's namespaces is never read as the product's.

Against a real hub and target API server and real helm. A tenant can write
anything, with any labels, in a namespace of its own; and whoever can write
Secrets in a namespace the catalog installs into can write a revision of
the release there. Neither may reach what the operator reads, restores or
reports beyond that release's own namespace.
"""

from __future__ import annotations

from lightkube.resources.core_v1 import Namespace, Secret
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.hubs import Harness, HarnessOptions
from tests.waiting import wait_for

from modelplane.wire import RELEASE_DIGEST_LABEL

HARNESS = HarnessOptions(prefix="scope", kubeconfig_secret=True)
TENANT = "tenant-a"


def _secret_reads(h: Harness) -> dict[tuple[str, str], float]:
    """(verb, scope) -> Secret LISTs served and WATCHes open, by the target's own metrics.

    A WATCH is counted in ``apiserver_request_total`` only once it ends, so
    the open ones are read from ``apiserver_longrunning_requests``.
    """
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(h.target_env.metrics_text()):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("resource") != "secrets":
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
