"""The contract every cloud identity provider implements.

A provider turns the data of the identity Secret into short-lived bearer
tokens for one target cluster. The kubeconfig still gives the server address
and CA; the identity only ever gives the credential, and a failure never
falls back to the kubeconfig's own credentials.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from modelplane.kube.address import DEFAULT_DENIED, IPNetwork
from modelplane.kube.errors import ErrorKind, KnownError
from modelplane.untrusted import load_json
from modelplane.vocabulary import IdentityFailure as IdentityFailure


class IdentityError(KnownError):
    """An identity gave no token.

    ``message`` is safe to put in status, events and logs: the provider's own
    error with every secret (key, token, assertion, presigned URL) removed.
    """

    kind = ErrorKind.IDENTITY

    def __init__(self, failure: IdentityFailure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message

    def condition_reason(self) -> str:
        return self.failure.value


@dataclass(frozen=True)
class Token:
    """A bearer token and when it stops being accepted (seconds since the epoch)."""

    value: str = field(repr=False)
    expires_at: float


@dataclass(frozen=True)
class TargetInfo:
    """What a provider may need to know about the target it mints for."""

    # The kubeconfig's cluster entry name (an EKS cluster ARN is accepted there).
    cluster_name: str
    # The target API server URL, from the kubeconfig.
    server: str


@dataclass(frozen=True)
class Endpoints:
    """Token service overrides (regional or FIPS endpoints, and tests on loopback).

    ``None`` means the provider's default (for Google, the key JSON's own
    ``token_uri`` always decides).
    """

    aws_sts: str | None = None
    aws_region: str | None = None
    nebius_token_exchange: str | None = None
    # Whether an AWS identity may name the operator pod's own projected token
    # (``webIdentityTokenFile``): off unless ``--allow-operator-identity``,
    # since anyone who may write a Secret and a ServingStack would otherwise
    # act as the operator's IAM role.
    allow_operator_identity: bool = False
    # Addresses no token request may go to: a token endpoint is untrusted
    # input too (a key's token_uri is whatever the Secret's writer put
    # there), so it gets the operator's --deny-target-cidr list.
    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED


class Minter(Protocol):
    """Mints tokens for one identity and one target; callers cache and refresh."""

    async def mint(self) -> Token:
        """A fresh token, or ``IdentityError``. Never logs a secret."""
        ...


class MinterFactory(Protocol):
    def __call__(self, credential: bytes, target: TargetInfo, endpoints: Endpoints) -> Minter:
        """Build a minter from the value under the identity entry's ``key`` (decoded).

        Raises ``IdentityError(INVALID, ...)`` for data that cannot be used.
        """
        ...


# A key name is printed only if it looks like a name: a key may be data too.
_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,40}")


def json_fields(
    credential: bytes, fields: Collection[str], *, kind: str, expected: str
) -> dict[str, str]:
    """An identity Secret's value as a JSON object of string fields, each one of ``fields``.

    A null field counts as absent. ``IdentityError(INVALID)``, prefixed with
    ``kind`` (the entry type), names the field at fault and never a value:
    any of them may be the secret itself. ``expected`` says what belongs there.
    """

    def invalid(message: str) -> IdentityError:
        return IdentityError(IdentityFailure.INVALID, f"{kind}: {message}")

    try:
        doc: Any = load_json(credential.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise invalid(f"the secret value is not a JSON object (expected {expected})") from None
    if not isinstance(doc, dict):
        raise invalid(f"the secret value is not a JSON object (expected {expected})")
    unknown = sorted(str(k) for k in doc if k not in fields)
    if unknown:
        shown = [k for k in unknown if _KEY_NAME.fullmatch(k)]
        raise invalid(
            "unknown field(s) "
            + (", ".join(shown) if shown else "(names not shown)")
            + f"; expected {expected}"
        )
    present = {k: v for k, v in doc.items() if v is not None}
    for name in sorted(present):
        if not isinstance(present[name], str):
            raise invalid(f"field {name} must be a string")
    return present
