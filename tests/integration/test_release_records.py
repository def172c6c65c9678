"""A forged Helm revision is found against the hub's record, removed, and never acted on.

Whoever can write Secrets in a release's namespace (the monitoring team, in
``monitoring``) can write a newer revision of the operator's release: Helm
takes the newest as the release, and deletes, on the next upgrade, what it
lists that the new chart lacks. The operator records on the hub
(``status.releases``) what its own helm wrote, and holds the target's
storage to it (plan.release_trust), against a real API server and real helm.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from typing import Any

import yaml
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret
from lightkube.resources.rbac_authorization_v1 import ClusterRole
from tests.integration.hubs import Harness, HarnessOptions
from tests.waiting import wait_for

from modelplane.catalog import components as catalog

HARNESS = HarnessOptions(prefix="records", kubeconfig_secret=True)

MONITORING = catalog.BY_NAME["kube-prometheus-stack"]
RELEASE, NS = MONITORING.release_name, MONITORING.namespace
# Someone else's ClusterRole: not the release's, and Helm would delete it on
# an upgrade from a revision that lists it.
VICTIM = "someone-elses-role"
# What the forged revision adds: a role that aggregates cluster-admin's rules.
ESCALATE = "forged-admin"
DEADLINE = 120


def _role(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        **extra,
    }


def _stored(secret: Secret) -> dict[str, Any]:
    assert secret.data is not None
    release: dict[str, Any] = json.loads(
        gzip.decompress(base64.b64decode(base64.b64decode(secret.data["release"])))
    )
    return release


def _revision_secret(h: Harness, revision: int) -> Secret:
    return h.target.get(Secret, f"sh.helm.release.v1.{RELEASE}.v{revision}", namespace=NS)


def _forge(h: Harness) -> str:
    """Revision 2 of the release, from revision 1 (labels, digest and all), listing more."""
    ours = _revision_secret(h, 1)
    assert ours.metadata is not None
    release = _stored(ours)
    release["version"] = 2
    release["manifest"] += "\n---\n" + yaml.safe_dump(_role(VICTIM))
    aggregate = {"clusterRoleSelectors": [{"matchLabels": {"forged": "admin"}}]}
    release["manifest"] += "\n---\n" + yaml.safe_dump(_role(ESCALATE, aggregationRule=aggregate))
    name = f"sh.helm.release.v1.{RELEASE}.v2"
    text = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    labels = {**(ours.metadata.labels or {}), "version": "2", "status": "deployed"}
    h.target.create(
        Secret.from_dict(
            {
                "metadata": {"name": name, "namespace": NS, "labels": labels},
                "type": "helm.sh/release.v1",
                "stringData": {"release": text},
            }
        )
    )
    return name


def _present(h: Harness, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        h.target.get(res, name, namespace=namespace)
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


def _record(h: Harness) -> dict[str, Any]:
    records = {r["name"]: r for r in h.status().get("releases") or []}
    return dict(records.get(RELEASE) or {})


def _digest(release: dict[str, Any]) -> str:
    hooks = [
        {k: v for k, v in hook.items() if k != "last_run"} for hook in release.get("hooks") or []
    ]
    blob = json.dumps(
        {"manifest": release.get("manifest") or "", "hooks": hooks},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def test_a_forged_newer_revision_is_removed_and_the_next_upgrade_builds_on_ours(
    harness: Harness,
) -> None:
    harness.create({})
    harness.start("--resync", "2")
    harness.wait_condition("Ready", "True", deadline=180)
    # The hub holds what helm wrote: revision 1 and the digest of its manifest.
    record = wait_for("the release recorded on the hub", lambda: _record(harness), deadline=60)
    assert record["revision"] == 1, record
    assert record["manifestDigest"] == _digest(_stored(_revision_secret(harness, 1)))
    harness.target.create(ClusterRole.from_dict(_role(VICTIM)))

    forged = _forge(harness)
    # Said in a Warning event naming the Secret, and removed: Helm's newest
    # revision is the operator's again.
    wait_for(
        "a ReleaseStorageTampered event naming the forged Secret",
        lambda: any(f"{NS}/{forged}" in m for m in _events(harness, "ReleaseStorageTampered")),
        deadline=DEADLINE,
    )
    wait_for(
        "the forged revision removed",
        lambda: not _present(harness, Secret, forged, NS),
        deadline=DEADLINE,
    )
    assert harness.helm_releases()[RELEASE]["revision"] == "1"
    # Nothing of it was applied.
    assert not _present(harness, ClusterRole, ESCALATE)
    harness.wait_condition("Ready", "True", deadline=DEADLINE)
    assert _record(harness)["revision"] == 1

    # The next upgrade's base is the operator's revision 1, not the forgery:
    # what only the forgery lists (someone else's role) is left alone.
    harness.create({"versions": {"prometheus": "84.5.0"}})
    wait_for(
        "the upgrade to revision 2",
        lambda: harness.helm_releases()[RELEASE]["revision"] == "2",
        deadline=DEADLINE,
    )
    harness.wait_condition("Ready", "True", deadline=DEADLINE, generation=2)
    assert _present(harness, ClusterRole, VICTIM)
    assert not _present(harness, ClusterRole, ESCALATE)
    upgraded = _stored(_revision_secret(harness, 2))
    assert VICTIM not in upgraded["manifest"]
    wait_for("revision 2 recorded", lambda: _record(harness).get("revision") == 2, deadline=60)
    assert _record(harness)["manifestDigest"] == _digest(upgraded)
