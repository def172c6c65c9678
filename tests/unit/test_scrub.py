"""The one secret scrubber: each rule, and that no rule drops ordinary text."""

from __future__ import annotations

import pytest

from modelplane.kube.scrub import REDACTED, redact, scrub, shown_url, url_secrets

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
        # a URL's user and password, as helm quotes the repository it was given
        (
            'Error: chart "x" not found in https://u:t0ken@mirror.example/charts repository',
            [],
            'Error: chart "x" not found in https://mirror.example/charts repository',
        ),
        # ... quoted, with an unescaped @ in the password, or as Go redacts it
        (
            'looks like "http://u:p@ss@127.0.0.1:8/" is not',
            [],
            'looks like "http://127.0.0.1:8/" is not',
        ),
        ("Get https://u:xxxxx@m.example/index.yaml", [], "Get https://m.example/index.yaml"),
        # an address that is not a URL's userinfo stays
        ("mail ops@example.com about https://m.example/a@b", [], None),
        ("", ["ABCDEFGH"], ""),
    ],
)
def test_scrub(text: str, secrets: list[str], expected: str | None) -> None:
    assert scrub(text, secrets) == (text if expected is None else expected)


def test_every_identity_provider_uses_the_one_scrubber() -> None:
    from modelplane.credentials.identity import aws, google, nebius

    assert aws.scrub is nebius.scrub is google.scrub is scrub


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:tok%40en@mirror.example/charts", "https://mirror.example/charts"),
        ("oci://u:p@registry.example/charts", "oci://registry.example/charts"),
        ("https://mirror.example/charts", "https://mirror.example/charts"),
        # not a URL urlsplit takes: the userinfo still goes
        ("http://u:secret@[not-v6/x", "http://[not-v6/x"),
    ],
)
def test_shown_url_has_no_userinfo(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_url_secrets_are_the_userinfo_and_password_as_written_and_decoded() -> None:
    secrets = url_secrets("https://user:tok%40en@mirror.example/x")
    assert set(secrets) == {"user:tok%40en", "user:tok@en", "tok%40en", "tok@en"}
    mangled = "failed: invalid port in user:tok@en@mirror.example"
    assert "tok@en" not in scrub(mangled, secrets)
    assert url_secrets("https://mirror.example/x") == ()


def test_redact_takes_known_secrets_and_userinfo_and_leaves_dotted_names() -> None:
    text = (
        "https://u:t0ken@m.example/c: t0ken refused for inferencepools.inference.networking.k8s.io"
    )
    assert redact(text, ["t0ken"]) == (
        f"https://m.example/c: {REDACTED} refused for inferencepools.inference.networking.k8s.io"
    )
