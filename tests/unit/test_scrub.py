"""The one secret scrubber: each rule, and that no rule drops ordinary text."""

from __future__ import annotations

import re
import re._parser as sre  # the parse tree of a pattern, to read its repeats
from typing import Any

import pytest

from modelplane.kube import scrub as scrub_module
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
        # a JWT whose header starts inside a run keeps what comes before it
        ("id xxeyJa.b.c end", [], f"id xx{REDACTED} end"),
        # a header of no length after the run's only eyJ is no JWT
        ("x.abeyJ.c.d", [], None),
        # six long parts are two tokens; a seventh alone stays
        (
            "aaaaaaaa.bbbbbbbb.cccccccc.dddddddd.eeeeeeee.ffffffff.gggggggg",
            [],
            f"{REDACTED}.{REDACTED}.gggggggg",
        ),
        # a scheme that starts inside its run, after a dot: the run stays
        ("see x_a.http://u:p@h/x", [], "see x_a.http://h/x"),
        # a run that starts with no word boundary before it holds no scheme
        ("see _http://u:p@h/x", [], None),
        # the long runs that made the old shapes quadratic, then a real token
        ("a" * 32_000 + " " + JWT, [], "a" * 32_000 + " " + REDACTED),
        ("eyJ" * 10_000 + ". " + JWT, [], "eyJ" * 10_000 + ". " + REDACTED),
        ("a." * 16_000 + " https://u:p@h/", [], "a." * 16_000 + " https://h/"),
    ],
)
def test_scrub(text: str, secrets: list[str], expected: str | None) -> None:
    assert scrub(text, secrets) == (text if expected is None else expected)


# Why scrubbing is linear in the text, as two rules every shape keeps (a
# duration would prove nothing on a shared machine; bench/bench_scrub.py
# prints the figures). First: a match begins only where a run of the shape's
# characters begins, so one long run is read from one place, not from each of
# its positions (32k characters of base64url were 32k attempts each reading
# to the run's end). Second: no repeat gives back what it took (possessive,
# or inside an atomic group), so an attempt reads each character once.
SHAPES = {
    name: getattr(scrub_module, name) for name in ("_PEM", "_JWT", "_JWT_SHAPED", "_USERINFO")
}


@pytest.mark.parametrize(
    ("name", "text", "inside"),
    [
        ("_JWT", "xeyJa.b.c", 1),
        ("_JWT", "eyJeyJa.b.c", 3),
        ("_JWT_SHAPED", "abcdefghi.ijklmnop.qrstuvwx", 1),
        ("_USERINFO", "a.http://u:p@h/", 2),
    ],
)
def test_a_shape_never_begins_inside_a_run(name: str, text: str, inside: int) -> None:
    shape = SHAPES[name]
    assert shape.match(text) is not None  # the run from its start is a match
    assert shape.match(text, inside) is None


def _giving_back(node: Any, atomic: bool = False) -> list[str]:
    """The unbounded repeats under ``node`` of a parse tree that may give back."""
    if isinstance(node, sre.SubPattern):
        found = []
        for op, arg in node:
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and arg[1] == sre.MAXREPEAT and not atomic:
                found.append(f"{op} of {arg[2]}")
            found += _giving_back(arg, atomic or op is sre.ATOMIC_GROUP)
        return found
    if isinstance(node, list | tuple):  # a branch's alternatives, a group's pattern
        return [repeat for child in node for repeat in _giving_back(child, atomic)]
    return []


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_no_repeat_of_a_shape_gives_back(name: str) -> None:
    shape: re.Pattern[str] = SHAPES[name]
    assert _giving_back(sre.parse(shape.pattern, shape.flags)) == []


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
