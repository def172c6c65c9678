"""What may be said, in status, events and logs, about a target's answer.

A target's address is chosen by whoever writes its kubeconfig Secret, so the
server that answers may be anything: a metadata service, an internal web
page, a service returning secrets. Conditions and events are read by more
people than the Secret's author, so the body of an answer is repeated only
when it is a Kubernetes ``Status`` (a JSON object of kind Status), and then
only its message, cut to ``MAX_MESSAGE`` characters. Any other answer is
described by its HTTP status code and media type alone: never its body,
its reason phrase or its headers, which the server chooses just as freely.
Any other error's text (helm's above all) gets the same treatment where
client-go quotes such a body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from modelplane.kube.scrub import redact
from modelplane.untrusted import UntrustedInputError, load_json, printable

MAX_MESSAGE = 500
# A media type as RFC 9110 spells it; anything else in the header is not shown.
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,40}/[a-z0-9][a-z0-9!#$&^_.+-]{0,60}$")


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` stripped, control characters escaped and cut to ``limit`` (``printable``)."""
    return printable(text.strip(), limit)


def media_type(content_type: str | None) -> str | None:
    """The media type of a Content-Type header; None when there is none or it is odd."""
    value = (content_type or "").split(";", 1)[0].strip().lower()
    return value if _MEDIA_TYPE.match(value) else None


def describe_answer(content_type: str | None) -> str:
    """An answer that is not a Status, by its media type alone (its code is said apart)."""
    kind = media_type(content_type)
    what = f"an answer of type {kind}" if kind else "an answer of no recognisable type"
    return f"{what}, not a Kubernetes Status"


def status_of(body: bytes, content_type: str | None) -> dict[str, Any] | None:
    """The body as a Kubernetes Status object, or None when it is anything else."""
    if media_type(content_type) != "application/json":
        return None
    try:
        # The server's own words: bounded like any text a target chose.
        doc = load_json(body)
    except UntrustedInputError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        return None
    if not isinstance(doc.get("message", ""), str):
        return None
    return doc


def status_message(body: bytes, content_type: str | None) -> str | None:
    """The message of a Status body, bounded; None when the body is not a Status."""
    doc = status_of(body, content_type)
    if doc is None:
        return None
    return bounded(str(doc.get("message") or ""))


def _response_content(response: httpx2.Response) -> bytes | None:
    try:
        return response.content
    except httpx2.ResponseNotRead:  # a streamed answer (a watch) whose body was not read
        return None


def _describe_api_error(err: ApiError) -> str:
    code = err.status.code
    response: httpx2.Response | None = err.response
    if response is None:
        # An ERROR event inside a watch stream: lightkube decoded it as a Status.
        return bounded(f"{code}: {err.status.message or ''}".rstrip(": "))
    content_type = response.headers.get("content-type")
    body = _response_content(response)
    message = status_message(body, content_type) if body is not None else None
    if message is None:
        message = describe_answer(content_type)
    return f"{response.status_code}: {message}" if message else str(response.status_code)


# helm talks to the target itself, through client-go, whose errors quote an
# answer that is not a Status in two places: a 500's body (``%q``), and JSON
# without a kind. The quoted part runs to the last closing quote (the body may
# hold quotes of its own) or to the end of helm's message.
_CLIENT_GO_QUOTES = (
    (
        re.compile(r'an error on the server \(".*"\) has prevented', re.DOTALL),
        "an error on the server (its answer is not repeated) has prevented",
    ),
    (
        re.compile(r"Object 'Kind' is missing in '.*", re.DOTALL),
        "Object 'Kind' is missing in the answer (not repeated)",
    ),
)


def _unquoted(text: str) -> str:
    for pattern, replacement in _CLIENT_GO_QUOTES:
        text = pattern.sub(replacement, text)
    return text


# The API server's own words when it could not call an admission webhook
# (k8s.io/apiserver pkg/util/webhook/error.go, ErrCallingWebhook: "failed
# calling webhook %q: %v", wrapped in an InternalError, "Internal error
# occurred: %v"), whatever stopped the call: connection refused while the
# webhook's pod starts, an x509 error until cert-manager's cainjector
# injects the CA, a timeout, or the webhook's own 5xx. A webhook that
# answered and refused says "admission webhook %q denied the request"
# (pkg/admission/plugin/webhook/errors/statuserror.go) instead: a verdict
# on the object, not a webhook that is not ready. Anchored at the start, so
# a denial whose text quotes the phrase is not taken for one.
_CALLING_WEBHOOK = re.compile(
    r'^(?:Internal error occurred: )?failed calling webhook "([a-z0-9][a-z0-9.-]{0,252})"'
)


@dataclass(frozen=True)
class WebhookCallFailed:
    """The API server refused a write because it could not call an admission webhook."""

    webhook: str
    # The API server's message, with any answer it quotes left out.
    detail: str


def webhook_call_failed(err: BaseException) -> WebhookCallFailed | None:
    """What ``err`` says about an admission webhook the API server could not call, if that."""
    if not isinstance(err, ApiError) or err.response is None:
        return None
    response: httpx2.Response = err.response
    body = _response_content(response)
    doc = status_of(body, response.headers.get("content-type")) if body else None
    message = str((doc or {}).get("message") or "")
    match = _CALLING_WEBHOOK.match(message)
    if match is None:
        return None
    # The call's cause may quote what the webhook answered, which its
    # server chose (client-go's "an error on the server (...)"): left out
    # before the message is cut, so a long answer cannot leave half a quote.
    detail = bounded(_unquoted(message))
    return WebhookCallFailed(match.group(1), f"{response.status_code}: {detail}")


# Transport errors whose text is the local system's (errno strings, TLS
# verification results), not the peer's. Protocol errors can quote the bytes
# a non-HTTP peer sent ("illegal status line: ..."), so they are named only.
_LOCAL_TEXT = (httpx2.ConnectError, httpx2.TimeoutException, httpx2.NetworkError)


def describe_error(err: BaseException) -> str:
    """A message about ``err`` that repeats nothing a target's server chose, nor a secret.

    Whatever the error quotes loses any URL's user and password (a
    mirror's, as helm and the fetchers quote it): ``redact``.
    """
    return redact(_describe(err))


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiError):
        return _describe_api_error(err)
    if isinstance(err, httpx2.HTTPStatusError):
        # Its text holds the reason phrase and, for a redirect, the Location.
        response = err.response
        content = _response_content(response)
        message = (
            status_message(content, response.headers.get("content-type"))
            if content is not None
            else None
        )
        if message is None:
            message = describe_answer(response.headers.get("content-type"))
        return f"{response.status_code}: {message}"
    if isinstance(err, httpx2.HTTPError) and not isinstance(err, _LOCAL_TEXT):
        return type(err).__name__
    # Any other error's own text, with client-go's quotes of an answer taken
    # out: helm's errors (and whatever else relays client-go) carry them, and
    # this layer need not know which errors those are.
    return bounded(_unquoted(str(err) or type(err).__name__), 600)
