"""The one secret scrubber: each rule, and that no rule drops ordinary text."""

from __future__ import annotations

import pytest

from modelplane.kube.scrub import REDACTED, scrub

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJlLWJ5dGVz"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        # the secrets the caller names
        ("key ABCDEFGH was refused", ["ABCDEFGH"], f"key {REDACTED} was refused"),
        # a secret too short to be told from a word is left alone
        ("bad id abc", ["abc"], "bad id abc"),
        # a secret holding another is replaced whole, not in pieces
        ("token SECRET-LONGER", ["SECRET", "SECRET-LONGER"], f"token {REDACTED}"),
        # a JWT, signed ...
        (f"assertion {JWT} refused", [], f"assertion {REDACTED} refused"),
        # ... or unsigned, however short its parts
        ("bad eyJa.eyJb. here", [], f"bad {REDACTED} here"),
        # three long base64url parts, whatever the header
        ("t abcdefgh.ijklmnop.qrstuvwx end", [], f"t {REDACTED} end"),
        # a whole PEM block
        (f"quoted {KEY} back", [], f"quoted {REDACTED} back"),
        # a PEM block cut off by the service: everything after BEGIN goes
        ("quoted -----BEGIN RSA PRIVATE KEY-----\nMIIEow", [], f"quoted {REDACTED}"),
        # ordinary text, version numbers and host names stay
        ("STS at sts.us-east-1.amazonaws.com v1.2.3: denied", [], None),
        ("", ["ABCDEFGH"], ""),
    ],
)
def test_scrub(text: str, secrets: list[str], expected: str | None) -> None:
    assert scrub(text, secrets) == (text if expected is None else expected)


def test_every_identity_provider_uses_the_one_scrubber() -> None:
    from modelplane.credentials.identity import aws, google, nebius

    assert aws.scrub is nebius.scrub is google.scrub is scrub
