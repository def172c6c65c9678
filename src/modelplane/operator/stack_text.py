"""What a stack's conditions say: a fault in words, and the first error of a spec."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from modelplane.api.models import ServingStack
from modelplane.credentials.identity.base import IdentityError
from modelplane.kube.answers import describe_error
from modelplane.kube.client import ApiStatusError
from modelplane.kube.errors import ErrorKind, Fault

log = logging.getLogger("modelplane.operator")


def explain(fault: Fault, err: BaseException, stack: ServingStack) -> str:
    """What Ready (or Teardown) says about a fault that stopped the stack."""
    if fault.kind is ErrorKind.IDENTITY and isinstance(err, IdentityError):
        entry = stack.spec.cloud_identity
        return f"the {entry.type if entry else 'cloud'} identity: {err.message}"
    if fault.kind is ErrorKind.NAMESPACE_TERMINATING:
        return (
            "waiting for a namespace on the target to finish terminating: nothing can be "
            "created in it until it is gone, and it is made again then (the target "
            f"answered {describe_error(err)})"
        )
    if fault.kind is ErrorKind.UNREACHABLE:
        return f"cannot reach the target API server: {describe_error(err)}"
    if fault.status is not None:
        answered = f": {err}" if isinstance(err, ApiStatusError) else f" {describe_error(err)}"
        return _refused_identity(stack, fault.status) or f"the target API server answered{answered}"
    if fault.kind in (ErrorKind.CREDENTIALS, ErrorKind.INVALID, ErrorKind.ADDRESS_DENIED):
        return str(err)
    return describe_error(err)


def _refused_identity(stack: ServingStack, code: int | None) -> str | None:
    """Say a 401 that stood after a fresh token as the identity's, or None otherwise.

    The token service vouched for the identity, so the target does not take
    it: most often the identity has no access to this cluster, or (EKS) the
    token was made for another cluster name than the target's own.
    """
    entry = stack.spec.cloud_identity
    if entry is None or code != 401:
        return None
    where = f"{entry.namespace}/{entry.name}" if entry.namespace else entry.name
    return (
        f"the target API server refused the {entry.type} identity (Secret {where}, key "
        f"{entry.key}) with 401 Unauthorized, also with a freshly minted token: give the "
        "identity access to this cluster (an EKS access entry for the role, RBAC for a "
        "GKE service account) and check that the kubeconfig's cluster name (or the "
        "identity's clusterName) is the cluster's own"
    )


def without_status(body: dict[str, Any]) -> dict[str, Any]:
    """The object as the models read it: its status is the operator's, never validated."""
    return {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}


def first_error(err: ValidationError) -> str:
    """The first of a spec's validation errors, as ``field.path: message``."""
    first = err.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
