"""What reaches the hub: a status the CRD takes, whatever a target holds, and bounded events."""

from __future__ import annotations

import re
from typing import Any

import kopf
import pytest
import yaml
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status, StatusCause, StatusDetails

from modelplane.actions import claim
from modelplane.api import status_limits
from modelplane.api.crd import servingstack_crd
from modelplane.api.models import ServingStack
from modelplane.api.status import GatewayStatus
from modelplane.catalog.components import COMPONENTS
from modelplane.operator import hub_writes
from modelplane.operator.status import (
    CA_PUBLISHED,
    READY,
    STATUS_REFUSED,
    TEARDOWN,
    Outcome,
    bounded,
    desired_status,
    merge_conditions,
)
from modelplane.plan import Observed, plan
from modelplane.plan.decisions import BlockedReason
from modelplane.plan.model import GatewayReport

ESC = "\x1b]8;;http://evil\x1b\\\x1b[2J"
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")

STACK = ServingStack.model_validate(
    yaml.safe_load("""
apiVersion: infrastructure.modelplane.ai/v1alpha1
kind: ServingStack
metadata: {name: s, namespace: ns, generation: 3, uid: u-1}
spec:
  secrets: [{type: Kubeconfig, name: k, key: kubeconfig}]
  gateway: {hostname: west.example.com}
""")
)
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _status_schema() -> dict[str, Any]:
    root = servingstack_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status: dict[str, Any] = root["properties"]["status"]
    return status


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, child in node.get("properties", {}).items():
        out += _nodes(child, f"{path}.{name}" if path else name)
    if "items" in node:
        out += _nodes(node["items"], f"{path}[]")
    return out


# -- the schema -------------------------------------------------------------


def test_every_status_string_and_list_in_the_crd_is_bounded_by_the_table() -> None:
    strings, lists = {}, {}
    for path, node in _nodes(_status_schema()):
        if node["type"] == "string":
            assert "maxLength" in node, f"status.{path} has no maxLength"
            strings[path] = node["maxLength"]
        if node["type"] == "array":
            assert "maxItems" in node, f"status.{path} has no maxItems"
            lists[path] = node["maxItems"]
    # One table for both sides: nothing in it the schema lacks, nor the reverse.
    assert strings == dict(status_limits.STRINGS)
    assert lists == dict(status_limits.LISTS)


def test_conditions_are_bounded_as_metav1_condition_is() -> None:
    item = _status_schema()["properties"]["conditions"]["items"]["properties"]
    assert item["reason"]["maxLength"] == 1024
    assert item["reason"]["minLength"] == 1
    assert item["reason"]["pattern"] == r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    assert item["message"]["maxLength"] == 32768
    assert item["type"]["maxLength"] == 316
    assert item["status"]["enum"] == ["True", "False", "Unknown"]


def test_the_table_agrees_with_the_status_models() -> None:
    # The gateway's limits are also on its pydantic model: they must not drift.
    fields = GatewayStatus.model_fields
    for name, path in (("address", "gateway.address"), ("ca_certificate", "gateway.caCertificate")):
        [limit] = [c.max_length for c in fields[name].metadata if hasattr(c, "max_length")]
        assert limit == status_limits.STRINGS[path], path


def test_the_catalog_fits_the_components_list() -> None:
    assert len(COMPONENTS) <= status_limits.LISTS["components"]


def test_every_reason_the_operator_writes_is_one_the_crd_takes() -> None:
    pattern = re.compile(
        status_limits.CONSTRAINTS["conditions[].reason"]["pattern"].removesuffix("$") + r"\Z"
    )
    reasons = {str(r) for r in BlockedReason} | {
        STATUS_REFUSED,
        "Progressing",
        "Reconciled",
        "RequirementsUnmet",
        "RequirementsMet",
        "OutOfRange",
        "InRange",
        "NotPublished",
        "Published",
        "Waiting",
        "PullSecretMissing",
        "Present",
    }
    for reason in reasons:
        assert pattern.match(reason), reason
        assert len(reason) <= status_limits.STRINGS["conditions[].reason"]


def test_a_path_without_a_limit_is_refused() -> None:
    with pytest.raises(ValueError, match=r"status field gateway\.nope has no length limit"):
        bounded({"gateway": {"nope": "x"}})


# -- what the operator writes ------------------------------------------------


def _conforms(value: Any, schema: dict[str, Any], path: str = "status") -> None:
    """``value`` passes the bounds of ``schema`` the API server would check."""
    if value is None:
        return
    kind = schema["type"]
    if kind == "object":
        assert isinstance(value, dict), path
        for key, child in value.items():
            assert key in schema["properties"], f"{path}.{key} is not in the schema"
            _conforms(child, schema["properties"][key], f"{path}.{key}")
    elif kind == "array":
        assert isinstance(value, list), path
        assert len(value) <= schema["maxItems"], path
        for i, item in enumerate(value):
            _conforms(item, schema["items"], f"{path}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), path
        assert len(value) <= schema["maxLength"], f"{path}: {len(value)} > {schema['maxLength']}"
        assert len(value) >= schema.get("minLength", 0), path
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), path
        if "enum" in schema:
            assert value in schema["enum"], path
        if path != "status.gateway.caCertificate":
            assert not CONTROL.search(value), f"{path} carries a control character"


def _hostile_plan(ca: str | None = PEM, problem: str | None = None) -> Any:
    p = plan(STACK, Observed())
    gateway = GatewayReport(address=ESC + "a" * 100_000, ca_certificate=ca, ca_problem=problem)
    return p.model_copy(update={"gateway": gateway})


def test_a_status_from_hostile_target_values_is_one_the_crd_takes() -> None:
    huge = ESC + "x" * 200_000
    outcome = Outcome(
        plan=_hostile_plan(),
        failures={c.name: f"install failed: {huge}" for c in COMPONENTS},
    )
    merged = desired_status(outcome, 3)
    merged["conditions"] = merge_conditions(merged["conditions"], [], "2026-01-01T00:00:00Z")
    status = bounded(merged)
    _conforms(status, _status_schema())
    conditions = {c["type"]: c for c in status["conditions"]}
    ready = conditions[READY]["message"]
    assert len(ready) == status_limits.STRINGS["conditions[].message"]
    assert ready.endswith("…")
    assert "\\u001b" in ready  # the ESC is shown, escaped, never sent raw
    assert status["gateway"]["address"].startswith("\\u001b")
    for component in status["components"]:
        assert len(component["message"]) <= status_limits.STRINGS["components[].message"]


def test_a_blocked_message_from_a_target_is_cut_and_printable() -> None:
    outcome = Outcome(blocked_reason=BlockedReason.TARGET_ERROR, blocked_message=ESC * 20_000)
    status = bounded(desired_status(outcome, 1))
    _conforms(status, _status_schema())


def test_too_many_items_are_cut_to_the_list_limit() -> None:
    status = bounded(
        {
            "conditions": [
                {"type": f"T{i}", "status": "True", "reason": "R", "message": ""} for i in range(40)
            ]
        }
    )
    assert len(status["conditions"]) == status_limits.LISTS["conditions"]


def test_the_ca_is_published_whole() -> None:
    status = bounded(desired_status(Outcome(plan=_hostile_plan(ca=PEM)), 3))
    assert status["gateway"]["caCertificate"] == PEM  # newlines kept: it is PEM, not a message
    ca = next(c for c in status["conditions"] if c["type"] == CA_PUBLISHED)
    assert (ca["status"], ca["reason"]) == ("True", "Published")


def test_a_ca_over_the_limit_is_not_published_and_the_condition_says_why() -> None:
    limit = status_limits.STRINGS["gateway.caCertificate"]
    big = PEM * (limit // len(PEM) + 1)
    status = bounded(desired_status(Outcome(plan=_hostile_plan(ca=big)), 3))
    _conforms(status, _status_schema())
    assert "caCertificate" not in (status["gateway"] or {})
    ca = next(c for c in status["conditions"] if c["type"] == CA_PUBLISHED)
    assert (ca["status"], ca["reason"]) == ("False", "NotPublished")
    assert str(limit) in ca["message"] and "BEGIN" not in ca["message"]


def test_a_ca_problem_keeps_the_ca_out_and_is_said() -> None:
    problem = "ConfigMap modelplane-system/x key ca.crt holds a block that is not a CERTIFICATE"
    status = bounded(desired_status(Outcome(plan=_hostile_plan(ca=PEM, problem=problem)), 3))
    assert "caCertificate" not in (status["gateway"] or {})
    ca = next(c for c in status["conditions"] if c["type"] == CA_PUBLISHED)
    assert ca["status"] == "False"
    assert ca["message"] == f"the CA certificate is not published: {problem}"


def test_no_ca_found_means_no_ca_condition() -> None:
    status = desired_status(Outcome(plan=_hostile_plan(ca=None)), 3)
    assert CA_PUBLISHED not in {c["type"] for c in status["conditions"]}


def test_teardown_status_is_bounded_too() -> None:
    teardown = {"type": TEARDOWN, "status": "False", "reason": "Waiting", "message": ESC * 9000}
    _conforms(bounded({"conditions": [teardown]}), _status_schema())


# -- events, the claim holder and a refusal ----------------------------------


def test_event_messages_are_printable_and_within_the_event_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(kopf, "event", lambda body, **kw: sent.append(kw))
    emit = hub_writes.emitter({})  # type: ignore[arg-type]
    emit("Warning", "ActionFailed", "install failed: " + ESC * 1000)
    [event] = sent
    assert len(event["message"]) <= status_limits.EVENT_MESSAGE
    assert not CONTROL.search(event["message"])


def test_a_hostile_claim_holder_is_cut_and_printable() -> None:
    ours = claim.StackIdentity.of(STACK)
    for holder in (ESC * 10_000, f"ns/{'n' * 50_000}/uid", f"ns/name{ESC}/uid"):
        shown = claim.describe_holder(holder)
        assert len(shown) <= status_limits.CLAIM_HOLDER
        assert not CONTROL.search(shown)
        message = claim.blocked_message(holder, ours)
        assert not CONTROL.search(message)
        assert len(message) < 2 * status_limits.CLAIM_HOLDER


def test_a_claim_holder_we_wrote_is_still_shown_as_its_stack() -> None:
    assert claim.describe_holder("platform/west/u-9") == "ServingStack platform/west (uid u-9)"


def _refusal(causes: list[StatusCause] | None) -> ApiError:
    err = ApiError.__new__(ApiError)
    err.status = Status(
        code=422,
        reason="Invalid",
        message='ServingStack "s" is invalid: status.gateway.address: Invalid value: "SECRET"',
        details=StatusDetails(causes=causes),
    )
    return err


def test_a_refusal_names_the_fields_never_the_value() -> None:
    err = _refusal(
        [
            StatusCause(
                field="status.conditions[0].message",
                reason="FieldValueTooLong",
                message='Too long: "SECRET"',
            ),
            StatusCause(field=f"status.gateway.address{ESC}", reason="FieldValueInvalid"),
        ]
    )
    fields = hub_writes.refused_fields(err)
    assert fields[0] == "status.conditions[0].message: FieldValueTooLong"
    assert fields[1].startswith("status.gateway.address\\u001b")
    assert not any("SECRET" in f or CONTROL.search(f) for f in fields)


def test_a_refusal_without_causes_names_its_reason() -> None:
    assert hub_writes.refused_fields(_refusal(None)) == ["422 Invalid"]


def test_the_catalog_fits_the_releases_list() -> None:
    releases = [c for c in COMPONENTS if c.chart is not None]
    assert len(releases) <= status_limits.LISTS["releases"]
    # Helm refuses a release name over 53 characters, and so does the status.
    assert all(len(c.release_name) <= status_limits.STRINGS["releases[].name"] for c in releases)
