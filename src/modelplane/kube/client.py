"""One connection to a target cluster, and the reads every package makes through it.

A ``Target`` is the one owner of a connection: lightkube's client (typed get,
apply, delete), the raw HTTP client (discovery, paginated LISTs as plain JSON,
watches), and the transport both send through. Whoever opens a Target closes
it, once, and everything closes.

lightkube 1.0 has no public call for a GET with its own ``Accept`` header, nor
a LIST that keeps the collection's resourceVersion as plain JSON: those go
through the raw client, built by lightkube's public client adapter from the
same connection parameters and transport, so authentication, TLS and the
address and answer checks of ``transport.py`` apply alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Unpack

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.config import client_adapter
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ApiError

from modelplane.backoff import Backoff, retry
from modelplane.kube.address import DEFAULT_DENIED, AddressDenied, IPNetwork, host_and_port, vet
from modelplane.kube.answers import bounded, describe_answer, describe_error, status_message
from modelplane.kube.bounded import BOUND, AnswerBound, AnswerTooLarge
from modelplane.kube.budget import Budget, Holdings, budget_for
from modelplane.kube.deadline import Deadlines
from modelplane.kube.handshakes import limit_handshakes
from modelplane.kube.http2 import use_fair_http2
from modelplane.kube.large_lists import LargeList
from modelplane.kube.meter import Meter
from modelplane.kube.plurals import NONE as NO_PLURALS
from modelplane.kube.plurals import Plurals
from modelplane.kube.target_errors import ApiStatusError as ApiStatusError
from modelplane.kube.target_errors import OverBudget as OverBudget
from modelplane.kube.target_errors import OverTotal as OverTotal
from modelplane.kube.target_errors import TargetError as TargetError
from modelplane.kube.transport import AuthTransport, GuardedTransport, TokenAuth, Tokens
from modelplane.untrusted import Limits, UntrustedInputError, json_cost, load_json
from modelplane.wire import FIELD_MANAGER, ApiRef, for_go

T = TypeVar("T")

PAGE_SIZE = 500
# A target's answer is read whole before it is parsed, so it is bounded: a
# page of PAGE_SIZE objects of the largest size etcd stores by default
# (1.5 MiB) would be 750 MiB, but the objects the operator lists are far
# smaller; 128 MiB leaves room for a page of big CRDs. The depth leaves room
# for CRD schemas, which nest properties and items deeply.
MAX_ANSWER_BYTES = 128 * 1024 * 1024
# What the parse of one answer read outside a collection's budget (discovery)
# may build, as ``untrusted.json_cost`` estimates it.
MAX_ANSWER_BUILT = 256 * 1024 * 1024
_ANSWER_LIMITS = Limits(max_bytes=MAX_ANSWER_BYTES, max_depth=256)
# An answer past this is parsed in a worker thread: a MiB takes a few ms,
# and the event loop renews the leader Lease meanwhile.
PARSE_ON_LOOP_BYTES = 1024 * 1024
# How an answer's text is parsed within its limits: ``load_json``, or one
# that builds only what its reader keeps (``untrusted.load_json_as``).
Decode = Callable[[bytes, Limits], Any]

# What a Target says when its kubeconfig turns certificate checks off: the
# connection is allowed (its own credential is the kubeconfig author's to
# risk), but not silently.
INSECURE_TLS_WARNING = (
    "the kubeconfig sets insecure-skip-tls-verify: the target's TLS certificate is not "
    "checked, so anyone who can answer at its address is taken for it; give "
    "certificate-authority-data instead"
)


class OpenCount:
    """How many connections are open: a number that only grows is a leak."""

    def __init__(self) -> None:
        self._open = 0

    def opened(self) -> None:
        self._open += 1

    def closed(self) -> None:
        self._open -= 1

    def __call__(self) -> int:
        return self._open


# The operator's count, for the metrics; ``open_target`` takes another for tests.
TARGETS = OpenCount()


def open_targets() -> int:
    return TARGETS()


class TargetClient(AsyncClient):
    """lightkube's client, with the raw HTTP client built from the same parameters.

    Functions that take a lightkube client and need a raw GET (discovery)
    find the raw client here; both go through ``params.transport``, which
    also carries a cloud identity's auth, so they share one token and one
    refresh. Closing this closes both.
    """

    def __init__(
        self,
        config: SingleConfig,
        params: ConnectionParams,
        *,
        field_manager: str | None = FIELD_MANAGER,
    ) -> None:
        super().__init__(
            config,
            timeout=params.timeout,
            trust_env=params.trust_env,
            transport=params.transport,  # type: ignore[arg-type]
            proxy=params.proxy,
            http2=params.http2,
            field_manager=field_manager,
        )
        # lightkube's public adapter: base URL, TLS and auth as the kubeconfig says.
        self.http: httpx2.AsyncClient = client_adapter.AsyncClient(config, params)
        # (apiVersion, kind) -> plural, as this server's discovery said
        # (``kube.resources.plural_of``); a connection's lifetime is one
        # reconcile or one set of watches, so a CRD changed since is seen.
        # Replaced, never changed: what it holds is shared (``kube.plurals``).
        self.plurals: Plurals = NO_PLURALS

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.http.aclose()


def raw_http(client: AsyncClient) -> httpx2.AsyncClient:
    """The raw HTTP client of a Target's client."""
    if not isinstance(client, TargetClient):
        raise TypeError(
            "raw reads need the client of a Target (modelplane.kube.client), "
            f"not a {type(client).__name__}"
        )
    return client.http


@dataclass
class Target:
    """One open connection to a target: its clients, and the kubeconfig helm gets.

    ``close`` closes everything, once; ``async with`` closes it on the way out.
    """

    client: TargetClient
    # The kubeconfig text, for helm; never logged. With an identity, its
    # users are empty and ``helm_kubeconfig`` puts a fresh token in.
    kubeconfig: str = field(repr=False)
    identity: Tokens | None = field(default=None, repr=False)
    # ``kubeconfig`` as parsed when it was vetted: with an identity, what
    # ``helm_kubeconfig`` builds on, so a helm run does not parse it again.
    kubeconfig_doc: dict[str, Any] | None = field(default=None, repr=False)
    count: OpenCount = field(default=TARGETS, repr=False)
    # Safe to show, for a condition: what about this connection is unsafe
    # but allowed (``INSECURE_TLS_WARNING``).
    warnings: tuple[str, ...] = ()
    _closed: bool = field(default=False, repr=False)

    async def helm_kubeconfig(self) -> str:
        """The kubeconfig helm gets: with an identity, a short-lived token, never the key."""
        if self.identity is None:
            return self.kubeconfig
        doc = self.kubeconfig_doc
        assert doc is not None, "a target with an identity is opened with its kubeconfig_doc"
        token = await self.identity.token()
        users = [{"name": entry.get("name"), "user": {"token": token}} for entry in doc["users"]]
        return for_go({**doc, "users": users})

    @property
    def http(self) -> httpx2.AsyncClient:
        return self.client.http

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.count.closed()
        await self.client.close()

    async def __aenter__(self) -> Target:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


async def check_server(server: str, deny: Iterable[IPNetwork]) -> None:
    """Refuse a server whose host is, or resolves to, a denied address.

    A name that cannot be resolved now is let through: the first request
    fails on it and says the target is unreachable, which is what it is.
    """
    host, port = host_and_port(server)
    try:
        await vet(host, port, deny)
    except AddressDenied:
        raise
    except httpx2.TransportError:
        pass


async def open_target(
    config: SingleConfig,
    *,
    deny: Iterable[IPNetwork] = DEFAULT_DENIED,
    timeout: float = 10.0,
    trust_env: bool = True,
    kubeconfig: str = "",
    kubeconfig_doc: dict[str, Any] | None = None,
    identity: Tokens | None = None,
    count: OpenCount = TARGETS,
) -> Target:
    """Connect to the cluster ``config`` names, refusing a denied address before anything.

    Raises ``AddressDenied`` for a refused server, ``ValueError`` or
    ``ssl.SSLError`` for certificate data that cannot be loaded.
    """
    deny = tuple(deny)
    await check_server(config.cluster.server, deny)
    assert config.user is not None, "lightkube gives every context a user"
    verify = client_adapter.verify_cluster(
        config.cluster, config.user, config.abs_file, trust_env=trust_env
    )
    # HTTP/2 where the target offers it (ALPN): one connection carries every
    # watch and request of the target, not one TLS connection per open watch.
    use_fair_http2()
    pool = httpx2.AsyncHTTPTransport(verify=verify, http2=True)
    # New connections queue for the process's handshake slots, so that a
    # shard opening thousands at once does not time all of them out.
    limit_handshakes(pool, tls=config.cluster.server.startswith("https:"))
    transport: httpx2.AsyncBaseTransport = GuardedTransport(deny, pool)
    if identity is not None:
        # The identity replaces the kubeconfig's user; nothing of it is used.
        # Its auth sits on the one transport both clients share, outside the
        # guard, so a retry after a 401 is vetted like any request.
        config = config._replace(user=User())
        transport = AuthTransport(TokenAuth(identity), transport)
    # Outermost: a request's deadline covers its auth retry and its whole answer.
    transport = Deadlines(transport)
    params = ConnectionParams(
        timeout=httpx2.Timeout(timeout),
        trust_env=trust_env,
        # lightkube types the field as a sync transport; its AsyncClient takes an async one.
        transport=transport,  # type: ignore[arg-type]
    )
    client = TargetClient(config, params)
    count.opened()
    warnings = (INSECURE_TLS_WARNING,) if config.cluster.insecure else ()
    return Target(
        client=client,
        kubeconfig=kubeconfig,
        identity=identity,
        kubeconfig_doc=kubeconfig_doc,
        count=count,
        warnings=warnings,
    )


# ---- reads as plain JSON ----------------------------------------------------------


def collection_path(api: ApiRef, namespace: str | None = None) -> str:
    """The REST path of one resource's collection, in one namespace or all of them."""
    base = f"/api/{api.version}" if not api.group else f"/apis/{api.group}/{api.version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{api.resource}"


async def get_answer(
    http: httpx2.AsyncClient,
    path: str,
    *,
    params: dict[str, str] | None = None,
    accept: str = "application/json",
    meter: Meter | None = None,
    decode: Decode | None = None,
) -> Any:
    """GET ``path`` and decode the JSON answer; ``ApiStatusError`` for an error status.

    Transport errors are raised as they are: a watch tells an outage by them.
    ``meter`` counts the answer's bytes, and what their parse would build,
    against a collection's budget as they arrive; without one, the answer
    is bounded by ``MAX_ANSWER_BUILT``. ``decode`` parses it instead of
    ``load_json`` (within the same limits): one that builds less of it.
    """
    # The meter's budget is the tighter bound; the transport's stays as a backstop.
    built = 2**62 if meter is not None else MAX_ANSWER_BUILT
    bound = {BOUND: AnswerBound(bytes=MAX_ANSWER_BYTES, built=built)}
    body = bytearray()
    try:
        async with http.stream(
            "GET", path, params=params, headers={"Accept": accept}, extensions=bound
        ) as response:
            async for chunk in response.aiter_bytes():
                if meter is not None:
                    meter.read(chunk)
                body += chunk
                # Also where the client's transport is not the guarded one.
                if len(body) > MAX_ANSWER_BYTES:
                    raise TargetError(
                        f"GET {path}: the answer is over the limit of {MAX_ANSWER_BYTES} bytes"
                    )
    except AnswerTooLarge as err:
        raise TargetError(str(err)) from None
    if response.status_code >= 300:
        content_type = response.headers.get("content-type")
        message = status_message(bytes(body), content_type)
        if message is None:
            # Not a Status: its body, reason phrase and headers are the
            # server's free text, and are not repeated.
            message = describe_answer(content_type)
        raise ApiStatusError(response.status_code, path, message)
    data = bytes(body)
    # Let go of the buffer before the parse, which holds the text and the
    # objects at once: a page's peak is then the fewer copies of it.
    del body
    parse = decode or load_json
    try:
        if len(data) > PARSE_ON_LOOP_BYTES:
            return await asyncio.to_thread(parse, data, _ANSWER_LIMITS)
        return parse(data, _ANSWER_LIMITS)
    except UntrustedInputError as err:
        raise TargetError(f"GET {path}: the answer is not readable JSON ({err})") from err


async def get_json(
    client: AsyncClient,
    path: str,
    *,
    params: dict[str, str] | None = None,
    accept: str = "application/json",
) -> Any:
    """GET ``path`` (absolute, e.g. ``/apis``) through a Target's client; errors are TargetError."""
    try:
        return await get_answer(raw_http(client), path, params=params, accept=accept)
    except AddressDenied:
        raise
    except httpx2.TransportError as err:
        raise TargetError(f"cannot reach the API server: {describe_error(err)}") from err


# Metadata only, as client-go's metadata client asks for it
# (k8s.io/client-go/metadata): the server answers PartialObjectMetadataList
# for a LIST and PartialObjectMetadata objects in a WATCH's events, so a
# Secret's data never crosses the wire. No plain application/json fallback:
# a server that cannot answer so refuses (406) rather than send the data.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@dataclass
class Collection:
    """Every object of one LIST, and the resourceVersion a watch starts from.

    ``bytes``: what its pages weighed on the wire, as counted against its budget.
    """

    items: list[dict[str, Any]]
    resource_version: str
    bytes: int = 0
    # What its objects (outlined, if so) are estimated to take in memory;
    # held in the LIST's ``holdings``, if it had any, for the caller.
    built: int = 0


def describe_collection(
    api: ApiRef,
    namespace: str | None = None,
    labels: str | None = None,
    fields: str | None = None,
) -> str:
    """One collection as a message names it: the resource, where, and by which selectors."""
    where = f"namespace {namespace}" if namespace else "every namespace"
    selectors = "".join(
        f", {name} {value}" for name, value in (("labels", labels), ("fields", fields)) if value
    )
    return bounded(f"the target's {api.resource} ({where}{selectors})", 300)


# Pages past those the budget's objects fill: a real API server fills every
# page but the last (it reads on until ``limit`` objects pass the
# selectors), so more pages are a server that sends empty ones without end.
_SPARE_PAGES = 4


def _page(doc: Any, path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A LIST answer's objects and metadata; TargetError for an answer of another shape."""
    items = doc.get("items") if isinstance(doc, dict) else None
    metadata = (doc.get("metadata") or {}) if isinstance(doc, dict) else None
    if not isinstance(items or [], list) or not isinstance(metadata, dict):
        raise TargetError(f"GET {path}: the answer is not a list of objects")
    return [i for i in items or [] if isinstance(i, dict)], metadata


class ListOptions(TypedDict, total=False):
    """Which objects a LIST reads, in which form, and within what (``list_pages``)."""

    namespace: str | None  # None: every namespace
    labels: str | None  # a label selector
    fields: str | None  # a field selector
    accept: str  # application/json, or METADATA_LIST
    budget: Budget | None  # None: the kind's default


async def list_pages(
    http: httpx2.AsyncClient,
    api: ApiRef,
    *,
    outline: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    holdings: Holdings | None = None,
    decode: Decode | None = None,
    **options: Unpack[ListOptions],
) -> Collection:
    """One paginated LIST of a resource, as plain JSON: no model decoding, no resource class.

    One request, more only past ``PAGE_SIZE`` objects. Transport errors are
    raised as they are (see ``get_answer``). ``accept`` ``METADATA_LIST``
    reads the objects' metadata only. All the pages together stay within
    ``budget`` (the kind's default, ``kube.budget.budget_for``), or
    ``OverBudget`` is raised as soon as they pass it. ``outline`` keeps of
    each object only what is read of it, a page at a time; ``holdings``
    holds what is kept (see ``Meter``), and the collection's ``built`` is
    the caller's to give back. ``decode``: how each page is parsed (``get_answer``).
    """
    namespace, labels, fields = (
        options.get("namespace"),
        options.get("labels"),
        options.get("fields"),
    )
    accept = options.get("accept", "application/json")
    budget = options.get("budget")
    if budget is None:
        budget = budget_for(api, metadata_only=accept == METADATA_LIST)
    meter = Meter(describe_collection(api, namespace, labels, fields), budget, holdings)
    try:
        # Every CRD or Node of a target: a few such LISTs in the process at once.
        async with LargeList(budget):
            return await _pages(
                http, api, meter, namespace, labels, fields, accept, outline, decode
            )
    except BaseException:
        meter.release()
        raise


async def _pages(
    http: httpx2.AsyncClient,
    api: ApiRef,
    meter: Meter,
    namespace: str | None,
    labels: str | None,
    fields: str | None,
    accept: str,
    outline: Callable[[dict[str, Any]], dict[str, Any]] | None,
    decode: Decode | None,
) -> Collection:
    budget = meter.budget
    path = collection_path(api, namespace)
    params: dict[str, str] = {"limit": str(PAGE_SIZE)}
    if labels:
        params["labelSelector"] = labels
    if fields:
        params["fieldSelector"] = fields
    items: list[dict[str, Any]] = []
    pages = 0
    while True:
        pages += 1
        if pages > budget.items // PAGE_SIZE + _SPARE_PAGES:
            raise OverBudget(meter.collection, f"more than {pages - 1} pages", budget)
        answer = await get_answer(
            http, path, params=params, accept=accept, meter=meter, decode=decode
        )
        page, metadata = _page(answer, path)
        del answer
        meter.listed(len(page))
        if outline is None:
            meter.page_kept(meter.page_built)
        else:
            page = [outline(item) for item in page]
            meter.page_kept(json_cost(msgspec.json.encode(page)))
        items += page
        if not metadata.get("continue"):
            rv = str(metadata.get("resourceVersion") or "")
            return Collection(items, rv, meter.bytes, meter.kept)
        params["continue"] = str(metadata["continue"])


async def list_objects(
    client: AsyncClient, api: ApiRef, **options: Unpack[ListOptions]
) -> list[dict[str, Any]]:
    """Every object of one resource, in every namespace unless one is given, within its budget."""
    try:
        found = await list_pages(raw_http(client), api, **options)
    except AddressDenied:
        raise
    except httpx2.TransportError as err:
        raise TargetError(f"cannot reach the API server: {describe_error(err)}") from err
    return found.items


# ---- a CRD's storage, still initialising ------------------------------------------

# A CRD's storage takes a moment to initialise after the CRD is served; until
# then the API server answers 429 with Retry-After: 1. That is a wait, not an
# error worth a failed reconcile: up to 20 tries a quarter of a second apart.
CRD_STORAGE_TRIES = 20
CRD_STORAGE_WAIT = Backoff(first=0.25, cap=0.25)


def storage_initialising(err: Exception) -> bool:
    """Whether ``err`` is the 429 of a CRD whose storage is not ready yet."""
    if isinstance(err, ApiError):
        return bool(err.status.code == 429)
    return isinstance(err, ApiStatusError) and err.status == 429


async def waiting_out_429(
    call: Callable[[], Awaitable[T]],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``call()``, waiting out the 429s of a CRD whose storage is still initialising."""
    return await retry(
        call,
        when=storage_initialising,
        tries=CRD_STORAGE_TRIES,
        policy=CRD_STORAGE_WAIT,
        sleep=sleep,
    )
