"""What an upgrade of each catalog component disrupts: its parts' classes."""

from __future__ import annotations

import pytest

from modelplane.catalog.components import BY_NAME, COMPONENTS
from modelplane.catalog.types import (
    CONTROL_ONLY,
    Component,
    Disruption,
    DisruptionClass,
    NodeAgent,
)
from modelplane.pins import Stack

NODE_AGENT = DisruptionClass.NODE_AGENT
TRAFFIC = DisruptionClass.TRAFFIC
SCHEDULER = DisruptionClass.SCHEDULER
CONTROL = DisruptionClass.CONTROL
# A node-agent part names what the operator rolls: any agent will do here.
_AGENT = BY_NAME["nvidia-dra-driver-gpu"].node_agent

# Every component, and the classes of its parts, the headline first. A new
# component fails test_every_component_is_classed until it is added here.
CLASSES: dict[str, tuple[DisruptionClass, ...]] = {
    "cert-manager": (CONTROL,),
    "kube-prometheus-stack": (CONTROL,),
    "node-feature-discovery": (NODE_AGENT, CONTROL),
    "dra-driver-critical-pods-quota": (CONTROL,),
    "nvidia-dra-driver-gpu": (NODE_AGENT,),
    "envoy-gateway": (TRAFFIC, CONTROL),
    "ai-gateway-crds": (CONTROL,),
    "ai-gateway": (CONTROL,),
    "gaie-crds": (CONTROL,),
    "trust-manager": (CONTROL,),
    "leader-worker-set": (SCHEDULER,),
    "kai-scheduler": (SCHEDULER,),
    "grove": (SCHEDULER,),
    "modelexpress-crds": (CONTROL,),
}


def test_every_component_is_classed() -> None:
    assert set(CLASSES) == {c.name for c in COMPONENTS}


@pytest.mark.parametrize(("name", "classes"), sorted(CLASSES.items()))
def test_the_class_of_each_component(name: str, classes: tuple[DisruptionClass, ...]) -> None:
    component = BY_NAME[name]
    assert tuple(sorted({d.kind for d in component.disruptions}, key=lambda k: k.rank)) == classes
    assert component.disruption is classes[0]


def test_the_classes_rank_from_node_agent_to_control() -> None:
    assert [k.rank for k in (NODE_AGENT, TRAFFIC, SCHEDULER, CONTROL)] == [0, 1, 2, 3]
    assert [k.words for k in DisruptionClass] == ["node agent", "traffic", "scheduler", "control"]


def _component(*parts: Disruption) -> Component:
    return Component(
        name="x",
        summary="",
        namespace="x",
        version="1",
        stacks=frozenset({Stack.STANDARD}),
        order=1,
        disruptions=parts,
    )


@pytest.mark.parametrize(
    ("parts", "headline", "said"),
    [
        pytest.param(CONTROL_ONLY, CONTROL, "control: restarts its controllers", id="the default"),
        pytest.param(
            (
                Disruption(CONTROL, "restarts the master"),
                Disruption(NODE_AGENT, "rolls it", _AGENT),
            ),
            NODE_AGENT,
            "node agent: rolls it; control: restarts the master",
            id="the worst part first, whatever the record's order",
        ),
        pytest.param(
            (Disruption(SCHEDULER, "restarts it"), Disruption(TRAFFIC, "rolls the proxies")),
            TRAFFIC,
            "traffic: rolls the proxies; scheduler: restarts it",
            id="traffic before scheduler",
        ),
    ],
)
def test_headline_and_words(
    parts: tuple[Disruption, ...], headline: DisruptionClass, said: str
) -> None:
    component = _component(*parts)
    assert component.disruption is headline
    assert component.disrupts == said


def test_a_component_with_no_part_is_refused() -> None:
    with pytest.raises(ValueError, match="name at least one part"):
        _component()


def test_the_dra_driver_says_what_its_upgrade_does_on_gpu_nodes() -> None:
    said = BY_NAME["nvidia-dra-driver-gpu"].disrupts
    assert said.startswith("node agent: restarts the kubelet plugin on every GPU node")


@pytest.mark.parametrize(
    ("kind", "agent", "valid"),
    [
        (NODE_AGENT, _AGENT, True),
        (NODE_AGENT, None, True),  # rolled by its chart or its own controller
        (CONTROL, _AGENT, False),  # rolled by node, and said to disrupt only control
        (CONTROL, None, True),
    ],
)
def test_only_a_node_agent_part_is_rolled_by_node(
    kind: DisruptionClass, agent: NodeAgent | None, valid: bool
) -> None:
    if valid:
        assert Disruption(kind, "restarts it", agent).agent is agent
    else:
        with pytest.raises(ValueError, match="only a node-agent part"):
            Disruption(kind, "restarts it", agent)


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.name)
def test_the_product_rolls_every_node_agent_it_installs(component: Component) -> None:
    """A shipped node-agent part is rolled a node at a time: none left to its chart."""
    parts = [d for d in component.disruptions if d.kind is NODE_AGENT]
    assert all(d.agent is not None for d in parts)
    assert component.node_agent == (parts[0].agent if parts else None)


def test_a_component_rolls_one_daemon_set_at_most() -> None:
    agent = Disruption(NODE_AGENT, "rolls it", _AGENT)
    with pytest.raises(ValueError, match="at most one node-agent part"):
        _component(agent, agent)
