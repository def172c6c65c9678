"""The GoogleApplicationCredentials provider against a loopback token service."""

from __future__ import annotations

import ipaddress
import json
import math
import time
from typing import Any
from urllib.parse import parse_qs

import pytest
from tests.identity_services import closed_port_url, google_token_service, serve

from modelplane.api.spec import SecretType
from modelplane.credentials.identity import google, providers
from modelplane.credentials.identity.base import (
    Endpoints,
    IdentityError,
    IdentityFailure,
    TargetInfo,
)

TARGET = TargetInfo(cluster_name="gke_proj_zone_west", server="https://203.0.113.5")
ENDPOINTS = Endpoints()


def _minter(data: str | bytes) -> object:
    return google.minter(data.encode() if isinstance(data, str) else data, TARGET, ENDPOINTS)


def test_the_registry_maps_the_google_type_to_this_provider() -> None:
    assert providers.factory(SecretType.GOOGLE_APPLICATION_CREDENTIALS) is google.minter
    assert providers.factory(SecretType.KUBECONFIG) is None


async def test_a_key_mints_a_token_the_service_issued_with_both_scopes() -> None:
    with google_token_service(lifetime=120) as service:
        account = service.account()
        minter = google.minter(service.key_json(account).encode(), TARGET, ENDPOINTS)
        before = time.time()
        token = await minter.mint()
    # The service checks the signature, issuer, audience and both scopes.
    assert service.valid(token.value) == account.email
    assert before + 110 < token.expires_at < time.time() + 130


async def test_data_that_is_not_json_is_a_static_token() -> None:
    minter = google.minter(b"ya29.a-static-token\n", TARGET, ENDPOINTS)
    token = await minter.mint()
    assert token.value == "ya29.a-static-token"
    assert token.expires_at == math.inf
    assert "ya29" not in repr(minter)


PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
    "-----END PRIVATE KEY-----\n"
)
GOOD = {
    "type": "service_account",
    "client_email": "a@b.iam.gserviceaccount.com",
    "private_key": PEM,
    "token_uri": "https://oauth2.googleapis.com/token",
}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("[1, 2]", "JSON but not an object"),
        (json.dumps({"type": "authorized_user"}), "type 'authorized_user'"),
        (json.dumps({"type": "service_account"}), "no client_email, private_key, token_uri"),
        (json.dumps({**GOOD, "token_uri": "file:///etc/passwd"}), "token_uri"),
        (json.dumps(GOOD), "private_key cannot be loaded"),
        ("two words", "neither JSON nor a single access token"),
        ("   ", "neither JSON nor a single access token"),
        (b"\xff\xfe{", "neither UTF-8 JSON nor a token"),
    ],
)
def test_malformed_data_is_invalid_naming_the_field_never_the_key(
    data: str | bytes, words: str
) -> None:
    with pytest.raises(IdentityError) as caught:
        _minter(data)
    assert caught.value.failure is IdentityFailure.INVALID
    assert words in caught.value.message
    assert "MIIEvQ" not in caught.value.message
    assert caught.value.__cause__ is None or "MIIEvQ" not in str(caught.value.__cause__)


async def test_a_revoked_key_is_rejected_with_the_services_reason() -> None:
    with google_token_service() as service:
        account = service.account()
        service.revoked.add(account.email)
        minter = google.minter(service.key_json(account).encode(), TARGET, ENDPOINTS)
        with pytest.raises(IdentityError) as caught:
            await minter.mint()
    err = caught.value
    assert err.failure is IdentityFailure.REJECTED
    assert "invalid_grant" in err.message and account.email in err.message
    for assertion in service.assertions:
        assert assertion not in err.message
    assert (err.__cause__ is None and err.__context__ is None) or "BEGIN" not in str(err)


async def test_an_unreachable_token_service_is_unreachable() -> None:
    with google_token_service() as service:
        account = service.account()
        data = service.key_json(account, token_uri=closed_port_url())
    minter = google.minter(data.encode(), TARGET, ENDPOINTS)
    with pytest.raises(IdentityError) as caught:
        await minter.mint()
    assert caught.value.failure is IdentityFailure.UNREACHABLE
    assert "cannot reach the token service" in caught.value.message


async def test_a_service_that_echoes_the_assertion_has_it_scrubbed() -> None:
    sent: list[str] = []

    def echo(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, object]:
        sent.extend(parse_qs(body.decode())["assertion"])
        return 400, {"error": "invalid_grant", "error_description": f"bad: {body.decode()}"}

    with google_token_service() as service, serve(echo) as url:
        account = service.account()
        minter = google.minter(
            service.key_json(account, token_uri=f"{url}/token").encode(), TARGET, ENDPOINTS
        )
        with pytest.raises(IdentityError) as caught:
            await minter.mint()
    assert caught.value.failure is IdentityFailure.REJECTED
    assert "[redacted]" in caught.value.message
    assert sent and sent[0] not in caught.value.message


async def test_an_answer_that_is_not_oauth2_is_not_repeated() -> None:
    def page(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, object]:
        return 403, "<html>internal page with secrets</html>"

    with google_token_service() as service, serve(page) as url:
        account = service.account()
        minter = google.minter(
            service.key_json(account, token_uri=f"{url}/token").encode(), TARGET, ENDPOINTS
        )
        with pytest.raises(IdentityError) as caught:
            await minter.mint()
    assert caught.value.failure is IdentityFailure.UNREACHABLE
    assert "internal page" not in caught.value.message


async def test_a_token_uri_at_a_denied_address_is_refused_before_any_request() -> None:
    with google_token_service() as service:
        account = service.account()
        data = service.key_json(account, token_uri="http://169.254.169.254/token")
        minter = google.minter(data.encode(), TARGET, ENDPOINTS)
        with pytest.raises(IdentityError) as caught:
            await minter.mint()
    assert caught.value.failure is IdentityFailure.INVALID
    assert "token_uri is refused" in caught.value.message
    assert "169.254.0.0/16" in caught.value.message


async def test_the_deny_list_is_the_one_endpoints_carries() -> None:
    with google_token_service() as service:
        account = service.account()
        loopback_denied = Endpoints(deny=(ipaddress.ip_network("127.0.0.0/8"),))
        minter = google.minter(service.key_json(account).encode(), TARGET, loopback_denied)
        with pytest.raises(IdentityError, match="token_uri is refused"):
            await minter.mint()
    assert service.assertions == []


async def test_the_token_uri_is_resolved_once_and_the_checked_address_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name that answers a loopback service, then a denied address, is asked once.

    DNS rebinding: had the token request resolved the name again after the
    check, it would have gone to 127.0.0.2 (denied here, and closed).
    """
    import socket

    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "tokens.rebind.test":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = "127.0.0.1" if len(asked) == 1 else "127.0.0.2"
        return real(address, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    deny = (ipaddress.ip_network("127.0.0.2/32"),)
    with google_token_service() as service:
        account = service.account()
        port = service.url.rsplit(":", 1)[1]
        data = service.key_json(account, token_uri=f"http://tokens.rebind.test:{port}/token")
        minted = await google.minter(data.encode(), TARGET, Endpoints(deny=deny)).mint()
        assert service.valid(minted.value) == account.email
    assert asked == ["tokens.rebind.test"]
