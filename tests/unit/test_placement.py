"""Which nodes a pod template may run on (catalog.placement): the scheduler's rules, and
what a malformed template is read as."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.catalog.facts import ObservedTaint
from modelplane.catalog.placement import (
    MAX_TERMS,
    NodeSelection,
    NodeTerm,
    ObservedToleration,
    Requirement,
    node_selection,
    placement,
    tolerations,
)

NAME = "gpu-0"
LABELS = {"gpu": "true", "zone": "a", "count": "8", "word": "x8", "empty": ""}
GPU_TAINT = ObservedTaint(key="nvidia.com/gpu", value="present", effect="NoSchedule")


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def _name(operator: str, *values: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": operator, "values": list(values)}


def _term(*exprs: Any, fields: list[Any] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields is not None:
        term["matchFields"] = fields
    return term


def _pod(*terms: Any, **spec: Any) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
        **spec,
    }


@pytest.mark.parametrize(
    ("case", "pod", "selected"),
    [
        # No selection at all: every node.
        ("nothing set", {}, True),
        (
            "preferred affinity only",
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": _term(_expr("gpu", "In", "false"))}
                        ]
                    }
                }
            },
            True,
        ),
        ("pod affinity only", {"affinity": {"podAffinity": {}}}, True),
        (
            "null required affinity",
            {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}
                }
            },
            True,
        ),
        # nodeSelector: every label equal.
        ("nodeSelector met", {"nodeSelector": {"gpu": "true", "zone": "a"}}, True),
        ("nodeSelector one label differs", {"nodeSelector": {"gpu": "true", "zone": "b"}}, False),
        ("nodeSelector label absent", {"nodeSelector": {"pool": "gpu"}}, False),
        ("nodeSelector empty value, label empty", {"nodeSelector": {"empty": ""}}, True),
        ("nodeSelector empty value, label absent", {"nodeSelector": {"pool": ""}}, False),
        # Each operator.
        ("In: value listed", _pod(_term(_expr("zone", "In", "b", "a"))), True),
        ("In: value not listed", _pod(_term(_expr("zone", "In", "b"))), False),
        ("In: label absent", _pod(_term(_expr("pool", "In", "a"))), False),
        ("NotIn: value not listed", _pod(_term(_expr("zone", "NotIn", "b"))), True),
        ("NotIn: value listed", _pod(_term(_expr("zone", "NotIn", "a", "b"))), False),
        ("NotIn: label absent", _pod(_term(_expr("pool", "NotIn", "a"))), True),
        ("Exists", _pod(_term(_expr("gpu", "Exists"))), True),
        ("Exists: absent", _pod(_term(_expr("pool", "Exists"))), False),
        (
            "Exists: null values",
            _pod(_term({"key": "gpu", "operator": "Exists", "values": None})),
            True,
        ),
        ("Exists: no values key", _pod(_term({"key": "gpu", "operator": "Exists"})), True),
        ("DoesNotExist", _pod(_term(_expr("pool", "DoesNotExist"))), True),
        ("DoesNotExist: present", _pod(_term(_expr("gpu", "DoesNotExist"))), False),
        ("Gt: greater", _pod(_term(_expr("count", "Gt", "7"))), True),
        ("Gt: equal", _pod(_term(_expr("count", "Gt", "8"))), False),
        ("Gt: leading zeros", _pod(_term(_expr("count", "Gt", "007"))), True),
        ("Gt: label not an integer", _pod(_term(_expr("word", "Gt", "1"))), False),
        ("Gt: label absent", _pod(_term(_expr("pool", "Gt", "1"))), False),
        ("Lt: less", _pod(_term(_expr("count", "Lt", "9"))), True),
        ("Lt: equal", _pod(_term(_expr("count", "Lt", "8"))), False),
        ("Lt: label not an integer", _pod(_term(_expr("gpu", "Lt", "9"))), False),
        # Terms ORed, requirements ANDed.
        (
            "OR: second term matches",
            _pod(_term(_expr("zone", "In", "b")), _term(_expr("gpu", "In", "true"))),
            True,
        ),
        (
            "OR: no term matches",
            _pod(_term(_expr("zone", "In", "b")), _term(_expr("gpu", "In", "no"))),
            False,
        ),
        ("AND: all met", _pod(_term(_expr("zone", "In", "a"), _expr("gpu", "Exists"))), True),
        (
            "AND: one not met",
            _pod(_term(_expr("zone", "In", "a"), _expr("gpu", "DoesNotExist"))),
            False,
        ),
        # matchFields: the node's name only, ANDed with the expressions.
        ("matchFields In", _pod(_term(fields=[_name("In", NAME)])), True),
        ("matchFields In another", _pod(_term(fields=[_name("In", "gpu-1")])), False),
        ("matchFields NotIn another", _pod(_term(fields=[_name("NotIn", "gpu-1")])), True),
        ("matchFields NotIn this", _pod(_term(fields=[_name("NotIn", NAME)])), False),
        (
            "matchFields AND expressions",
            _pod(_term(_expr("zone", "In", "b"), fields=[_name("In", NAME)])),
            False,
        ),
        (
            "matchFields and expressions met",
            _pod(_term(_expr("zone", "In", "a"), fields=[_name("In", NAME)])),
            True,
        ),
        # No term, or an empty one, selects nothing (nodeaffinity.LazyErrorNodeSelector).
        ("empty nodeSelectorTerms", _pod(), False),
        (
            "required affinity without terms",
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
            False,
        ),
        ("an empty term", _pod({}), False),
        ("empty lists in a term", _pod({"matchExpressions": [], "matchFields": []}), False),
        # nodeSelector and affinity together: both must select.
        (
            "selector and affinity met",
            _pod(_term(_expr("gpu", "Exists")), nodeSelector={"zone": "a"}),
            True,
        ),
        (
            "selector met, affinity not",
            _pod(_term(_expr("pool", "Exists")), nodeSelector={"zone": "a"}),
            False,
        ),
        (
            "affinity met, selector not",
            _pod(_term(_expr("gpu", "Exists")), nodeSelector={"zone": "b"}),
            False,
        ),
        # Malformed: the requirement's term selects nothing; other terms still count.
        ("unknown operator", _pod(_term(_expr("gpu", "Equals", "true"))), False),
        ("NotIn without values", _pod(_term(_expr("pool", "NotIn"))), False),
        ("Exists with values", _pod(_term(_expr("gpu", "Exists", "true"))), False),
        ("Gt not an integer", _pod(_term(_expr("count", "Gt", "seven"))), False),
        ("Gt with two values", _pod(_term(_expr("count", "Gt", "1", "2"))), False),
        ("Lt past int64", _pod(_term(_expr("count", "Lt", "9223372036854775808"))), False),
        ("Gt negative (no label value)", _pod(_term(_expr("count", "Gt", "-1"))), False),
        ("key with two slashes", _pod(_term(_expr("a/b/gpu", "DoesNotExist"))), False),
        ("key with an empty prefix", _pod(_term(_expr("/gpu", "DoesNotExist"))), False),
        ("key not a name", _pod(_term(_expr("-gpu", "DoesNotExist"))), False),
        ("value not a label value", _pod(_term(_expr("zone", "NotIn", "b c"))), False),
        ("value too long", _pod(_term(_expr("zone", "NotIn", "b" * 64))), False),
        ("key not a string", _pod(_term({"key": 1, "operator": "DoesNotExist"})), False),
        (
            "values not a list",
            _pod(_term({"key": "zone", "operator": "NotIn", "values": "b"})),
            False,
        ),
        (
            "a value not a string",
            _pod(_term({"key": "zone", "operator": "NotIn", "values": [1]})),
            False,
        ),
        ("requirement not a mapping", _pod(_term("zone NotIn b")), False),
        ("matchExpressions not a list", _pod({"matchExpressions": {"key": "gpu"}}), False),
        (
            "matchFields on a label",
            _pod(_term(fields=[{"key": "zone", "operator": "NotIn", "values": ["b"]}])),
            False,
        ),
        (
            "matchFields Exists",
            _pod(_term(fields=[{"key": "metadata.name", "operator": "Exists"}])),
            False,
        ),
        ("matchFields two names", _pod(_term(fields=[_name("In", NAME, "gpu-1")])), False),
        (
            "malformed AND met: the term fails",
            _pod(_term(_expr("gpu", "Exists"), _expr("zone", "Foo", "a"))),
            False,
        ),
        (
            "malformed term OR a good one",
            _pod(_term(_expr("gpu", "Foo")), _term(_expr("gpu", "Exists"))),
            True,
        ),
        ("term not a mapping OR a good one", _pod("gpu", _term(_expr("gpu", "Exists"))), True),
        (
            "nodeSelectorTerms not a list",
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": {"matchExpressions": []}
                        }
                    }
                }
            },
            False,
        ),
        (
            "required affinity not a mapping",
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
            False,
        ),
        ("nodeAffinity not a mapping", {"affinity": {"nodeAffinity": "gpu"}}, False),
        ("affinity not a mapping", {"affinity": ["gpu"]}, False),
        ("nodeSelector not a mapping", {"nodeSelector": ["gpu"]}, False),
        ("nodeSelector value not a string", {"nodeSelector": {"gpu": True}}, False),
        (
            "nodeSelector malformed, affinity met",
            _pod(_term(_expr("gpu", "Exists")), nodeSelector={"count": 8}),
            False,
        ),
        ("pod spec not a mapping", ["nodeSelector"], True),
    ],
)
def test_a_pod_template_selects_a_node_as_the_scheduler_does(
    case: str, pod: Any, selected: bool
) -> None:
    assert node_selection(pod).selects(NAME, LABELS) is selected, case


def test_terms_past_the_bound_select_nothing() -> None:
    misses = [_term(_expr("zone", "In", "b"))] * MAX_TERMS
    assert not node_selection(_pod(*misses, _term(_expr("gpu", "Exists")))).selects(NAME, LABELS)
    assert node_selection(_pod(*misses[1:], _term(_expr("gpu", "Exists")))).selects(NAME, LABELS)
    many = [f"v{i}" for i in range(300)]
    assert not node_selection(_pod(_term(_expr("zone", "In", "a", *many)))).selects(NAME, LABELS)


def test_a_selection_written_by_hand_is_matched_safely() -> None:
    # An --observed file's selection is not read by the reader: matching checks it again.
    def selects(*requirements: Requirement) -> bool:
        return NodeSelection(terms=[NodeTerm(labels=list(requirements))]).selects(NAME, LABELS)

    assert selects(Requirement(key="count", operator="Gt", values=["7"]))
    assert not selects(Requirement(key="count", operator="Gt", values=[]))
    assert not selects(Requirement(key="pool", operator="NotIn", values=[]))
    assert not selects(Requirement(key="gpu", operator="Exists", values=["true"]))
    assert not selects(Requirement(key="gpu", operator="Equals", values=["true"]))
    assert not NodeSelection(terms=[NodeTerm()]).selects(NAME, LABELS)
    wrong_field = Requirement(key="spec.unschedulable", operator="NotIn", values=["true"])
    assert not NodeSelection(terms=[NodeTerm(fields=[wrong_field])]).selects(NAME, LABELS)


TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("case", "pod_tolerations", "taints", "admitted"),
    [
        ("untainted", [], [], True),
        ("NoSchedule untolerated", [], [GPU_TAINT], False),
        (
            "NoExecute untolerated",
            [],
            [GPU_TAINT.model_copy(update={"effect": "NoExecute"})],
            False,
        ),
        (
            "PreferNoSchedule keeps nothing off",
            [],
            [GPU_TAINT.model_copy(update={"effect": "PreferNoSchedule"})],
            True,
        ),
        ("Exists on the key", [TOLERATE_GPU], [GPU_TAINT], True),
        (
            "Exists on the key, another effect",
            [{**TOLERATE_GPU, "effect": "NoExecute"}],
            [GPU_TAINT],
            False,
        ),
        ("Exists, no key: every taint", [{"operator": "Exists"}], [GPU_TAINT], True),
        ("Equal, the value", [{"key": "nvidia.com/gpu", "value": "present"}], [GPU_TAINT], True),
        (
            "Equal, another value",
            [{"key": "nvidia.com/gpu", "value": "absent"}],
            [GPU_TAINT],
            False,
        ),
        ("an unknown operator", [{"key": "nvidia.com/gpu", "operator": "Gte"}], [GPU_TAINT], False),
        (
            "one of two taints",
            [TOLERATE_GPU],
            [GPU_TAINT, ObservedTaint(key="maintenance", effect="NoExecute")],
            False,
        ),
        (
            "an effect not a string",
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": 1}],
            [GPU_TAINT],
            False,
        ),
        ("a key too long", [{"key": "k" * 400, "operator": "Exists"}], [GPU_TAINT], False),
        ("a toleration not a mapping", ["nvidia.com/gpu"], [GPU_TAINT], False),
    ],
)
def test_a_pod_template_runs_through_the_taints_it_tolerates(
    case: str, pod_tolerations: list[Any], taints: list[ObservedTaint], admitted: bool
) -> None:
    assert placement({"tolerations": pod_tolerations}).admits(NAME, LABELS, taints) is admitted, (
        case
    )


def test_placement_needs_both_selection_and_tolerations() -> None:
    pod = _pod(_term(_expr("gpu", "In", "true")), tolerations=[TOLERATE_GPU])
    assert placement(pod).admits(NAME, LABELS, [GPU_TAINT])
    assert not placement(pod).admits(NAME, {"zone": "a"}, [GPU_TAINT])
    assert not placement({**pod, "tolerations": []}).admits(NAME, LABELS, [GPU_TAINT])


def test_tolerations_are_read_as_the_api_writes_them() -> None:
    assert tolerations({"tolerations": [{"key": "a"}, {"operator": "Exists", "effect": None}]}) == [
        ObservedToleration(key="a"),
        ObservedToleration(operator="Exists"),
    ]
    assert tolerations({"tolerations": "a"}) == []
    assert tolerations(None) == []
