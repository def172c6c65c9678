"""What of a stored revision the operator may restore with its own credentials."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.plan.restorable import (
    binding_refusal,
    cluster_scoped_refusal,
    role_refusal,
    webhook_refusal,
)

WILD = "it grants a wildcard, escalate, bind or impersonate"
ROLE_OUTSIDE = "it binds a role its release does not define"
SUBJECT_OUTSIDE = "it binds a subject outside its release's ServiceAccounts"


def _role(*rules: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"rules": list(rules), **more}


def _rule(resources: list[str], verbs: list[str], groups: list[str] | None = None) -> Any:
    return {"apiGroups": groups or [""], "resources": resources, "verbs": verbs}


@pytest.mark.parametrize(
    ("role", "why"),
    [
        (_role(_rule(["configmaps"], ["get", "list", "watch"])), ""),
        (_role(_rule(["secrets"], ["create", "update"])), ""),
        (_role(), ""),
        (_role(aggregationRule={"clusterRoleSelectors": []}), "it aggregates other roles"),
        (_role({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}), "it grants non-resource URLs"),
        (
            _role(_rule(["pods"], ["get"], ["*"])),
            WILD,
        ),
        (_role(_rule(["*"], ["get"])), WILD),
        (_role(_rule(["pods"], ["*"])), WILD),
        (
            _role(_rule(["roles"], ["escalate"])),
            WILD,
        ),
        (
            _role(_rule(["users"], ["impersonate"])),
            WILD,
        ),
        (_role(_rule(["secrets"], ["get"])), "it grants secrets get"),
        (_role(_rule(["secrets"], ["watch"])), "it grants secrets watch"),
        (
            _role(_rule(["serviceaccounts/token"], ["create"])),
            "it grants serviceaccounts/token create",
        ),
        (_role(_rule(["nodes/proxy"], ["get"])), "it grants nodes/proxy get"),
        (_role(_rule(["pods/exec"], ["create"])), "it grants pods/exec create"),
        (_role(_rule(["signers"], ["approve"])), "it grants signers approve"),
        # Malformed shapes grant nothing and refuse nothing.
        (_role("not a rule", {"verbs": "get"}), ""),
        ({"rules": "nope"}, ""),
    ],
)
def test_role_refusal(role: dict[str, Any], why: str) -> None:
    assert role_refusal(role) == why


DEFINED = {("ClusterRole", "own")}


def _binding(role: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {"roleRef": {"kind": "ClusterRole", "name": role}, "subjects": list(subjects)}


SA = {"kind": "ServiceAccount", "name": "a"}


@pytest.mark.parametrize(
    ("binding", "why"),
    [
        (_binding("own", SA), ""),
        (_binding("own", {**SA, "namespace": "ns"}), ""),
        (_binding("cluster-admin", SA), ROLE_OUTSIDE),
        (_binding("own", {"kind": "Group", "name": "system:authenticated"}), SUBJECT_OUTSIDE),
        (_binding("own", {**SA, "namespace": "tenant"}), SUBJECT_OUTSIDE),
    ],
)
def test_binding_refusal(binding: dict[str, Any], why: str) -> None:
    assert binding_refusal(binding, DEFINED, "ns") == why


OUTSIDE = "it calls a webhook outside its release's namespace"


def _webhooks(*configs: dict[str, Any]) -> dict[str, Any]:
    return {"webhooks": [{"clientConfig": c} for c in configs]}


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"webhooks": [{"clientConfig": {"service": {"namespace": "ns", "name": "w"}}}]}, ""),
        ({"webhooks": []}, ""),
        ({"webhooks": [{"clientConfig": {"url": "https://attacker.example/"}}]}, OUTSIDE),
        (
            {"webhooks": [{"clientConfig": {"service": {"namespace": "tenant", "name": "w"}}}]},
            OUTSIDE,
        ),
        ({"webhooks": [{"clientConfig": {}}]}, OUTSIDE),
    ],
)
def test_webhook_refusal(config: dict[str, Any], why: str) -> None:
    assert webhook_refusal(config, "ns") == why


NOT_ITS = "the live object is not its release's"
HELM = {"meta.helm.sh/release-name": "mp-x", "meta.helm.sh/release-namespace": "ns"}


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        (HELM, ""),
        (None, "a cluster-scoped object is recreated only by its release's helm"),
        ({}, NOT_ITS),
        ({**HELM, "meta.helm.sh/release-name": "mp-other"}, "the live object is not its release's"),
        (
            {**HELM, "meta.helm.sh/release-namespace": "tenant"},
            "the live object is not its release's",
        ),
    ],
)
def test_cluster_scoped_refusal(annotations: dict[str, Any] | None, why: str) -> None:
    assert cluster_scoped_refusal(annotations, "mp-x", "ns") == why
