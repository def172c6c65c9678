"""The one rule for taking secrets out of text that quotes a service.

A token service, an STS or a gRPC exchange may echo what it was sent (an
assertion, a key, a token) in its error text, and that text goes to a log, an
Event or a status. Every message built from such text passes ``scrub``, with
the same rules wherever it is called: the secrets the caller knows, anything
shaped like a JWT, and any PEM block (a private key a service quotes back).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
# Shorter secrets are not replaced: they would match ordinary words of the
# message, and no credential the product handles is that short.
MIN_SECRET = 4

# A PEM block, or its start when the text was cut off inside it.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|$)", re.DOTALL)
# A JWT: a base64url JSON header (``eyJ``) and two more parts, the last maybe
# empty (an unsigned token) ...
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
# ... or any three long base64url parts, whatever the header's encoding.
_JWT_SHAPED = re.compile(r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secrets, PEM blocks, or anything shaped like a JWT."""
    # Longest first, so a secret that holds another is replaced whole.
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _PEM.sub(REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    return _JWT_SHAPED.sub(REDACTED, text)
