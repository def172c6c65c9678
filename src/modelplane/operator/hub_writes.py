"""What the operator writes to a ServingStack on the hub: its status, its events.

A status write is sent only when it changes what the hub has, and never
raises for what the hub answers: a refusal is reported and replaced by a
minimal status that says so.
"""

from __future__ import annotations

import datetime
import logging
from enum import StrEnum
from typing import Any

import httpx2
import kopf
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from modelplane.api.models import API_GROUP, PLURAL
from modelplane.api.status_limits import EVENT_MESSAGE, LOG_MESSAGE
from modelplane.credentials.connect import hub_forbidden
from modelplane.kube.answers import describe_error
from modelplane.operator import metrics
from modelplane.operator.runtime import Runtime, ServingStackResource, stack_label
from modelplane.operator.status import (
    READY,
    STATUS_REFUSED,
    TEARDOWN,
    bounded,
    condition,
    merge_conditions,
    progress_conditions,
    refused_message,
    status_changed,
)
from modelplane.plan import decisions
from modelplane.plan.rollout import RESUME_ANNOTATION
from modelplane.untrusted import printable
from modelplane.vocabulary import BlockedReason, EventReason, TeardownReason

log = logging.getLogger("modelplane.operator")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(body: kopf.Body, type_: str, reason: EventReason, message: str) -> None:
    """An event on the ServingStack; its message made printable and cut to what events hold."""
    kopf.event(body, type=type_, reason=reason, message=printable(message, EVENT_MESSAGE))


def emitter(body: kopf.Body) -> Any:
    """The events callback a reconciler reports through, on this stack."""

    def emit(type_: str, reason: EventReason, message: str) -> None:
        event(body, type_, reason, message)

    return emit


class StatusWrite(StrEnum):
    """What became of one status write."""

    WRITTEN = "Written"
    UNCHANGED = "Unchanged"  # the hub has it already: nothing sent
    FORBIDDEN = "Forbidden"  # the operator may not patch status (told in the log)
    REFUSED = "Refused"  # the hub refused it, or did not answer: reported, tried again later


# At most this many refused fields are named, each cut to FIELD_SHOWN.
FIELDS_SHOWN = 8
FIELD_SHOWN = 256


async def write_status(rt: Runtime, body: kopf.Body, desired: dict[str, Any]) -> StatusWrite:
    """Patch status only when it differs from what the hub has: no-op writes cost.

    Never raises for what the hub answers: a refused write is reported (a
    Warning event and a log line naming the fields the hub refused) and
    replaced by a minimal status that says so, and the stack's loop goes on.
    """
    current = dict(body.get("status") or {})
    desired = bounded(
        {
            **desired,
            "conditions": merge_conditions(
                desired["conditions"], current.get("conditions") or [], _now()
            ),
        }
    )
    if not status_changed(current, desired):
        return StatusWrite.UNCHANGED
    try:
        await _patch_status(rt, body, desired)
    except ApiError as err:
        if err.status.code == 403:
            # Status is where the operator reports, so this gap can only be told
            # in the log; the stack's loop goes on and tries again next time.
            where = f"ServingStack {stack_label(body)}"
            log.warning("%s", hub_forbidden(err, "patch", f"{PLURAL}/status", where, API_GROUP))
            return StatusWrite.FORBIDDEN
        if err.status.code == 404:
            log.debug("ServingStack %s: gone before its status was written", stack_label(body))
            return StatusWrite.REFUSED
        await _status_refused(rt, body, current, desired, err)
        return StatusWrite.REFUSED
    except httpx2.HTTPError as err:
        log.warning(
            "ServingStack %s: its status could not be written: %s: %s",
            stack_label(body),
            type(err).__name__,
            printable(describe_error(err), LOG_MESSAGE),
        )
        return StatusWrite.REFUSED
    metrics.STATUS_WRITES.inc()
    return StatusWrite.WRITTEN


async def _patch_status(rt: Runtime, body: kopf.Body, status: dict[str, Any]) -> None:
    await rt.hub.patch(
        ServingStackResource.Status,
        body.meta.name or "",
        {"status": status},
        namespace=body.meta.namespace,
        patch_type=PatchType.MERGE,
    )


async def take_resume(rt: Runtime, body: kopf.Body) -> None:
    """Remove the resume annotation once the status says it was taken: it resumes once."""
    try:
        await rt.hub.patch(
            ServingStackResource,
            body.meta.name or "",
            {"metadata": {"annotations": {RESUME_ANNOTATION: None}}},
            namespace=body.meta.namespace,
            patch_type=PatchType.MERGE,
        )
    except (ApiError, httpx2.HTTPError) as err:
        # Left on, it is taken again only by a later failed upgrade of this stack.
        log.warning(
            "ServingStack %s: could not remove %s: %s",
            stack_label(body),
            RESUME_ANNOTATION,
            printable(describe_error(err), LOG_MESSAGE),
        )


def refused_fields(err: ApiError) -> list[str]:
    """The fields the hub named in refusing a write, each with why, as a person reads them.

    From the Status's details (causes), never its message: a message may
    quote the refused value, which came from a target.
    """
    details = err.status.details
    causes = (details.causes if details is not None else None) or []
    shown = [
        printable(
            f"{cause.field or 'the object'}: {cause.reason or 'refused'}",
            FIELD_SHOWN,
        )
        for cause in causes[:FIELDS_SHOWN]
    ]
    if len(causes) > FIELDS_SHOWN:
        shown.append(f"{len(causes) - FIELDS_SHOWN} more")
    if not shown:
        shown.append(printable(f"{err.status.code} {err.status.reason or 'refused'}", FIELD_SHOWN))
    return shown


async def _status_refused(
    rt: Runtime,
    body: kopf.Body,
    current: dict[str, Any],
    refused: dict[str, Any],
    err: ApiError,
) -> None:
    """Report a status the hub refused, and write the minimal one that says so.

    The event and the WARNING come once per refusal that changes, as the
    hub's status remembers it (Ready is StatusRefused with this message),
    not once per backed-off retry.
    """
    fields = refused_fields(err)
    message = refused_message(fields)
    ready = next((c for c in current.get("conditions") or [] if c.get("type") == READY), None)
    before = (ready.get("reason"), ready.get("message")) if ready is not None else None
    new = decisions.is_new(before, (STATUS_REFUSED, message))
    log.log(
        logging.WARNING if new else logging.DEBUG,
        "ServingStack %s: the hub refused its status (%s %s): %s",
        stack_label(body),
        err.status.code,
        printable(err.status.reason or "", FIELD_SHOWN),
        "; ".join(fields),
    )
    if new:
        event(body, "Warning", EventReason.STATUS_REFUSED, message)
    generation = refused.get("observedGeneration", body.meta.get("generation"))
    ready = condition(READY, False, STATUS_REFUSED, message, generation)
    minimal = bounded(
        {
            "observedGeneration": generation,
            "conditions": merge_conditions(
                [ready, *progress_conditions(ready, False, generation)],
                current.get("conditions") or [],
                _now(),
            ),
        }
    )
    if not status_changed(current, minimal):
        return
    try:
        await _patch_status(rt, body, minimal)
    except (ApiError, httpx2.HTTPError) as again:
        # Nothing more can be said on the hub: the log is all there is.
        log.warning(
            "ServingStack %s: the hub refused the minimal status too: %s",
            stack_label(body),
            printable(describe_error(again), LOG_MESSAGE),
        )
        return
    metrics.STATUS_WRITES.inc()


async def teardown_condition(
    rt: Runtime, body: kopf.Body, reason: BlockedReason | TeardownReason, message: str
) -> bool:
    """Set the Teardown condition; True when its reason or message changed.

    Judged by the condition on the stack rather than by the write, so that
    a status the operator may not patch (a 403, told by write_status) does
    not silence the failure.
    """
    current = dict(body.get("status") or {})
    before = next((c for c in current.get("conditions") or [] if c.get("type") == TEARDOWN), None)
    changed = before is None or decisions.is_new(
        (before.get("reason"), before.get("message")), (reason, message)
    )
    conditions = [c for c in current.get("conditions") or [] if c.get("type") != TEARDOWN]
    conditions.append(
        {
            **condition(TEARDOWN, False, reason, message, body.meta.get("generation")),
            "lastTransitionTime": _now(),
        }
    )
    # A refusal (the object may be gone already) is told by write_status.
    await write_status(rt, body, {"conditions": conditions})
    return changed
