"""What of the target's gateway the hub may publish: its address and its CA.

Decisions on observed text, so the operator and ``render --observed`` take
them alike. The address must be shaped like one. The CA must be PEM
``CERTIFICATE`` blocks only, that parse as X.509, re-encoded from what was
parsed, and within the status field's limit. Anything else (a private key a
tenant or a mistake put there, text that is no certificate) publishes
nothing, and the reason says what kind of thing was found, never any of it.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from modelplane.api.status_limits import CA_CERTIFICATE, GATEWAY_MESSAGE, string_limit
from modelplane.catalog.configuration import CA_KEY, CLUSTER_CA, GATEWAY_NAME, NS
from modelplane.plan.observed import ObservedCondition
from modelplane.untrusted import printable
from modelplane.vocabulary import ReadyReason

# An address as the Gateway API's status carries one (an IP or a hostname,
# at most 253 characters); anything else is not published.
_ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:\-\[\]%]{0,252}")
# The CA the status publishes: at most this many certificates, and no more
# than the status field holds (ServingStack status.gateway.caCertificate).
MAX_CA_CERTIFICATES = 16
MAX_CA_BYTES = string_limit(CA_CERTIFICATE)
_PEM_BLOCK = re.compile(
    r"-----BEGIN ([A-Z0-9 ]{1,40})-----\r?\n(.*?)-----END \1-----[ \t]*(?:\r?\n|$)", re.DOTALL
)


def published_address(addresses: Sequence[str]) -> str | None:
    """The first of the Gateway's ``addresses`` shaped like an address; None when none is."""
    return next((a for a in addresses if _ADDRESS.fullmatch(a)), None)


def published_ca(text: str) -> tuple[str | None, str | None]:
    """The CA certificates in the Bundle ConfigMap's ``text``, or why none are published.

    Only PEM ``CERTIFICATE`` blocks that parse as X.509 certificates, and
    nothing else: a private key, or any other text, means the ConfigMap is
    not what trust-manager writes for the Bundle, and none of it reaches the
    hub. The certificates are re-encoded from what was parsed.
    """
    where = f"ConfigMap {NS}/{CLUSTER_CA} key {CA_KEY}"
    if len(text) > 4 * MAX_CA_BYTES:
        return None, f"{where} holds {len(text)} bytes, over the limit of {4 * MAX_CA_BYTES}"
    blocks: list[tuple[str, str]] = []
    rest: list[str] = []
    end = 0
    for match in _PEM_BLOCK.finditer(text):
        rest.append(text[end : match.start()])
        blocks.append((match.group(1), match.group(0)))
        end = match.end()
    rest.append(text[end:])
    kinds = {kind for kind, _ in blocks if kind != "CERTIFICATE"}
    if any("PRIVATE KEY" in kind for kind in kinds):
        return None, f"{where} holds a PRIVATE KEY block: the CA is not published"
    if kinds:
        return None, f"{where} holds a block other than CERTIFICATE: the CA is not published"
    if any(part.strip() for part in rest):
        return None, f"{where} holds text outside PEM blocks: the CA is not published"
    if len(blocks) > MAX_CA_CERTIFICATES:
        return None, f"{where} holds more than {MAX_CA_CERTIFICATES} certificates"
    pem: list[str] = []
    for index, (_, block) in enumerate(blocks):
        try:
            cert = x509.load_pem_x509_certificate(block.encode("ascii"))
        except (ValueError, UnicodeEncodeError, binascii.Error):
            return None, f"{where}: block {index + 1} is not a certificate"
        pem.append(cert.public_bytes(Encoding.PEM).decode("ascii"))
    published = "".join(pem)
    if len(published) > MAX_CA_BYTES:
        return None, f"{where} holds {len(published)} bytes of certificates, over {MAX_CA_BYTES}"
    return published or None, None


# Ready's reason in Managed mode while the product's Gateway does not serve.
GATEWAY_NOT_PROGRAMMED = ReadyReason.GATEWAY_NOT_PROGRAMMED
# The Gateway API's conditions a serving Gateway has, in the order a
# controller sets them: accepted (the config is valid), then programmed (the
# data plane has it). gateway-api apis/v1/gateway_types.go GatewayConditionType.
_SERVING = ("Accepted", "Programmed")


def not_programmed(conditions: Sequence[ObservedCondition]) -> str | None:
    """Why the product's Gateway does not serve, from its controller's conditions; None if it does.

    A Gateway with neither condition is not judged: the upstream CRD defaults
    both to Unknown ("Waiting for controller"), so a Gateway without them is
    under a CRD that defaults nothing and no controller has written yet, and
    nothing here can tell a slow controller from none. Once a controller
    speaks, both must be True; Unknown is not serving yet.
    """
    by_type = {c.type: c for c in conditions if c.type in _SERVING}
    if not by_type:
        return None
    for kind in _SERVING:
        c = by_type.get(kind)
        if c is not None and c.status == "True":
            continue
        said = (
            f"{kind} is {c.status}" + (f" ({c.reason})" if c.reason else "")
            if c is not None
            else f"it has no {kind} condition"
        )
        message = f": {c.message}" if c is not None and c.message else ""
        return printable(
            f"Gateway {NS}/{GATEWAY_NAME} is not {kind.lower()}: {said}{message}", GATEWAY_MESSAGE
        )
    return None


BUNDLE_TITLE = f"trust-manager has synced Bundle {CLUSTER_CA}"


def bundle_finding(conditions: Sequence[ObservedCondition]) -> tuple[bool, str] | None:
    """Whether the product's Bundle is synced, and what says so; None if nothing said yet."""
    synced = next((c for c in conditions if c.type == "Synced"), None)
    if synced is None:
        return None
    if synced.status == "True":
        return True, f"Bundle {CLUSTER_CA} is Synced"
    said = f"Synced is {synced.status}" + (f" ({synced.reason})" if synced.reason else "")
    message = f": {synced.message}" if synced.message else ""
    return False, printable(
        f"Bundle {CLUSTER_CA} is not synced, so the gateway's CA does not reach "
        f"{NS}/{CLUSTER_CA}: {said}{message}",
        GATEWAY_MESSAGE,
    )
