"""Asking an image registry whether it holds an image: the OCI distribution API, bounded.

One ``HEAD /v2/<name>/manifests/<reference>`` per image, accepting every
manifest kind a runtime pulls (OCI index and manifest, Docker manifest list
and v2), as the distribution spec describes
(https://github.com/opencontainers/distribution-spec/blob/main/spec.md,
"Checking if content exists in the registry"): 200 is there, 404 is not.
A 401 names how to authenticate in ``WWW-Authenticate``: ``Basic`` takes
the pull Secret's user and password as they are; ``Bearer`` sends them to
the token service it names (``realm``, ``service``, and a pull ``scope``)
for a token, then asks again with it.

The registry and its token service are untrusted: every connection goes
through the address guard (``--deny-target-cidrs``), nothing is redirected,
each request has a timeout and a token answer is read up to a small limit.
Credentials go into request headers only: never into a message, the log or
the cache's keys (a digest of them stands in).

Answers are kept for a short while per image and credentials
(``LookupCache``), and tokens for their lifetime, so the stacks of a fleet
that run the same images ask the mirror once between them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx2

from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork
from modelplane.kube.transport import AddressGuard
from modelplane.plan.mirror_images import Answer, Lookup, ManifestRef, manifest_ref
from modelplane.untrusted import (
    Limits,
    UntrustedInputError,
    as_dict,
    decode_base64,
    load_json,
    printable,
)

# Every manifest kind a runtime may pull for a tag or a digest.
MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
# A token answer is a few KiB; anything past this is not one.
MAX_TOKEN_BYTES = 64 * 1024
_TOKEN_LIMITS = Limits(max_bytes=MAX_TOKEN_BYTES, max_depth=8, max_nodes=256)
# A header past this is not a challenge the product reads.
MAX_CHALLENGE = 4096
# How long an answer stands: short, so a copied image is seen soon, and long
# enough that a fleet's stacks share one lookup per image.
FOUND_SECONDS = 300.0
NOT_FOUND_SECONDS = 30.0
# A token without ``expires_in`` lives 60 seconds (the token spec's default).
TOKEN_SECONDS = 60.0
DETAIL = 200


class Credentials(NamedTuple):
    """A user and password for one registry, from a pull Secret; never shown."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"

    def basic(self) -> str:
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def fingerprint(self) -> str:
        """A digest standing in for the credentials as a cache key."""
        return hashlib.sha256(f"{self.username}\0{self.password}".encode()).hexdigest()[:16]


# ---- WWW-Authenticate --------------------------------------------------------------------


class Challenge(NamedTuple):
    scheme: str  # lowercase: "bearer" or "basic"
    params: dict[str, str]


_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))\s*(,|$)')
_SCHEME = re.compile(rf"\s*({_TOKEN})(?:\s+|$)")


def parse_challenges(header: str) -> list[Challenge]:
    """The challenges of a ``WWW-Authenticate`` header (RFC 9110 section 11.6.1).

    Lenient where registries are (a missing comma at the end), strict where
    a wrong reading would send credentials elsewhere: a value is a token or
    a quoted string, and anything else ends the parse.
    """
    header = header[:MAX_CHALLENGE]
    out: list[Challenge] = []
    pos = 0
    while pos < len(header):
        scheme = _SCHEME.match(header, pos)
        if scheme is None:
            break
        pos = scheme.end()
        params: dict[str, str] = {}
        while pos < len(header):
            param = _PARAM.match(header, pos)
            if param is None:
                break
            key, quoted, bare = param.group(1), param.group(2), param.group(3)
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
            params.setdefault(key.lower(), value)
            pos = param.end()
        out.append(Challenge(scheme.group(1).lower(), params))
        pos = _skip_commas(header, pos)
    return out


def _skip_commas(header: str, pos: int) -> int:
    while pos < len(header) and header[pos] in ", \t":
        pos += 1
    return pos


def chosen_challenge(challenges: Iterable[Challenge]) -> Challenge | None:
    """The challenge to answer: Bearer (with a realm) before Basic; None for neither."""
    found = list(challenges)
    for c in found:
        if c.scheme == "bearer" and c.params.get("realm"):
            return c
    return next((c for c in found if c.scheme == "basic"), None)


# ---- the pull Secret's credentials -------------------------------------------------------


def _key_host_and_path(key: str) -> tuple[str, str]:
    """A ``.dockerconfigjson`` key as (host, path): schemes and a ``/v1/``-style suffix dropped."""
    rest = key.strip()
    for scheme in ("https://", "http://"):
        if rest.lower().startswith(scheme):
            rest = rest[len(scheme) :]
    host, _, path = rest.partition("/")
    path = path.strip("/")
    if re.fullmatch(r"v[12]", path):
        path = ""
    return host.lower(), path


def _host_matches(pattern: str, host: str) -> bool:
    """The kubelet's rule for a key's host: exact, or ``*`` standing for one DNS label."""
    p_name, _, p_port = pattern.partition(":")
    h_name, _, h_port = host.partition(":")
    if p_port != h_port:
        return False
    p_labels, h_labels = p_name.split("."), h_name.split(".")
    if len(p_labels) != len(h_labels):
        return False
    return all(p == "*" or p == h for p, h in zip(p_labels, h_labels, strict=True))


def credentials_for(config: Mapping[str, Any], registry: str, name: str) -> Credentials | None:
    """The credentials a ``.dockerconfigjson`` (or ``.dockercfg``) gives ``registry/name``.

    As the kubelet picks them: the key's host must match the registry's (a
    ``*`` for one label), its path, if any, must prefix the repository at a
    ``/``; the longest matching path wins. An entry takes ``auth`` (base64
    of ``user:password``) or ``username`` and ``password``; one with
    neither, or malformed, is passed over.
    """
    auths = as_dict(config.get("auths")) if "auths" in config else dict(config)
    best: tuple[int, Credentials] | None = None
    for key, entry in auths.items():
        if not isinstance(key, str):
            continue
        host, path = _key_host_and_path(key)
        if not _host_matches(host, registry.lower()):
            continue
        if path and name != path and not name.startswith(f"{path}/"):
            continue
        creds = _entry_credentials(as_dict(entry))
        if creds is not None and (best is None or len(path) > best[0]):
            best = (len(path), creds)
    return best[1] if best else None


def _entry_credentials(entry: Mapping[str, Any]) -> Credentials | None:
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            user, colon, password = base64.b64decode(auth, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return Credentials(user, password) if colon else None
    named, given = entry.get("username"), entry.get("password")
    if isinstance(named, str) and isinstance(given, str):
        return Credentials(named, given)
    return None


# The keys of a kubernetes.io/dockerconfigjson and a kubernetes.io/dockercfg Secret.
_CONFIG_KEYS = (".dockerconfigjson", ".dockercfg")
# A pull Secret's config holds a few registries' entries; far past this is no pull Secret.
MAX_CONFIG_BYTES = 64 * 1024
_CONFIG_LIMITS = Limits(max_bytes=MAX_CONFIG_BYTES, max_depth=8, max_nodes=4096)


def config_of(data: Mapping[str, str]) -> dict[str, Any] | None:
    """A pull Secret's registry config from its data; None when it holds none that parses."""
    for key in _CONFIG_KEYS:
        text = data.get(key)
        if not isinstance(text, str):
            continue
        try:
            config = as_dict(load_json(decode_base64(text, MAX_CONFIG_BYTES), _CONFIG_LIMITS))
        except UntrustedInputError:
            continue
        if config:
            return config
    return None


# ---- the lookups ---------------------------------------------------------------------------


@dataclass
class LookupCache:
    """Answers by (image, credentials' digest), each until it is due; tokens likewise."""

    clock: Callable[[], float] = time.monotonic
    answers: dict[tuple[str, str], tuple[float, Lookup]] = field(default_factory=dict)
    tokens: dict[tuple[str, ...], tuple[float, str]] = field(default_factory=dict)
    # The registries that asked for Basic auth: sent it at once from then
    # on, which spares each later lookup its 401.
    basic: set[str] = field(default_factory=set)

    def answer(self, key: tuple[str, str]) -> Lookup | None:
        kept = self.answers.get(key)
        if kept is None or kept[0] <= self.clock():
            self.answers.pop(key, None)
            return None
        return kept[1]

    def keep(self, key: tuple[str, str], lookup: Lookup) -> None:
        ttl = FOUND_SECONDS if lookup.answer is Answer.FOUND else NOT_FOUND_SECONDS
        self.answers[key] = (self.clock() + ttl, lookup)
        self._prune()

    def token(self, key: tuple[str, ...]) -> str | None:
        kept = self.tokens.get(key)
        if kept is None or kept[0] <= self.clock():
            self.tokens.pop(key, None)
            return None
        return kept[1]

    def keep_token(self, key: tuple[str, ...], token: str, seconds: float) -> None:
        self.tokens[key] = (self.clock() + seconds, token)

    def _prune(self) -> None:
        # Bounded by the images of the catalog; dropping the stale keeps it so.
        now = self.clock()
        for key in [k for k, (due, _) in self.answers.items() if due <= now]:
            del self.answers[key]
        for tkey in [k for k, (due, _) in self.tokens.items() if due <= now]:
            del self.tokens[tkey]


class _Refused(Exception):
    """The registry or its token service refused the credentials (or asked for some)."""


@dataclass
class Registry:
    """Looks images up in registries over HTTPS, through the address guard."""

    deny: tuple[IPNetwork, ...] = DEFAULT_DENIED
    timeout: float = 10.0
    # None: the system's CAs (SSL_CERT_FILE and SSL_CERT_DIR, as helm takes them).
    ssl_context: ssl.SSLContext | None = None
    cache: LookupCache = field(default_factory=LookupCache)
    # Under the address guard; None: HTTPS with ``ssl_context`` (a test gives its own).
    transport: httpx2.AsyncBaseTransport | None = None
    # Lookups actually sent (not answered from the cache), for the bench and tests.
    sent: int = 0

    async def lookup_all(
        self, images: Iterable[str], credentials: Callable[[str, str], Credentials | None]
    ) -> list[Lookup]:
        """Each image looked up, at once; ``credentials(registry, name)`` gives the Secret's."""
        wanted = list(images)
        async with self._client() as http:
            return list(
                await asyncio.gather(*(self._cached(http, image, credentials) for image in wanted))
            )

    def _client(self) -> httpx2.AsyncClient:
        inner = self.transport or httpx2.AsyncHTTPTransport(
            verify=self.ssl_context or ssl.create_default_context()
        )
        guard = AddressGuard(self.deny, inner)
        return httpx2.AsyncClient(
            transport=guard, timeout=self.timeout, follow_redirects=False, trust_env=False
        )

    async def _cached(
        self,
        http: httpx2.AsyncClient,
        image: str,
        credentials: Callable[[str, str], Credentials | None],
    ) -> Lookup:
        ref = manifest_ref(image)
        creds = credentials(ref.registry, ref.name)
        key = (image, creds.fingerprint() if creds else "")
        kept = self.cache.answer(key)
        if kept is not None:
            return kept
        self.sent += 1
        found = await self._lookup(http, image, ref, creds)
        self.cache.keep(key, found)
        return found

    async def _lookup(
        self, http: httpx2.AsyncClient, image: str, ref: ManifestRef, creds: Credentials | None
    ) -> Lookup:
        url = f"https://{ref.registry}/v2/{ref.name}/manifests/{ref.reference}"
        try:
            # The whole lookup, token and all, in a bounded time.
            async with asyncio.timeout(self.timeout * 3):
                return Lookup(image, await self._head(http, url, ref, creds))
        except _Refused as err:
            return Lookup(image, Answer.UNAUTHORIZED, printable(str(err), DETAIL))
        except AddressDenied as err:
            return Lookup(image, Answer.UNREACHABLE, printable(str(err), DETAIL))
        except (httpx2.HTTPError, ssl.SSLError, OSError, UntrustedInputError) as err:
            return Lookup(image, Answer.UNREACHABLE, printable(_said(err), DETAIL))

    async def _head(
        self, http: httpx2.AsyncClient, url: str, ref: ManifestRef, creds: Credentials | None
    ) -> Answer:
        scope = f"repository:{ref.name}:pull"
        token_key = (ref.registry, scope, creds.fingerprint() if creds else "")
        token = self.cache.token(token_key)
        auth = f"Bearer {token}" if token else None
        if auth is None and creds is not None and ref.registry in self.cache.basic:
            auth = creds.basic()
        response = await self._send(http, url, auth)
        if response.status_code == 401:
            challenge = chosen_challenge(
                parse_challenges(response.headers.get("www-authenticate", ""))
            )
            if challenge is None:
                raise _Refused("the mirror asks for credentials the operator cannot give")
            if challenge.scheme == "basic":
                if creds is None:
                    raise _Refused("the mirror asks for credentials and the pull Secret has none")
                auth = creds.basic()
                self.cache.basic.add(ref.registry)
            else:
                token, seconds = await self._token(http, challenge, scope, creds)
                self.cache.keep_token(token_key, token, seconds)
                auth = f"Bearer {token}"
            response = await self._send(http, url, auth)
        return _answer(response.status_code)

    async def _send(self, http: httpx2.AsyncClient, url: str, auth: str | None) -> httpx2.Response:
        headers = {"Accept": MANIFEST_ACCEPT, "Accept-Encoding": "identity"}
        if auth:
            headers["Authorization"] = auth
        response = await http.head(url, headers=headers)
        await response.aclose()
        return response

    async def _token(
        self,
        http: httpx2.AsyncClient,
        challenge: Challenge,
        scope: str,
        creds: Credentials | None,
    ) -> tuple[str, float]:
        """A pull token from the challenge's token service: (token, seconds it lives)."""
        realm = httpx2.URL(challenge.params["realm"])
        if realm.scheme != "https":
            # Credentials in the clear, to wherever the registry said.
            raise _Refused("the mirror's token service is not https")
        params = {"scope": scope}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        headers = {"Accept-Encoding": "identity"}
        if creds is not None:
            headers["Authorization"] = creds.basic()
        async with http.stream("GET", realm, params=params, headers=headers) as response:
            if response.status_code in (401, 403):
                raise _Refused(f"the mirror's token service refused ({response.status_code})")
            response.raise_for_status()
            body = await _read_at_most(response, MAX_TOKEN_BYTES)
        doc = as_dict(load_json(body, _TOKEN_LIMITS))
        token = doc.get("token") or doc.get("access_token")
        if not isinstance(token, str) or not token:
            raise UntrustedInputError("the token service answered no token")
        expires = doc.get("expires_in")
        seconds = float(expires) if isinstance(expires, int) and 0 < expires < 86400 else 0.0
        # Kept a little less than its life, so it is not sent as it expires.
        return token, max(seconds or TOKEN_SECONDS, 10.0) - 5.0


def _answer(status: int) -> Answer:
    if 200 <= status < 300:
        return Answer.FOUND
    if status == 404:
        return Answer.MISSING
    if status in (401, 403):
        raise _Refused(f"the mirror refused the pull Secret's credentials ({status})")
    raise httpx2.HTTPError(f"the mirror answered {status}")


async def _read_at_most(response: httpx2.Response, limit: int) -> bytes:
    try:
        # Read already when a transport built it from bytes (a test's).
        content = response.content
    except httpx2.ResponseNotRead:
        pass
    else:
        if len(content) > limit:
            raise UntrustedInputError(f"the token service answered more than {limit} bytes")
        return content
    data = bytearray()
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) > limit:
            raise UntrustedInputError(f"the token service answered more than {limit} bytes")
    return bytes(data)


def _said(err: BaseException) -> str:
    """What went wrong, in words: the exception's type when it says nothing itself."""
    text = str(err)
    return text if text else type(err).__name__
