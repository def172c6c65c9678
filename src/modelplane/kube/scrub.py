"""The one rule for taking secrets out of text that quotes a service.

A token service, an STS or a gRPC exchange may echo what it was sent (an
assertion, a key, a token) in its error text, and that text goes to a log, an
Event or a status. Every message built from such text passes ``scrub``, with
the same rules wherever it is called: the secrets the caller knows, anything
shaped like a JWT, any PEM block (a private key a service quotes back), and
the user and password of any URL. Text that names Kubernetes objects
(helm's errors, any error the operator reports) passes ``redact``: the
secrets the caller knows and URLs' userinfo (a mirror's URL may carry them,
and helm quotes the repository it was given), without the JWT shape, which
a long dotted resource name matches.

``shown_url`` is the same rule for one URL the operator names itself: the
URL without its userinfo, which is how every URL of a mirror is shown.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "[redacted]"
# Shorter secrets are not replaced: they would match ordinary words of the
# message, and no credential the product handles is that short.
MIN_SECRET = 4

# Each shape below is written so that matching it is linear in the text: a
# match may begin only where a run of its characters begins (a lookbehind),
# and no repeat gives back what it took (possessive repeats, atomic groups).
# Otherwise every position of one long run starts an attempt that reads to
# the run's end: 32k characters of base64url took over a second. The shapes
# match what they matched before; tests/unit/test_scrub.py holds both rules.
_TOKEN = "[A-Za-z0-9_-]"
_SCHEME = "[A-Za-z0-9+.-]"
# A PEM block, or its start when the text was cut off inside it.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]++-----(?>.*?(?:-----END [A-Z0-9 ]++-----|$))", re.DOTALL)
# A JWT: a base64url JSON header (``eyJ``) and two more parts, the last maybe
# empty (an unsigned token) ... The header starts at the first ``eyJ`` of its
# run (group 1 keeps what comes before), the longest header the run gives.
_JWT = re.compile(rf"(?<!{_TOKEN})(?>({_TOKEN}*?)eyJ){_TOKEN}++\.{_TOKEN}++\.{_TOKEN}*+")
# ... or any three long base64url parts, whatever the header's encoding.
_JWT_SHAPED = re.compile(rf"(?<!{_TOKEN}){_TOKEN}{{8,}}+\.{_TOKEN}{{8,}}+\.{_TOKEN}{{8,}}+")
# The userinfo of a URL in free text: everything between ``scheme://`` and the
# last ``@`` before the host ends (a password may hold an unescaped ``@``).
# The scheme starts at the first letter of its run that begins a word; group 1
# is the run up to ``://``, which stays.
_USERINFO = re.compile(
    rf"(?<!{_SCHEME})((?>{_SCHEME}*?\b[A-Za-z]){_SCHEME}*+://)(?:[^\s/?#\"'<>@]*+@)++"
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secrets, URLs' userinfo, PEM blocks or JWT-shaped text.

    For what a token service says, where a token or key is what it may
    quote back. The JWT shape also matches a dotted name of three long
    parts (``inferencepools.inference.networking``), so text that names
    Kubernetes resources passes ``redact`` instead.
    """
    text = redact(text, secrets)
    text = _PEM.sub(REDACTED, text)
    text = _JWT.sub(lambda match: match.group(1) + REDACTED, text)
    return _JWT_SHAPED.sub(REDACTED, text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secrets and without any URL's user and password."""
    # Longest first, so a secret that holds another is replaced whole.
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _USERINFO.sub(r"\1", text)


def shown_url(url: str) -> str:
    """``url`` without user and password, which a mirror's URL may carry."""
    try:
        parsed = urlsplit(url)
    except ValueError:  # a bracketed host that is no IPv6 address: not a URL to parse
        return _USERINFO.sub(r"\1", url)
    if "@" not in parsed.netloc:
        return url
    return urlunsplit(parsed._replace(netloc=parsed.netloc.rpartition("@")[2]))


def url_secrets(url: str) -> tuple[str, ...]:
    """What of ``url`` is secret, as written and decoded: for ``redact``'s ``secrets``.

    The userinfo whole and the password alone, so that a message that
    quotes either (or quotes the URL so mangled that no URL rule finds it)
    loses them.
    """
    match = _USERINFO.match(url)
    # The pattern lets a scheme start inside its run (``+a://``): a URL's
    # scheme starts at its first character.
    if match is None or match.group(1)[0] not in string.ascii_letters:
        return ()
    userinfo = match.group(0)[len(match.group(1)) : -1]
    password = userinfo.partition(":")[2]
    found = {userinfo, password, unquote(userinfo), unquote(password)}
    return tuple(sorted(s for s in found if s))
