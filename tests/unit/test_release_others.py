"""A release's objects other than its workloads: which are followed, and their drift."""

from __future__ import annotations

from typing import Any

from modelplane.observe.release_objects import RELEASE_OWNERS
from modelplane.observe.release_others import (
    MAX_OBJECTS,
    collections_for,
    other_entries,
    release_others,
)
from modelplane.observe.state import Listed
from modelplane.plan.release_health import DriftMode, ReleaseObject, object_drift

MANIFEST = """
apiVersion: v1
kind: Service
metadata: {name: webhook}
spec:
  ports: [{name: https, port: 443, targetPort: 10250}]
---
apiVersion: v1
kind: Secret
metadata: {name: webhook-ca}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: webhook, namespace: ignored}
webhooks: [{name: w.example.com}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leader-election, namespace: kube-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: webhook}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
"""


def test_which_objects_are_followed_and_where() -> None:
    entries = other_entries(MANIFEST, "cm")
    shown = [e.shown for e in entries]
    # The Role elsewhere, the workload and the custom resource are not followed.
    assert shown == [
        "Service cm/webhook",
        "Secret cm/webhook-ca",
        "ValidatingWebhookConfiguration webhook",
    ], shown
    # A cluster-scoped body is applied without the namespace the manifest gave it.
    assert "namespace" not in entries[2].body["metadata"]
    assert entries[0].body["metadata"]["namespace"] == "cm"
    collections = collections_for([("c", "r", e) for e in entries])
    assert {(c.api.resource, c.namespace, c.names) for c in collections} == {
        ("services", "cm", frozenset({"webhook"})),
        ("secrets", "cm", frozenset({"webhook-ca"})),
        ("validatingwebhookconfigurations", None, frozenset({"webhook"})),
    }


def test_a_manifest_of_thousands_is_followed_only_so_far() -> None:
    many = "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(400)
    )
    assert len(other_entries(many, "ns")) == MAX_OBJECTS


def _helm_owned(*fields: str) -> dict[str, Any]:
    return {
        "managedFields": [
            {
                "manager": "helm",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {f: {} for f in fields},
            }
        ]
    }


def _observed(live: dict[str, list[dict[str, Any]]]) -> list[ReleaseObject]:
    entries = [("cert-manager", "mp-cert-manager", e) for e in other_entries(MANIFEST, "cm")]
    listed = Listed(apis={})
    for c in collections_for(entries):
        if c.api.resource in live:
            listed.release_collections[c] = live[c.api.resource]
    return release_others(entries, listed, RELEASE_OWNERS)


def test_a_deleted_service_is_restored_from_the_manifest() -> None:
    [service] = _observed({"services": []})
    drift = object_drift(service, DriftMode.CORRECT)
    assert drift is not None and drift.deleted
    assert drift.restore == service.desired
    assert drift.message == ("Service cm/webhook of release mp-cert-manager was deleted; restored")
    warned = object_drift(service, DriftMode.WARN)
    assert warned is not None and warned.restore is None
    assert object_drift(service, DriftMode.OFF) is None


def test_a_collection_not_read_is_not_taken_as_deleted() -> None:
    assert _observed({}) == []


def test_a_hand_edited_field_is_drift_one_only_added_is_not() -> None:
    owned = {"metadata": {"name": "webhook", **_helm_owned("f:spec")}}
    [service] = _observed({"services": [owned]})
    assert object_drift(service, DriftMode.CORRECT) is None
    edited = {"metadata": {"name": "webhook", **_helm_owned("f:metadata")}}
    [service] = _observed({"services": [edited]})
    drift = object_drift(service, DriftMode.CORRECT)
    assert drift is not None and drift.fields == ["spec.ports[name=https]"], drift


def test_a_secret_is_only_recreated_when_gone() -> None:
    # Present, its data another manager's: never edited back.
    filled = {"metadata": {"name": "webhook-ca", **_helm_owned()}}
    [secret] = _observed({"secrets": [filled]})
    assert secret.data_owned_elsewhere
    assert object_drift(secret, DriftMode.CORRECT) is None
    [secret] = _observed({"secrets": []})
    drift = object_drift(secret, DriftMode.CORRECT)
    assert drift is not None and drift.deleted


GRANTS = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: own}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: own}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: own}
subjects: [{kind: ServiceAccount, name: sa, namespace: cert-manager}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: takeover}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: sa, namespace: cert-manager}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: to-a-user}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: own}
subjects: [{kind: User, name: mallory}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: everything}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: aggregates}
aggregationRule: {clusterRoleSelectors: [{matchLabels: {x: y}}]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reads-secrets}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get, list]}]
"""
# Helm's annotations on everything it creates for mp-cert-manager.
RELEASE_ANNOTATIONS = {
    "meta.helm.sh/release-name": "mp-cert-manager",
    "meta.helm.sh/release-namespace": "cert-manager",
}


def _grants(live: dict[str, Any] | None) -> dict[str, ReleaseObject]:
    """The GRANTS objects, each live as ``live`` says (its metadata), or every one deleted."""
    entries = [("cert-manager", "mp-cert-manager", e) for e in other_entries(GRANTS, "cm")]
    listed = Listed(apis={})
    for c in collections_for(entries):
        items = [{"metadata": {**live, "name": n}} for n in c.names] if live is not None else []
        listed.release_collections[c] = items
    return {o.shown: o for o in release_others(entries, listed, RELEASE_OWNERS)}


def _held(objects: dict[str, ReleaseObject]) -> dict[str, str]:
    out = {}
    for shown, o in objects.items():
        d = object_drift(o, DriftMode.CORRECT)
        assert d is not None, shown
        out[shown] = "" if d.restore is not None else d.held
    return out


def test_a_grant_a_chart_would_not_make_is_never_restored() -> None:
    # Each live and its release's, edited by hand (Helm owns only its metadata).
    edited = {"annotations": RELEASE_ANNOTATIONS, **_helm_owned("f:metadata")}
    assert _held(_grants(edited)) == {
        "ClusterRole own": "",
        "ClusterRoleBinding own": "",
        "ClusterRoleBinding takeover": "it binds a role its release does not define",
        "ClusterRoleBinding to-a-user": "it binds a subject outside its release's ServiceAccounts",
        "ClusterRole everything": "it grants a wildcard, escalate, bind or impersonate",
        "ClusterRole aggregates": "it aggregates other roles",
        "ClusterRole reads-secrets": "it grants secrets get, list",
    }


def test_a_cluster_scoped_object_is_restored_only_while_it_is_its_releases() -> None:
    gone = _held(_grants(None))
    assert set(gone.values()) == {"a cluster-scoped object is recreated only by its release's helm"}
    # The cluster's own object of that name (system:public-info-viewer, say).
    theirs = _held(_grants({**_helm_owned("f:metadata")}))
    assert set(theirs.values()) == {"the live object is not its release's"}
