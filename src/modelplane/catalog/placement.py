"""Which nodes a DaemonSet's pod may run on: the scheduler's rules, read defensively.

The DaemonSet controller runs a pod on a node when the pod template selects
the node and tolerates its NoSchedule and NoExecute taints (kubernetes
pkg/controller/daemon/daemon_controller.go, ``predicates``). Selecting is
k8s.io/component-helpers scheduling/corev1/nodeaffinity
(``GetRequiredNodeAffinity``, ``RequiredNodeAffinity.Match``):

- ``nodeSelector``: every label equal;
- ``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``:
  its ``nodeSelectorTerms`` ORed; within a term its ``matchExpressions``
  (on labels: In, NotIn, Exists, DoesNotExist, Gt, Lt, as
  k8s.io/apimachinery pkg/labels ``Requirement.Matches``) and its
  ``matchFields`` (on ``metadata.name`` only: In or NotIn of one value)
  ANDed. A term with no requirement selects nothing, and so does a required
  affinity with no term (``LazyErrorNodeSelector.Match`` finds no term that
  matches); an absent required affinity selects every node.

Tolerating is core/v1 ``Toleration.ToleratesTaint``.

Everything here is read from a target or a stored manifest. A requirement
the scheduler cannot parse (an unknown operator, the wrong number of
values, a Gt or Lt value that is not an integer, a key or value that is no
label's, labels.NewRequirement's checks) makes its term select nothing, as
the scheduler's parse error does; a ``nodeSelector`` or an affinity of the
wrong shape selects nothing; a toleration of the wrong shape tolerates
nothing. Nothing here raises on what it reads: a malformed template is
never placed on more nodes than the scheduler would place it. What a
selection keeps is bounded (``MAX_TERMS``, ``MAX_REQUIREMENTS``,
``MAX_VALUES``): a term past the bounds is read as selecting nothing too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

# The most tolerations kept of one pod template (and taints of one node): real ones carry a few.
MAX_TAINTS = 64
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# The most node selector labels, terms, requirements (in all terms) and values
# (in all requirements) kept of one pod template; the DRA driver's kubelet
# plugin has five terms of one requirement of one value.
MAX_SELECTOR = 64
MAX_TERMS = 32
MAX_REQUIREMENTS = 64
MAX_VALUES = 256

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# The one field a matchFields requirement may name (core/v1 validation).
NODE_NAME_FIELD = "metadata.name"

# k8s.io/apimachinery pkg/util/validation: IsQualifiedName, IsValidLabelValue,
# IsDNS1123Subdomain. ASCII only, as Go's regexp classes are.
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_MAX, _PREFIX_MAX = 63, 253
# strconv.ParseInt(s, 10, 64): an optional sign, ASCII digits, within int64.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)
# The longest toleration fields kept: a label key (prefix, "/", name), a label
# value, and more than any operator or effect the API knows.
_KEY_MAX = _PREFIX_MAX + 1 + _NAME_MAX
_OPERATOR_MAX, _EFFECT_MAX = 16, 32


class TaintLike(Protocol):
    """A node's taint, as any model of one holds it."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


class ObservedToleration(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: TaintLike) -> bool:
        """The scheduler's rule (core/v1 Toleration.ToleratesTaint); an unknown operator
        tolerates nothing."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        if self.operator in ("Equal", ""):
            return self.key == taint.key and self.value == taint.value
        return False


class Requirement(BaseModel):
    """One requirement of a node selector term: a label's, or (matchFields) the node name's."""

    model_config = ConfigDict(frozen=True)

    key: str
    operator: str
    values: list[str] = Field(default_factory=list)

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        """labels ``Requirement.Matches``; one the scheduler could not parse matches nothing."""
        if not _counted(self.operator, self.values):
            return False
        have = labels.get(self.key)
        if self.operator == "In":
            return have is not None and have in self.values
        if self.operator == "NotIn":
            return have is None or have not in self.values
        if self.operator == "Exists":
            return have is not None
        if self.operator == "DoesNotExist":
            return have is None
        number, bound = _integer(have), _integer(self.values[0])
        if number is None or bound is None:
            return False
        return number > bound if self.operator == "Gt" else number < bound

    def matches_name(self, name: str) -> bool:
        if self.key != NODE_NAME_FIELD or len(self.values) != 1:
            return False
        if self.operator == "In":
            return name == self.values[0]
        if self.operator == "NotIn":
            return name != self.values[0]
        return False


class NodeTerm(BaseModel):
    """One ``nodeSelectorTerm``: its matchExpressions and matchFields, ANDed."""

    model_config = ConfigDict(frozen=True)

    labels: list[Requirement] = Field(default_factory=list)
    fields: list[Requirement] = Field(default_factory=list)

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not (self.labels or self.fields):
            return False
        return all(r.matches_labels(labels) for r in self.labels) and all(
            r.matches_name(name) for r in self.fields
        )


class NodeSelection(BaseModel):
    """Which nodes a pod template selects: its nodeSelector and required node affinity.

    ``terms`` is None when the template has no required node affinity (it
    selects by its nodeSelector alone); ``[]`` selects no node. The terms
    kept are those that can match: one that cannot is left out when read.
    """

    model_config = ConfigDict(frozen=True)

    node_selector: dict[str, str] = Field(default_factory=dict)
    terms: list[NodeTerm] | None = None

    def selects(self, name: str, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        return self.terms is None or any(t.matches(name, labels) for t in self.terms)


class Placement(BaseModel):
    """Where a pod template may run: the nodes it selects, and the taints it tolerates."""

    model_config = ConfigDict(frozen=True)

    selection: NodeSelection = Field(default_factory=NodeSelection)
    tolerations: list[ObservedToleration] = Field(default_factory=list)

    def tolerates(self, taint: TaintLike) -> bool:
        return any(t.tolerates(taint) for t in self.tolerations)

    def admits(self, name: str, labels: Mapping[str, str], taints: Iterable[TaintLike]) -> bool:
        """Whether the DaemonSet controller would run the pod on this node (its name,
        labels and taints; only NoSchedule and NoExecute ones keep it off)."""
        return self.selection.selects(name, labels) and all(
            self.tolerates(t) for t in taints if t.effect in BLOCKING_EFFECTS
        )


# ---- reading a pod spec ---------------------------------------------------------------


def placement(pod: object) -> Placement:
    """A pod spec's (``spec.template.spec``'s) placement, as far as it is well formed."""
    return Placement(selection=node_selection(pod), tolerations=tolerations(pod))


def tolerations(pod: object) -> list[ObservedToleration]:
    """A pod spec's tolerations, those well formed; the rest tolerate nothing."""
    found = pod.get("tolerations") if isinstance(pod, Mapping) else None
    read = (_toleration(t) for t in (found if isinstance(found, list) else [])[:MAX_TAINTS])
    return [t for t in read if t is not None]


def _toleration(raw: object) -> ObservedToleration | None:
    if not isinstance(raw, Mapping):
        return None
    limits = {"key": _KEY_MAX, "operator": _OPERATOR_MAX, "value": _NAME_MAX, "effect": _EFFECT_MAX}
    read: dict[str, str] = {}
    for name, limit in limits.items():
        value = raw.get(name)
        if value is None:
            continue
        # Longer than the API admits: no taint could be tolerated by it exactly.
        if not isinstance(value, str) or len(value) > limit:
            return None
        read[name] = value
    return ObservedToleration(**{**read, "operator": read.get("operator") or "Equal"})


def node_selection(pod: object) -> NodeSelection:
    """A pod spec's nodeSelector and required node affinity; a malformed part selects nothing."""
    spec = pod if isinstance(pod, Mapping) else {}
    selector = _node_selector(spec.get("nodeSelector"))
    terms = _required_terms(spec.get("affinity"))
    if selector is None:
        return NodeSelection(terms=[])
    return NodeSelection(node_selector=selector, terms=terms)


def _node_selector(raw: object) -> dict[str, str] | None:
    """The nodeSelector's labels; None when it cannot be read (it then selects nothing)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or len(raw) > MAX_SELECTOR:
        return None
    for k, v in raw.items():
        # A label longer than the API admits is on no node.
        if not (isinstance(k, str) and isinstance(v, str)) or len(k) > _KEY_MAX:
            return None
        if len(v) > _NAME_MAX:
            return None
    return dict(raw)


def _required_terms(affinity: object) -> list[NodeTerm] | None:
    """The required node affinity's terms that can match; None when there is none."""
    if affinity is None:
        return None
    if not isinstance(affinity, Mapping):
        return []
    node = affinity.get("nodeAffinity")
    if node is None:
        return None
    if not isinstance(node, Mapping):
        return []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    if not isinstance(required, Mapping):
        return []
    found = required.get("nodeSelectorTerms")
    out: list[NodeTerm] = []
    requirements = values = 0
    for raw in (found if isinstance(found, list) else [])[:MAX_TERMS]:
        term = _term(raw)
        if term is None:
            continue
        kept = [*term.labels, *term.fields]
        requirements += len(kept)
        values += sum(len(r.values) for r in kept)
        if requirements > MAX_REQUIREMENTS or values > MAX_VALUES:
            break
        out.append(term)
    return out


def _term(raw: object) -> NodeTerm | None:
    """A term that can match; None for an empty or malformed one (it matches nothing)."""
    if not isinstance(raw, Mapping):
        return None
    labels = _requirements(raw.get("matchExpressions"), _label_requirement)
    fields = _requirements(raw.get("matchFields"), _field_requirement)
    if labels is None or fields is None or not (labels or fields):
        return None
    return NodeTerm(labels=labels, fields=fields)


def _requirements(raw: object, read: _Reader) -> list[Requirement] | None:
    """Every requirement of a list, read; None if one is malformed (the term then fails)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return None
    out = []
    for item in raw:
        requirement = read(item)
        if requirement is None:
            return None
        out.append(requirement)
    return out


class _Reader(Protocol):
    def __call__(self, raw: object, /) -> Requirement | None: ...


def _parts(raw: object) -> tuple[str, str, list[str]] | None:
    if not isinstance(raw, Mapping):
        return None
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    values = [] if values is None else values
    if not (isinstance(key, str) and isinstance(operator, str) and isinstance(values, list)):
        return None
    if not all(isinstance(v, str) for v in values):
        return None
    return key, operator, values


def _label_requirement(raw: object) -> Requirement | None:
    parts = _parts(raw)
    if parts is None:
        return None
    key, operator, values = parts
    if not (_counted(operator, values) and _label_key(key) and all(map(_label_value, values))):
        return None
    return Requirement(key=key, operator=operator, values=values)


def _field_requirement(raw: object) -> Requirement | None:
    parts = _parts(raw)
    if parts is None:
        return None
    key, operator, values = parts
    if key != NODE_NAME_FIELD or operator not in ("In", "NotIn") or len(values) != 1:
        return None
    if len(values[0]) > _PREFIX_MAX:  # longer than a node's name can be
        return None
    return Requirement(key=key, operator=operator, values=values)


def _counted(operator: str, values: list[str]) -> bool:
    """Whether a label requirement has the values its operator takes (labels.NewRequirement)."""
    if operator in ("In", "NotIn"):
        return len(values) > 0
    if operator in ("Exists", "DoesNotExist"):
        return not values
    if operator in ("Gt", "Lt"):
        return len(values) == 1 and _integer(values[0]) is not None
    return False


def _integer(text: str | None) -> int | None:
    if text is None or not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if number in _INT64 else None


def _label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (
        0 < len(prefix) <= _PREFIX_MAX and "/" not in prefix and _DNS_SUBDOMAIN.fullmatch(prefix)
    ):
        return False
    return len(name) <= _NAME_MAX and _NAME.fullmatch(name) is not None


def _label_value(value: str) -> bool:
    return value == "" or (len(value) <= _NAME_MAX and _NAME.fullmatch(value) is not None)
