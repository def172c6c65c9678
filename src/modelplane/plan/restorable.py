"""Which of a stored revision's objects the operator may put back with its own credentials.

A release's stored revision is anyone's who may write a Secret in the
release's namespace (a tenant of ``monitoring``, say): Helm reads whatever
revision is newest, and so does drift. A restore applies what the revision
says with the operator's credentials, which reach the whole cluster, so a
forged revision must not be able to grant what its writer could not: each
rule below names what it holds back, and the object is then only reported.

- A grant only as a chart's own RBAC makes one: a binding only of a role the
  same manifest defines, to ServiceAccounts of the release's namespace; a
  role with no aggregation, no non-resource URL, no wildcard (verb,
  resource or API group), none of the verbs that grant more (``escalate``,
  ``bind``, ``impersonate``) and none of the reads and writes that hand over
  a credential or a node (Secrets, ServiceAccount tokens, ``nodes/proxy``,
  ``pods/exec`` and its kin, approving certificate requests).
- A webhook configuration only calling a Service of the release's namespace:
  a URL, or another namespace's Service, would hand every object it matches
  to whoever serves it.
- A cluster-scoped object only while the live one is Helm's for that release
  (``meta.helm.sh/release-name`` and ``-namespace``, which Helm 3 sets on
  everything it creates): a revision may not create one, nor take over an
  object of the cluster's own (``system:public-info-viewer``).

These hold whatever ``--release-drift`` says; an object held back is
reported in the component's message and a ``ReleaseDrift`` event.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

ROLES = frozenset({"Role", "ClusterRole"})
BINDINGS = frozenset({"RoleBinding", "ClusterRoleBinding"})
WEBHOOK_CONFIGURATIONS = frozenset(
    {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
)
RELEASE_NAME = "meta.helm.sh/release-name"
RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
_GRANTING_VERBS = frozenset({"*", "escalate", "bind", "impersonate"})
# Resource -> the verbs on it that hand over a credential, a node or a pod's
# process (an empty set: every verb). Reading Secrets reads every token of
# the namespace; a token request mints one; nodes/proxy reaches the kubelet.
_SENSITIVE: Mapping[str, frozenset[str]] = {
    "secrets": frozenset({"get", "list", "watch"}),
    "serviceaccounts/token": frozenset({"create"}),
    "nodes/proxy": frozenset(),
    "pods/exec": frozenset(),
    "pods/attach": frozenset(),
    "pods/portforward": frozenset(),
    "pods/ephemeralcontainers": frozenset(),
    "certificatesigningrequests/approval": frozenset(),
    "signers": frozenset({"approve", "sign"}),
}


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> set[str]:
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def role_refusal(body: Mapping[str, Any]) -> str:
    """Why a role from a stored revision is not restored; "" when it may be."""
    if body.get("aggregationRule") is not None:
        return "it aggregates other roles"
    rules = body.get("rules")
    for rule in rules if isinstance(rules, list) else []:
        r = _map(rule)
        verbs, resources = _strings(r.get("verbs")), _strings(r.get("resources"))
        if _strings(r.get("nonResourceURLs")):
            return "it grants non-resource URLs"
        if "*" in _strings(r.get("apiGroups")) or "*" in resources or verbs & _GRANTING_VERBS:
            return "it grants a wildcard, escalate, bind or impersonate"
        for resource in resources:
            sensitive = _SENSITIVE.get(resource)
            if sensitive is not None and (not sensitive or verbs & sensitive):
                return f"it grants {resource} {', '.join(sorted(verbs))}"
    return ""


def binding_refusal(
    body: Mapping[str, Any], defined: Collection[tuple[str, str]], namespace: str
) -> str:
    """Why a binding is not restored: its role is not the manifest's own, or a subject is
    not one of the release's ServiceAccounts; "" when it may be."""
    ref = _map(body.get("roleRef"))
    if (str(ref.get("kind")), str(ref.get("name"))) not in defined:
        return "it binds a role its release does not define"
    subjects = body.get("subjects")
    for subject in subjects if isinstance(subjects, list) else []:
        s = _map(subject)
        if s.get("kind") != "ServiceAccount" or s.get("namespace", namespace) != namespace:
            return "it binds a subject outside its release's ServiceAccounts"
    return ""


def webhook_refusal(body: Mapping[str, Any], namespace: str) -> str:
    """Why a webhook configuration is not restored; "" when every webhook calls a Service
    of the release's namespace."""
    webhooks = body.get("webhooks")
    for webhook in webhooks if isinstance(webhooks, list) else []:
        config = _map(_map(webhook).get("clientConfig"))
        service = _map(config.get("service"))
        if config.get("url") is not None or service.get("namespace") != namespace:
            return "it calls a webhook outside its release's namespace"
    return ""


def cluster_scoped_refusal(
    live_annotations: Mapping[str, Any] | None, release: str, namespace: str
) -> str:
    """Why a cluster-scoped object is not restored: it is gone, or not Helm's for the release."""
    if live_annotations is None:
        return "a cluster-scoped object is recreated only by its release's helm"
    if (
        live_annotations.get(RELEASE_NAME) != release
        or live_annotations.get(RELEASE_NAMESPACE) != namespace
    ):
        return "the live object is not its release's"
    return ""


def held_back(
    kind: str,
    body: Mapping[str, Any],
    *,
    defined: Collection[tuple[str, str]],
    release: str,
    namespace: str,
    cluster_scoped: bool,
    live_annotations: Mapping[str, Any] | None,
) -> str:
    """Why the operator will not restore ``body`` from a stored revision; "" if it may.

    ``defined`` are the (kind, name) of the roles the same manifest
    defines; ``live_annotations`` the live object's, None when it is gone.
    """
    checks = []
    if cluster_scoped:
        checks.append(cluster_scoped_refusal(live_annotations, release, namespace))
    if kind in BINDINGS:
        checks.append(binding_refusal(body, defined, namespace))
    if kind in ROLES:
        checks.append(role_refusal(body))
    if kind in WEBHOOK_CONFIGURATIONS:
        checks.append(webhook_refusal(body, namespace))
    return next((why for why in checks if why), "")
