"""The one error classifier: any exception a reconcile or a teardown meets, as a kind.

What to do about a failure (its Ready reason, whether it is a wait, what a
teardown says) is decided in ``modelplane.plan.decisions`` from the kind
alone, so reconcile and teardown cannot map one error two ways.

The access layer knows its own errors (an API server's answer, a transport
that failed, a refused address). Errors of the layers above it (helm,
the claim, credentials, identities) are ``KnownError``s that name their
kind where they are defined, so this module imports none of those layers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from modelplane.faults import ErrorKind as ErrorKind
from modelplane.faults import Fault as Fault
from modelplane.faults import KnownError as KnownError
from modelplane.kube.address import AddressDenied
from modelplane.kube.bounded import AnswerTooLarge
from modelplane.kube.client import ApiStatusError, OverBudget, TargetError

# The StatusCause the API server's NamespaceLifecycle admission adds to its
# 403 for a write into a namespace that is being deleted (k8s.io/api
# core/v1 NamespaceTerminatingCause). Structured, so the message's wording
# does not matter.
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"

_BY_STATUS = {
    401: ErrorKind.UNAUTHORIZED,
    403: ErrorKind.FORBIDDEN,
    404: ErrorKind.NOT_FOUND,
    409: ErrorKind.CONFLICT,
    429: ErrorKind.SETTLING,
}


def by_status(status: int, causes: Iterable[str] = ()) -> ErrorKind:
    """The kind of an error answer with HTTP ``status`` and these StatusCause reasons."""
    if status == 403 and NAMESPACE_TERMINATING_CAUSE in set(causes):
        return ErrorKind.NAMESPACE_TERMINATING
    return _BY_STATUS.get(status, ErrorKind.ANSWERED)


def _causes(err: ApiError) -> list[str]:
    details: Any = getattr(err.status, "details", None)
    return [str(c.reason) for c in (getattr(details, "causes", None) or []) if c.reason]


def classify(err: BaseException) -> Fault:
    """The kind of ``err``; ``UNEXPECTED`` for anything no rule names."""
    if isinstance(err, KnownError):
        return Fault(err.kind, reason=err.condition_reason())
    # Before the transport errors: a refused address is a ConnectError too.
    if isinstance(err, AddressDenied):
        return Fault(ErrorKind.ADDRESS_DENIED)
    if isinstance(err, ApiError):
        code = err.status.code
        if code is None:
            return Fault(ErrorKind.ANSWERED)
        return Fault(by_status(code, _causes(err)), status=code)
    if isinstance(err, ApiStatusError):
        return Fault(by_status(err.status), status=err.status)
    if isinstance(err, httpx2.HTTPStatusError):
        code = err.response.status_code
        return Fault(by_status(code), status=code)
    # Before the other TargetErrors: the target answered, and too much.
    if isinstance(err, OverBudget):
        return Fault(ErrorKind.OVER_BUDGET)
    # A typed read's answer past the transport's bound (``kube.bounded``):
    # the target answered, with more than the operator reads of one answer.
    if isinstance(err, AnswerTooLarge):
        return Fault(ErrorKind.ANSWERED)
    if isinstance(err, (TargetError, httpx2.HTTPError, OSError, asyncio.TimeoutError)):
        return Fault(ErrorKind.UNREACHABLE)
    return Fault(ErrorKind.UNEXPECTED)
