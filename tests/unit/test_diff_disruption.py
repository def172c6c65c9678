"""``diff`` says what each upgrade disrupts: the classes of the component's parts."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console

from modelplane.catalog.types import DisruptionClass
from modelplane.cli.diff import print_text
from modelplane.plan import plan
from modelplane.plan.diff import (
    Reads,
    ReleaseChangeKind,
    diff,
    disrupted_classes,
    disrupted_parts,
)
from modelplane.plan.observed import Observed

from .conftest import StackFactory, installed

NODE_AGENT = DisruptionClass.NODE_AGENT
TRAFFIC = DisruptionClass.TRAFFIC
SCHEDULER = DisruptionClass.SCHEDULER
CONTROL = DisruptionClass.CONTROL
UPGRADE = ReleaseChangeKind.UPGRADE
INSTALL = ReleaseChangeKind.INSTALL
REINSTALL = ReleaseChangeKind.REINSTALL
DRA = "mp-dra-driver-nvidia-gpu"


@pytest.mark.parametrize(
    ("component", "change", "kinds"),
    [
        ("nvidia-dra-driver-gpu", UPGRADE, [NODE_AGENT]),
        ("node-feature-discovery", UPGRADE, [NODE_AGENT, CONTROL]),
        ("envoy-gateway", UPGRADE, [TRAFFIC, CONTROL]),
        ("kai-scheduler", UPGRADE, [SCHEDULER]),
        ("cert-manager", UPGRADE, [CONTROL]),
        # A reinstall deletes and installs again: every part restarts.
        ("envoy-gateway", REINSTALL, [TRAFFIC, CONTROL]),
        # An install restarts nothing that runs.
        ("nvidia-dra-driver-gpu", INSTALL, []),
        # A component the catalog does not know names nothing.
        ("gpu-operator", UPGRADE, []),
    ],
)
def test_the_parts_a_change_disrupts(
    component: str, change: ReleaseChangeKind, kinds: list[DisruptionClass]
) -> None:
    assert [p.kind for p in disrupted_parts(component, change)] == kinds


def test_the_classes_are_each_once_the_worst_first() -> None:
    parts = [
        *disrupted_parts("cert-manager", UPGRADE),
        *disrupted_parts("envoy-gateway", UPGRADE),
        *disrupted_parts("nvidia-dra-driver-gpu", UPGRADE),
    ]
    assert disrupted_classes(parts) == [NODE_AGENT, TRAFFIC, CONTROL]


def test_a_dra_driver_upgrade_says_it_restarts_the_plugin_on_every_gpu_node(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    first = plan(make_stack(), serve_everything())
    seen = installed(first, serve_everything())
    p = plan(make_stack(versions={"nvidiaDraDriver": "0.4.2"}), seen)
    d = diff(p, Reads(), "https://target.example:6443")
    [change] = d.releases
    assert change.release == DRA and change.change is UPGRADE
    assert [part.kind for part in change.disruption] == [NODE_AGENT]
    assert d.disrupts == [NODE_AGENT]
    assert d.model_dump(mode="json")["disrupts"] == ["NodeAgent"]

    out = io.StringIO()
    print_text(d, Console(file=out, force_terminal=False, highlight=False, soft_wrap=True))
    text = out.getvalue()
    assert (
        f"release nvidia-dra-driver/{DRA} (dra-driver-nvidia-gpu): upgrade 0.4.2 "
        "(node agent: restarts the kubelet plugin on every GPU node" in text
    )
    assert "The upgrades disrupt: node agent." in text


def test_a_first_install_disrupts_nothing(
    make_stack: StackFactory, serve_everything: Callable[..., Observed]
) -> None:
    d = diff(plan(make_stack(), serve_everything()), Reads(), "https://target.example:6443")
    assert d.releases and all(r.disruption == [] for r in d.releases)
    assert d.disrupts == []
