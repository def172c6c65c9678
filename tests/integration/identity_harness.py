"""A target API server that accepts only the tokens an identity flow produced.

For every cloud identity's end-to-end tests: ``identity_target`` starts a
real kube-apiserver whose token authenticator is a webhook the test runs
(``--authentication-token-webhook-config-file``), with the webhook's cache
off so an expired token is refused at once. The webhook asks the test's own
``accept(token)``: a user name to authenticate as, or None to refuse. That
user is bound to cluster-admin; the admin token of ``env.kubeconfig`` still
works, for the test's own reads and writes, and is what a kubeconfig's
embedded credentials look like to a target that must never see them used.

The kubeconfig a ServingStack gets is ``cloud_kubeconfig``: the target's
server and CA with a user that runs a cloud CLI's exec plugin, as GKE, EKS
and Nebius kubeconfigs do. The operator refuses exec plugins, so a stack
reaches the target only as its identity.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding
from tests.identity_services import serve
from tests.integration.hubs import client_for
from tests.testenv import TestEnv

from modelplane.api.models import API_GROUP, API_VERSION, KIND
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE

IDENTITY_USER = "cloud-identity@test"
Accept = Callable[[str], str | None]


@dataclass
class TokenWebhook:
    """A TokenReview webhook that approves what ``accept`` approves; counts what it saw."""

    accept: Accept
    url: str = ""
    approved: int = 0
    refused: int = 0
    # Tokens seen, to tell what reached the target (kept in the test process only).
    seen: list[str] = field(default_factory=list, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        review = json.loads(body or b"{}")
        token = str((review.get("spec") or {}).get("token", ""))
        user = self.accept(token)
        with self.lock:
            self.seen.append(token)
            if user is None:
                self.refused += 1
            else:
                self.approved += 1
        status: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            status["user"] = {"username": user, "groups": ["system:authenticated"]}
        return 200, {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "status": status,
        }


@dataclass
class IdentityTarget:
    env: TestEnv
    webhook: TokenWebhook


def _webhook_config(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "webhook", "cluster": {"server": f"{url}/review"}}],
                "users": [{"name": "apiserver", "user": {}}],
                "contexts": [
                    {"name": "webhook", "context": {"cluster": "webhook", "user": "apiserver"}}
                ],
                "current-context": "webhook",
            }
        )
    )
    return path


@contextlib.contextmanager
def identity_target(directory: Path, accept: Accept) -> Iterator[IdentityTarget]:
    """A fresh API server under ``directory`` that authenticates tokens through ``accept``."""
    directory.mkdir(parents=True, exist_ok=True)
    webhook = TokenWebhook(accept)
    with serve(webhook.handle) as url:
        webhook.url = url
        config = _webhook_config(directory / "token-webhook.yaml", url)
        env = TestEnv(
            directory / "apiserver",
            extra_apiserver_args=[
                f"--authentication-token-webhook-config-file={config}",
                "--authentication-token-webhook-version=v1",
                # Every request is reviewed: an expired token is refused at once.
                "--authentication-token-webhook-cache-ttl=0s",
            ],
        )
        try:
            env.start()
            client_for(env).apply(
                ClusterRoleBinding.from_dict(
                    {
                        "metadata": {"name": "cloud-identity-admin"},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": "cluster-admin",
                        },
                        "subjects": [
                            {
                                "apiGroup": "rbac.authorization.k8s.io",
                                "kind": "User",
                                "name": IDENTITY_USER,
                            }
                        ],
                    }
                ),
                field_manager="test",
            )
            yield IdentityTarget(env, webhook)
        finally:
            env.stop()


def cloud_kubeconfig(
    env: TestEnv, cluster_name: str = "cloud-cluster", user: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The target's server and CA, with ``user`` (default: a cloud CLI's exec plugin)."""
    base = env.kubeconfig
    cluster = dict(base["clusters"][0]["cluster"])
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": "cloud-user", "user": dict(user) if user is not None else exec_user}],
        "contexts": [{"name": "cloud", "context": {"cluster": cluster_name, "user": "cloud-user"}}],
        "current-context": "cloud",
    }


def identity_stack_body(
    namespace: str,
    identity_type: str,
    secret: str,
    key: str,
    *,
    name: str = "stack",
    secret_namespace: str | None = None,
    spec: Mapping[str, Any] | None = None,
    kubeconfig_secret: str = "target-kubeconfig",
) -> dict[str, Any]:
    """A ServingStack with a Kubeconfig entry and one cloud identity entry."""
    entry: dict[str, Any] = {"type": identity_type, "name": secret, "key": key}
    if secret_namespace is not None:
        entry["namespace"] = secret_namespace
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "secrets": [
                {"type": "Kubeconfig", "name": kubeconfig_secret, "key": "kubeconfig"},
                entry,
            ],
            **(spec or {}),
        },
    }


def assert_never_said(secrets: Iterable[str], **captured: str) -> None:
    """Fail naming where, if any secret appears in any captured text (not the secret)."""
    for name, text in captured.items():
        for i, secret in enumerate(s for s in secrets if s):
            assert secret not in text, f"secret #{i} appears in {name}"


def pem_body(pem: str) -> list[str]:
    """The base64 lines of a PEM key: any one of them in output is a leak."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def claim_released(env: TestEnv) -> bool:
    with client_for(env) as target:
        try:
            target.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        except ApiError as err:
            return err.status.code == 404
    return False
