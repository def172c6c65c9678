"""Asking a registry for an image (actions.registry): challenges, credentials, the lookups."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable

import httpx2
import pytest

from modelplane.actions.registry import (
    MANIFEST_ACCEPT,
    MAX_TOKEN_BYTES,
    Challenge,
    Credentials,
    LookupCache,
    Registry,
    chosen_challenge,
    config_of,
    credentials_for,
    parse_challenges,
)
from modelplane.plan.mirror_images import Answer

HUB = 'Bearer realm="https://auth.example/token",service="registry.example",scope="x"'


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (HUB, [Challenge("bearer", {"realm": "https://auth.example/token",
                                    "service": "registry.example", "scope": "x"})]),
        ('Basic realm="Registry Realm"', [Challenge("basic", {"realm": "Registry Realm"})]),
        # Two challenges in one header; a token value; an escaped quote.
        ('Basic realm=r, Bearer realm="https://a/t",service="s\\"q"',
         [Challenge("basic", {"realm": "r"}),
          Challenge("bearer", {"realm": "https://a/t", "service": 's"q'})]),
        # A comma inside quotes is the value's.
        ('Bearer realm="https://a/t?x=1,2"', [Challenge("bearer", {"realm": "https://a/t?x=1,2"})]),
        # The first value of a key given twice stands.
        ('Bearer realm="https://a/t",realm="https://evil/t"',
         [Challenge("bearer", {"realm": "https://a/t"})]),
        ("", []),
        # An unterminated quote ends the parse, with nothing read from it.
        ('Bearer realm="https://a/t', [Challenge("bearer", {})]),
    ],
)  # fmt: skip
def test_a_challenge_is_read(header: str, expected: list[Challenge]) -> None:
    assert parse_challenges(header) == expected


@pytest.mark.parametrize(
    ("challenges", "chosen"),
    [
        ([Challenge("basic", {}), Challenge("bearer", {"realm": "https://a"})], "bearer"),
        # A Bearer challenge with no realm names no token service.
        ([Challenge("bearer", {}), Challenge("basic", {})], "basic"),
        ([Challenge("negotiate", {})], None),
    ],
)
def test_bearer_is_answered_before_basic(challenges: list[Challenge], chosen: str | None) -> None:
    found = chosen_challenge(challenges)
    assert (found.scheme if found else None) == chosen


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


CONFIG = {
    "auths": {
        "https://mirror.internal": {"auth": _auth("whole", "p1")},
        "mirror.internal/team": {"username": "team", "password": "p2"},
        "mirror.internal:5000": {"auth": _auth("port", "p3")},
        "*.corp.example": {"auth": _auth("glob", "p4")},
        "https://index.docker.io/v1/": {"auth": _auth("hub", "p5")},
        "broken.example": {"auth": "not base64!"},
    }
}


@pytest.mark.parametrize(
    ("registry", "name", "user"),
    [
        ("mirror.internal", "jetstack/x", "whole"),
        # The longest path that prefixes the repository wins.
        ("mirror.internal", "team/x", "team"),
        ("mirror.internal", "teams/x", "whole"),
        # A port is part of the host.
        ("mirror.internal:5000", "x", "port"),
        ("MIRROR.internal", "x", "whole"),
        # A * stands for one label only.
        ("reg.corp.example", "x", "glob"),
        ("a.reg.corp.example", "x", None),
        ("index.docker.io", "library/x", "hub"),
        ("broken.example", "x", None),
        ("elsewhere.example", "x", None),
    ],
)
def test_the_pull_secrets_credentials_for_a_registry(
    registry: str, name: str, user: str | None
) -> None:
    found = credentials_for(CONFIG, registry, name)
    assert (found.username if found else None) == user


def test_a_dockercfg_secret_holds_the_entries_without_auths() -> None:
    found = credentials_for({"mirror.internal": {"auth": _auth("u", PW)}}, "mirror.internal", "x")
    assert found == Credentials("u", PW)


@pytest.mark.parametrize(
    ("data", "user"),
    [
        ({".dockerconfigjson": base64.b64encode(json.dumps(CONFIG).encode()).decode()}, "whole"),
        ({".dockercfg": base64.b64encode(json.dumps(CONFIG["auths"]).encode()).decode()}, "whole"),
        ({".dockerconfigjson": "%%%"}, None),
        ({".dockerconfigjson": base64.b64encode(b"[1, 2]").decode()}, None),
        ({".dockerconfigjson": base64.b64encode(b"{" * 100_000).decode()}, None),
        ({}, None),
    ],
)
def test_a_pull_secrets_config_is_read_within_bounds(
    data: dict[str, str], user: str | None
) -> None:
    config = config_of(data)
    found = credentials_for(config, "mirror.internal", "x") if config else None
    assert (found.username if found else None) == user


def test_credentials_never_show_their_password() -> None:
    assert "secret" not in repr(Credentials("u", "secret"))


# ---- the lookups, against a scripted registry -------------------------------------------

Handler = Callable[[httpx2.Request], httpx2.Response]
MIRROR = "127.0.0.1:5000"
PW = "s3cret-pw"


def _lookup(
    handler: Handler, images: list[str], creds: Credentials | None = None, **kw: object
) -> tuple[list[tuple[str, Answer, str]], Registry]:
    registry = Registry(transport=httpx2.MockTransport(handler), **kw)  # type: ignore[arg-type]
    found = asyncio.run(registry.lookup_all(images, lambda r, n: creds))
    return [(x.image, x.answer, x.detail) for x in found], registry


def _bearer_registry(
    seen: list[httpx2.Request], token_body: bytes = b'{"token": "t0k"}'
) -> Handler:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        if request.url.path == "/token":
            if request.headers.get("authorization") != "Basic " + _auth("u", PW):
                return httpx2.Response(401)
            return httpx2.Response(200, content=token_body)
        if request.headers.get("authorization") != "Bearer t0k":
            challenge = f'Bearer realm="https://{MIRROR}/token",service="mirror"'
            return httpx2.Response(401, headers={"www-authenticate": challenge})
        if request.url.path.endswith("/manifests/v1"):
            return httpx2.Response(200)
        return httpx2.Response(404)

    return handler


def test_a_bearer_registry_is_asked_with_a_token_for_the_images_scope() -> None:
    seen: list[httpx2.Request] = []
    found, registry = _lookup(
        _bearer_registry(seen), [f"{MIRROR}/a/b:v1", f"{MIRROR}/a/c:v2"], Credentials("u", PW)
    )
    assert [(i, a) for i, a, _ in found] == [
        (f"{MIRROR}/a/b:v1", Answer.FOUND),
        (f"{MIRROR}/a/c:v2", Answer.MISSING),
    ]
    heads = [r for r in seen if r.method == "HEAD"]
    assert {r.headers["accept"] for r in heads} == {MANIFEST_ACCEPT}
    tokens = [r for r in seen if r.url.path == "/token"]
    assert sorted(r.url.params["scope"] for r in tokens) == [
        "repository:a/b:pull",
        "repository:a/c:pull",
    ]
    assert {r.url.params["service"] for r in tokens} == {"mirror"}
    assert registry.sent == 2


def test_answers_and_tokens_are_kept_so_a_second_stack_asks_nothing() -> None:
    seen: list[httpx2.Request] = []
    handler = _bearer_registry(seen)
    registry = Registry(transport=httpx2.MockTransport(handler))
    creds = Credentials("u", PW)
    for _ in range(3):
        asyncio.run(registry.lookup_all([f"{MIRROR}/a/b:v1"], lambda r, n: creds))
    assert registry.sent == 1
    assert len(seen) == 3  # one 401, one token, one answer
    # Other credentials are another key: not answered from the first's.
    asyncio.run(registry.lookup_all([f"{MIRROR}/a/b:v1"], lambda r, n: Credentials("u", "q")))
    assert registry.sent == 2


def test_a_kept_answer_is_asked_again_once_due() -> None:
    now = [0.0]
    seen: list[httpx2.Request] = []
    cache = LookupCache(clock=lambda: now[0])
    registry = Registry(transport=httpx2.MockTransport(_bearer_registry(seen)), cache=cache)
    creds = Credentials("u", PW)
    asyncio.run(registry.lookup_all([f"{MIRROR}/a/c:v2"], lambda r, n: creds))
    now[0] += 31  # a missing image is asked again soon: it may have been copied in
    asyncio.run(registry.lookup_all([f"{MIRROR}/a/c:v2"], lambda r, n: creds))
    assert registry.sent == 2


@pytest.mark.parametrize(
    ("handler", "creds", "answer", "detail"),
    [
        # Credentials refused by the token service.
        (_bearer_registry([]), Credentials("u", "wrong"), Answer.UNAUTHORIZED, "refused (401)"),
        # Basic: the Secret's credentials as they are, or none to give.
        (lambda r: httpx2.Response(401, headers={"www-authenticate": 'Basic realm="r"'}),
         None, Answer.UNAUTHORIZED, "the pull Secret has none"),
        (lambda r: httpx2.Response(
            200 if r.headers.get("authorization") == "Basic " + _auth("u", PW) else 401,
            headers={"www-authenticate": 'Basic realm="r"'}),
         Credentials("u", PW), Answer.FOUND, ""),
        (lambda r: httpx2.Response(403), Credentials("u", PW), Answer.UNAUTHORIZED, "(403)"),
        (lambda r: httpx2.Response(503), None, Answer.UNREACHABLE, "answered 503"),
        # A redirect is not followed: no registry answers a manifest HEAD so.
        (lambda r: httpx2.Response(307, headers={"location": "https://elsewhere/"}),
         None, Answer.UNREACHABLE, "answered 307"),
        # A token service over http would get the credentials in the clear.
        (lambda r: httpx2.Response(
            401, headers={"www-authenticate": 'Bearer realm="http://127.0.0.1/token"'}),
         Credentials("u", PW), Answer.UNAUTHORIZED, "not https"),
        # A token answer past its bound is refused, not read whole.
        (_bearer_registry([], b'{"token": "' + b"x" * MAX_TOKEN_BYTES + b'"}'),
         Credentials("u", PW), Answer.UNREACHABLE, "more than"),
        (_bearer_registry([], b'{"nothing": 1}'), Credentials("u", PW), Answer.UNREACHABLE,
         "no token"),
    ],
)  # fmt: skip
def test_what_a_registry_answers_means(
    handler: Handler, creds: Credentials | None, answer: Answer, detail: str
) -> None:
    [(_, found, said)] = _lookup(handler, [f"{MIRROR}/a/b:v1"], creds)[0]
    assert found is answer
    assert detail in said
    if creds is not None:
        assert creds.password not in said


def test_a_registry_in_a_denied_range_is_not_asked() -> None:
    asked: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        asked.append(request)
        return httpx2.Response(200)

    [(_, found, said)] = _lookup(handler, ["169.254.169.254/a/b:v1"])[0]
    assert found is Answer.UNREACHABLE
    assert "169.254.169.254" in said
    assert not asked


def test_a_basic_registry_gets_the_credentials_at_once_after_its_first_challenge() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        ok = request.headers.get("authorization") == "Basic " + _auth("u", PW)
        return httpx2.Response(200 if ok else 401, headers={"www-authenticate": 'Basic realm="r"'})

    registry = Registry(transport=httpx2.MockTransport(handler))
    creds = Credentials("u", PW)
    asyncio.run(registry.lookup_all([f"{MIRROR}/a/b:v1"], lambda r, n: creds))
    asyncio.run(registry.lookup_all([f"{MIRROR}/a/c:v1"], lambda r, n: creds))
    assert len(seen) == 3  # a 401 and an answer, then an answer alone
