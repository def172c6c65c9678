"""Missing pull Secrets: the pure rule, table by table, and what the plan makes of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from modelplane.api.models import ServingStack
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.images import Images, PullSecrets
from modelplane.catalog.types import Component
from modelplane.plan.images import parse_rules
from modelplane.plan.observed import Observed
from modelplane.plan.planner import plan
from modelplane.plan.pull_secrets import (
    MissingPullSecret,
    component_message,
    component_namespaces,
    condition_message,
    missing,
    needed,
    object_namespace,
    pulls_without,
)
from modelplane.plan.sources import Sources

from .conftest import StackFactory, installed

BY_NAME = {c.name: c for c in COMPONENTS}


def _component(name: str, namespace: str, pull: PullSecrets | None) -> Component:
    return dataclasses.replace(
        BY_NAME["cert-manager"], name=name, namespace=namespace, images=Images(pull_secrets=pull)
    )


def _deployment(namespace: str | None, secrets: list[str], kind: str = "Deployment") -> Any:
    pod: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in secrets]
    meta: dict[str, Any] = {"name": "d"}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "spec": {"template": {"spec": pod}}}


def test_a_chart_needs_its_namespace_and_the_extra_ones_and_objects_theirs() -> None:
    charts = [
        _component("a", "ns-a", PullSecrets(paths=("p",), namespaces=("ns-proxy", "ns-a"))),
        _component("b", "ns-b", None),  # takes no pull Secrets: nothing to need
    ]
    objects = [
        ("configuration", _deployment("default", ["regcred"])),
        ("configuration", _deployment("default", ["regcred"])),
        ("configuration", _deployment("other", [])),  # names none
        ("configuration", {"kind": "EnvoyProxy", "metadata": {"namespace": "x"}, "spec": {}}),
    ]
    assert needed(charts, objects) == {
        "a": ("ns-a", "ns-proxy"),
        "configuration": ("default",),
    }


@pytest.mark.parametrize(
    ("body", "namespace"),
    [
        (_deployment("default", ["r"]), "default"),
        (_deployment("default", ["r"], kind="DaemonSet"), "default"),
        (_deployment("default", []), None),
        (_deployment(None, ["r"]), None),
        (_deployment("default", ["r"], kind="ConfigMap"), None),
        ({"kind": "Deployment", "metadata": {"namespace": "n"}}, None),
    ],
)
def test_which_objects_run_pods_that_name_pull_secrets(body: Any, namespace: str | None) -> None:
    assert object_namespace(body) == namespace


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        # Seen everywhere it is needed: nothing missing.
        ({"regcred": ["ns-a", "ns-p", "kube-system"]}, []),
        # Seen elsewhere only: missing where the pods run.
        ({"regcred": ["kube-system"]}, [("a", "regcred", "ns-a"), ("a", "regcred", "ns-p")]),
        # Seen nowhere (an empty answer): missing.
        ({"regcred": []}, [("a", "regcred", "ns-a"), ("a", "regcred", "ns-p")]),
        # Not observed (offline, unreadable): nothing said.
        ({}, []),
    ],
)
def test_missing_is_what_was_seen_to_be_absent(
    present: dict[str, list[str]], expected: list[tuple[str, str, str]]
) -> None:
    found = missing({"a": ("ns-a", "ns-p")}, ["regcred"], present)
    assert [(m.component, m.secret, m.namespace) for m in found] == expected


def test_messages_name_secret_and_namespace_and_stay_short() -> None:
    one = [MissingPullSecret(component="a", secret="regcred", namespace="cert-manager")]
    assert component_message(one) == "PullSecretMissing: regcred in cert-manager"
    many = [MissingPullSecret(component="a", secret=f"s{i}", namespace="n") for i in range(9)]
    assert component_message(many).endswith("and 4 more")
    two = [*one, MissingPullSecret(component="b", secret="regcred", namespace="monitoring")]
    assert condition_message(two) == "a: regcred in cert-manager; b: regcred in monitoring"


# ---- through the plan, with the catalog's own data ---------------------------------


SOURCES = Sources(image_mirrors=parse_rules(["*=mirror.internal"]), image_pull_secrets=("regcred",))


def _messages(p: Any) -> dict[str, str]:
    return {c.name: c.message for c in p.components}


def _where(component: str) -> tuple[str, ...]:
    return component_namespaces(BY_NAME[component])


def test_the_plan_names_missing_secrets_and_still_installs(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    stack: ServingStack = make_stack()
    base = serve_everything()
    first = plan(stack, base, SOURCES)
    # Nothing was seen of the Secrets, so nothing is said to be missing.
    assert first.missing_pull_secrets == []
    assert first.image_pull_secrets == ["regcred"]
    installed_ = {r.component for r in first.releases}
    every = sorted({ns for c in installed_ for ns in _where(c)})
    # The AI Gateway's extProc runs in Envoy Gateway's proxies: its Secret goes there too.
    assert "envoy-gateway-system" in _where("ai-gateway")
    seen = installed(first, base).model_copy(update={"pull_secrets": {"regcred": ["cert-manager"]}})
    p = plan(stack, seen, SOURCES)
    assert {(m.component, m.namespace) for m in p.missing_pull_secrets} == {
        (c, ns) for c in installed_ for ns in _where(c) if ns != "cert-manager"
    }
    assert _messages(p)["ai-gateway"] == (
        "PullSecretMissing: regcred in envoy-ai-gateway-system, regcred in envoy-gateway-system"
    )
    assert _messages(p)["cert-manager"] == ""
    # Nothing is held back for it: no work is left, and the release is in sync.
    assert p.work == [] and {c.state for c in p.components} == {"Ready"}
    # The Secret arrives everywhere: the report clears.
    later = plan(stack, seen.model_copy(update={"pull_secrets": {"regcred": every}}), SOURCES)
    assert later.missing_pull_secrets == [] and _messages(later)["ai-gateway"] == ""


def test_provided_mode_needs_the_products_own_pods_only(make_stack: StackFactory) -> None:
    dynamo = make_stack(stack="Dynamo", components="Provided")
    p = plan(dynamo, Observed(pull_secrets={"regcred": []}), SOURCES)
    # No chart is installed; the ModelExpress server runs in default.
    assert [(m.component, m.namespace) for m in p.missing_pull_secrets] == [
        ("modelexpress-crds", "default")
    ]


def test_without_pull_secrets_nothing_is_needed(make_stack: StackFactory) -> None:
    stack = make_stack()
    seen = Observed(pull_secrets={"regcred": []})
    assert plan(stack, seen, Sources()).missing_pull_secrets == []


def test_with_rules_only_the_moved_components_need_the_secrets(make_stack: StackFactory) -> None:
    quay = Sources(
        image_mirrors=parse_rules(["quay.io=mirror.internal/quay"]),
        image_pull_secrets=("regcred",),
    )
    p = plan(make_stack(stack="Dynamo"), Observed(pull_secrets={"regcred": []}), quay)
    needing = {m.component for m in p.missing_pull_secrets}
    # cert-manager, trust-manager and kube-prometheus-stack pull from quay.io.
    assert {"cert-manager", "trust-manager", "kube-prometheus-stack"} <= needing
    # Nothing of these moves, so their namespaces need no mirror Secret.
    assert not needing & {
        "node-feature-discovery",
        "lws",
        "nvidia-dra-driver-gpu",
        "modelexpress-crds",
    }


@pytest.mark.parametrize(
    ("pull", "refused", "without"),
    [
        (PullSecrets(("imagePullSecrets",)), ["imagePullSecrets"], True),
        (PullSecrets(("imagePullSecrets",)), [], False),
        (PullSecrets(("imagePullSecrets",)), ["image.repository"], False),
        # One of two read: the pods it reaches still name the Secrets.
        (PullSecrets(("a.imagePullSecrets", "b.imagePullSecrets")), ["a.imagePullSecrets"], False),
        # The product's own objects: no chart path to refuse.
        (PullSecrets((), namespaces=("default",)), [], False),
        (None, ["imagePullSecrets"], False),
    ],
)
def test_a_chart_pulls_without_the_secrets_only_when_it_reads_none_of_their_paths(
    pull: PullSecrets | None, refused: list[str], without: bool
) -> None:
    assert pulls_without(pull, refused) is without


def test_grove_at_its_pin_needs_no_secret_in_its_namespace(make_stack: StackFactory) -> None:
    # grove-charts v0.1.0-alpha.12-rc2 reads no pull-secret value: its pods name
    # none, so grove-system is not asked for one; the notes say why.
    p = plan(make_stack(stack="Dynamo"), Observed(pull_secrets={"regcred": []}), SOURCES)
    needing = {m.component for m in p.missing_pull_secrets}
    assert "grove" not in needing
    assert "kai-scheduler" in needing
    assert "PullSecretMissing" not in _messages(p)["grove"]
    assert "reads no pull-secret value" in _messages(p)["grove"]
