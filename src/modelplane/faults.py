"""What kind of failure an error is, as values every layer can name.

``kube.errors.classify`` turns an exception into a ``Fault``; the layers
above the access layer (helm, the claim, credentials, identities) raise
``KnownError``s that name their own kind; ``plan.decisions`` decides what
to do from the kind alone. Kept below all three, and free of any client,
so that the decisions stay pure functions of values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ErrorKind(StrEnum):
    """What kind of failure an exception is."""

    # No answer: connection refused, DNS, TLS, timeout, or an answer that is no API.
    UNREACHABLE = "unreachable"
    UNAUTHORIZED = "unauthorized"  # 401
    FORBIDDEN = "forbidden"  # 403, other than a namespace being deleted
    # A 403 because the namespace is being deleted: nothing may be created in
    # it until it is gone, then it can be made again. A wait, not a refusal.
    NAMESPACE_TERMINATING = "namespace-terminating"
    NOT_FOUND = "not-found"  # 404
    CONFLICT = "conflict"  # 409
    SETTLING = "settling"  # 429: the server asks to come back later
    ANSWERED = "answered"  # any other error status
    # A collection past its budget of objects or bytes (``kube.budget``):
    # the target holds more than the operator reads, which waiting will not mend.
    OVER_BUDGET = "over-budget"
    ADDRESS_DENIED = "address-denied"
    WEBHOOK_NOT_READY = "webhook-not-ready"
    # Pods hold claims a DRA driver allocated, so its release is not
    # uninstalled yet (plan.claims): a wait, until they go or the timeout.
    CLAIMS_HELD = "claims-held"
    HELM_FAILED = "helm-failed"
    CLAIM_CONTENDED = "claim-contended"
    IDENTITY = "identity"
    CREDENTIALS = "credentials"
    INVALID = "invalid"  # input that will not get better by itself
    # A release's Helm storage on the target is not what the operator wrote,
    # and helm is not run on it until a person removes it (plan.release_trust).
    STORAGE_TAMPERED = "storage-tampered"
    UNEXPECTED = "unexpected"  # a bug, or a case no one has named yet


class KnownError(Exception):
    """An error of a layer above the access layer, naming its own kind.

    ``condition_reason`` is the Ready reason the error carries itself, for
    the kinds whose reason says more than the kind (which Secret key, which
    identity failure); None for the others.
    """

    kind: ClassVar[ErrorKind] = ErrorKind.UNEXPECTED

    def condition_reason(self) -> str | None:
        return None


@dataclass(frozen=True)
class Fault:
    """An exception, classified."""

    kind: ErrorKind
    # The HTTP status of an answer, when there was one.
    status: int | None = None
    # The error's own Ready reason (see ``KnownError.condition_reason``).
    reason: str | None = None
