"""What the operator reads from a target is hostile: every parse bounded, every value cut.

One test per parse site of target text: the advisories' ConfigMap YAML and
the custom objects they show, drift's ``k:{...}`` managedFields keys, the
watch stream's lines, an error body, and fetched manifests. A refused parse
is a finding or an error naming the object, never a crash and never the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
import yaml
from tests.scripted import Script, list_answer

from modelplane.actions.apply import ManifestError, parse_manifests
from modelplane.catalog.components.kube_prometheus_stack import PROMETHEUS
from modelplane.checks.checker import check_results
from modelplane.kube import client as client_module
from modelplane.kube.answers import status_message, status_of
from modelplane.kube.client import TargetError, list_pages
from modelplane.kube.link import Link
from modelplane.kube.reflector import MAX_WATCH_LINE, Reflector, WatchKey
from modelplane.pins import Stack
from modelplane.plan.drift import drifted_fields, owned_fields
from modelplane.plan.model import RequirementResult, RequirementStatus
from modelplane.plan.observed import ClusterFacts, Observed, ObservedConfigMap, ObservedObject
from modelplane.wire import FIELD_MANAGER, ApiRef

EXTENSION_MANAGER = "Envoy Gateway's extensionManager is wired to the AI Gateway"
PROMETHEUS_SELECTS = "Prometheus selects PodMonitors in every namespace"
# Far more than any message the status shows, far less than a bomb expands to.
MESSAGE_CEILING = 2000


def alias_bomb(levels: int, key: str = "extensionManager") -> str:
    """Nine references per level: 9**levels nodes from a few hundred bytes, under ``key``."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    lines.append(f"{key}: *a{levels}")
    return "\n".join(lines) + "\n"


def _result(observed: Observed, title: str) -> RequirementResult:
    (found,) = [r for r in check_results(Stack.STANDARD, observed) if r.requirement == title]
    return found


def _config_map(value: str, namespace: str = "tenant-a") -> Observed:
    cm = ObservedConfigMap(
        namespace=namespace, name="envoy-gateway-config", data={"envoy-gateway.yaml": value}
    )
    return Observed(cluster=ClusterFacts(config_maps=[cm]))


def test_an_alias_bomb_in_the_extension_manager_configmap_is_a_warning() -> None:
    # 532 bytes that expand to 9**9 nodes: a 484 MB message with plain safe_load.
    bomb = alias_bomb(9)
    assert len(bomb) < 650
    found = _result(_config_map(bomb), EXTENSION_MANAGER)
    assert found.status is RequirementStatus.WARNING
    assert "ConfigMap tenant-a/envoy-gateway-config key envoy-gateway.yaml" in found.message
    assert "aliases" in found.message
    assert "*a8" not in found.message  # never the text
    assert len(found.message) <= MESSAGE_CEILING


def test_deep_yaml_in_a_configmap_is_a_warning_not_a_recursion_error() -> None:
    found = _result(_config_map("[" * 5000 + "]" * 5000), EXTENSION_MANAGER)
    assert found.status is RequirementStatus.WARNING
    assert "nested deeper" in found.message


def test_a_configmap_value_that_is_large_and_wrong_gives_a_short_message() -> None:
    # Within every parse bound, but shown in full it would be megabytes.
    doc = {"extensionManager": {"hooks": {"xdsTranslator": {"post": ["x" * 100] * 5000}}}}
    found = _result(_config_map(yaml.safe_dump(doc)), EXTENSION_MANAGER)
    assert found.status is RequirementStatus.WARNING
    assert len(found.message) <= MESSAGE_CEILING


def test_control_characters_from_the_target_never_reach_a_message() -> None:
    found = _result(_config_map("gateway: {}\n", namespace="ns\x1b[2J"), EXTENSION_MANAGER)
    assert "\x1b" not in found.message
    assert "\\u001b" in found.message


def _prometheus(spec: object) -> Observed:
    obj = ObservedObject(namespace="monitoring", name="k8s", spec={"podMonitorSelector": spec})
    return Observed(cluster=ClusterFacts(custom={PROMETHEUS.key: [obj]}))


def test_a_custom_object_is_shown_cut_however_large_it_expands() -> None:
    # What an alias graph parses to: 9**9 leaves behind a few hundred shared
    # lists. Shown whole (json.dumps) it runs to gigabytes.
    node: object = ["x"] * 9
    for _ in range(9):
        node = [node] * 9
    found = _result(_prometheus(node), PROMETHEUS_SELECTS)
    assert found.status is RequirementStatus.WARNING
    assert "Prometheus monitoring/k8s: spec.podMonitorSelector is [[[" in found.message
    assert len(found.message) <= MESSAGE_CEILING


def test_a_deep_custom_object_is_shown_without_recursion() -> None:
    node: object = {}
    for _ in range(5000):
        node = {"a": node}
    found = _result(_prometheus(node), PROMETHEUS_SELECTS)
    assert found.status is RequirementStatus.WARNING
    assert len(found.message) <= MESSAGE_CEILING


# ---- drift: managedFields ------------------------------------------------------------


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(levels):
        node = {"f:a": node}
    return node


def _apply_entry(fields: dict[str, Any]) -> dict[str, Any]:
    return {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": fields}


# What a listener whose list key is not understood counts as: not owned.
LOST_LISTENER = ["spec.listeners[name=http].name", "spec.listeners[name=http].port"]


def test_a_deep_list_key_in_managed_fields_is_no_recursion_error() -> None:
    desired = {"spec": {"listeners": [{"name": "http", "port": 80}]}}
    deep_key = "k:" + "[" * 100_000 + "]" * 100_000
    owned = {"f:spec": {"f:listeners": {deep_key: {}}}}
    # The garbled key names no item of ours: the listener is not owned.
    assert drifted_fields(desired, owned) == LOST_LISTENER


def test_a_list_key_that_is_too_long_is_ignored() -> None:
    desired = {"spec": {"listeners": [{"name": "http", "port": 80}]}}
    huge = 'k:{"name":"http","x":"' + "y" * 100_000 + '"}'
    owned = {"f:spec": {"f:listeners": {huge: {}}}}
    assert drifted_fields(desired, owned) == LOST_LISTENER


def test_deep_managed_fields_are_not_observed_rather_than_a_recursion_error() -> None:
    # Two Apply entries of ours (a target may write anything there): their
    # union would recurse as deep as they are nested.
    deep = _deep(100_000)
    metadata = {"managedFields": [_apply_entry(deep), _apply_entry(deep)]}
    assert owned_fields(metadata, FIELD_MANAGER) is None


def test_managed_fields_within_the_bound_are_read_as_before() -> None:
    metadata = {"managedFields": [_apply_entry(_deep(10)), _apply_entry({"f:b": {}})]}
    owned = owned_fields(metadata, FIELD_MANAGER)
    assert owned is not None and set(owned) == {"f:a", "f:b"}


# ---- the watch stream ------------------------------------------------------------


CONFIGMAPS = ApiRef("", "v1", "configmaps")
CONFIGMAPS_IN_NS = WatchKey(CONFIGMAPS, namespace="ns")


async def _reflect(script: Script) -> Reflector:
    http = httpx2.AsyncClient(
        base_url="https://target.invalid", transport=httpx2.MockTransport(script)
    )
    reflector = Reflector(http, CONFIGMAPS_IN_NS, Link(http, "test"), lambda _k, _kind, _name: None)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(script.done.wait(), 10.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await http.aclose()
    return reflector


async def test_a_watch_line_without_end_is_read_only_to_the_bound() -> None:
    sent = 0
    chunk = b"a" * (1 << 20)

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 64 MiB, never a newline
            sent += len(chunk)
            yield chunk

    script = Script(
        [list_answer("10", "a"), httpx2.Response(200, content=endless()), list_answer("20", "b")]
    )
    reflector = await _reflect(script)
    # Given up at the bound, and listed again: the event it hid is not lost.
    assert sent <= MAX_WATCH_LINE + 2 * len(chunk)
    assert reflector.lists == 2 and list(reflector.items) == ["ns/b"]


@pytest.mark.parametrize(
    "line", [b"not json", b"[" * 100_000 + b"]" * 100_000], ids=["garbled", "deep"]
)
async def test_a_watch_line_that_is_not_an_event_relists(line: bytes) -> None:
    script = Script(
        [list_answer("10", "a"), httpx2.Response(200, content=line + b"\n"), list_answer("20")]
    )
    reflector = await _reflect(script)
    assert reflector.lists == 2 and reflector.items == {}


# ---- error bodies ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"kind": "Status", "message": "' + b"x" * (2 << 20) + b'"}',
    ],
    ids=["deep", "large"],
)
def test_an_error_body_that_is_deep_or_large_is_not_a_status(body: bytes) -> None:
    assert status_of(body, "application/json") is None
    assert status_message(body, "application/json") is None


def test_a_status_message_is_printable() -> None:
    body = b'{"kind": "Status", "message": "refused \\u001b[2J here"}'
    assert status_message(body, "application/json") == "refused \\u001b[2J here"


# ---- fetched manifests -------------------------------------------------------------

CRD_DOC = (
    "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
    "metadata: {name: a.example.com}\n"
)


def test_an_alias_bomb_in_a_fetched_manifest_is_refused() -> None:
    with pytest.raises(ManifestError, match="aliases are expanded") as err:
        parse_manifests(CRD_DOC.encode() + b"---\n" + alias_bomb(9, "spec").encode(), "m.yaml")
    assert "*a8" not in str(err.value)


def test_a_trailing_separator_is_no_document_as_for_kubectl() -> None:
    for text in (CRD_DOC + "---\n", CRD_DOC + "---", "---\n" + CRD_DOC + "---\n---\n"):
        assert [d["metadata"]["name"] for d in parse_manifests(text.encode(), "m.yaml")] == [
            "a.example.com"
        ]


# ---- a LIST answer: read to a bound, parsed within one ---------------------


async def _list_answer(response: httpx2.Response) -> object:
    http = httpx2.AsyncClient(
        base_url="https://target.invalid", transport=httpx2.MockTransport(lambda _r: response)
    )
    try:
        return await list_pages(http, CONFIGMAPS)
    finally:
        await http.aclose()


async def test_a_list_answer_is_read_only_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):
            sent += 1 << 16
            yield b" " * (1 << 16)

    monkeypatch.setattr(client_module, "MAX_ANSWER_BYTES", 1 << 18)
    with pytest.raises(TargetError, match="over the limit of 262144 bytes"):
        await _list_answer(httpx2.Response(200, content=endless()))
    # Read up to the bound and not on to the end of what the target sends.
    assert sent <= (1 << 18) + (1 << 16)


async def test_a_deep_list_answer_is_an_error_not_a_recursion_error() -> None:
    deep = b'{"items": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(TargetError, match="nested deeper"):
        await _list_answer(httpx2.Response(200, content=deep))
