"""Per-ServingStack series: what each stack's last reconcile found, by namespace and name.

Rendered by a collector from an in-memory snapshot per stack, rather than
kept as labelled prometheus_client metrics: a stack that goes takes its
series with it in one ``forget``, where labelled children would have to be
removed one label set at a time (and one left behind is a series that never
ends). Every label value comes from a spec or a target, so each is made
printable and cut (``LABEL_VALUE``), and each stack has at most
``MAX_CONDITIONS`` conditions and ``MAX_COMPONENTS`` components.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from modelplane.untrusted import printable

# Longest label value copied from a spec or a target (a version, a state).
LABEL_VALUE = 64
MAX_CONDITIONS = 16
MAX_COMPONENTS = 32
# Helm (component, action, outcome) triples one stack keeps counts of: the
# catalog's components times a handful of actions and two outcomes.
MAX_HELM_KEYS = 256
CONDITION_STATUSES = ("True", "False", "Unknown")


def _value(text: object) -> str:
    return printable(str(text), LABEL_VALUE)


@dataclass(frozen=True)
class ComponentSeries:
    name: str
    state: str
    installed: str  # "" while not known to be in place
    desired: str


@dataclass
class StackSeries:
    """What one stack's series say; each field is replaced whole, never edited in place."""

    ready: bool = False
    # (type, status) of each condition, as written to the stack's status.
    conditions: tuple[tuple[str, str], ...] = ()
    components: tuple[ComponentSeries, ...] = ()
    gpus: int | None = None
    last_success: float | None = None
    # (component, action, outcome) -> helm actions run.
    helm_actions: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # component -> release workloads restored from their stored manifests.
    drift_corrections: dict[str, int] = field(default_factory=dict)


def components_from_status(
    status: Mapping[str, Any], in_place: Callable[[str], bool]
) -> tuple[ComponentSeries, ...]:
    """Each component of ``status.components``; ``in_place`` tells whether its version is there."""
    found = []
    for c in list(status.get("components") or [])[:MAX_COMPONENTS]:
        name, version = _value(c.get("name", "")), _value(c.get("version", ""))
        found.append(
            ComponentSeries(
                name=name,
                state=_value(c.get("state", "")),
                installed=version if in_place(str(c.get("name", ""))) else "",
                desired=version,
            )
        )
    return tuple(found)


def conditions_from_status(status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    conditions = list(status.get("conditions") or [])[:MAX_CONDITIONS]
    return tuple((_value(c.get("type", "")), str(c.get("status", ""))) for c in conditions)


class StackSeriesCollector(Collector):
    """Renders every stack's snapshot; safe to update from the loop while a scrape runs."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        watch_restarts: Callable[[str], int] = lambda _: 0,
    ) -> None:
        self._lock = threading.Lock()
        self._stacks: dict[tuple[str, str], StackSeries] = {}
        self._clock = clock
        # Counted by the target watches themselves, by ``namespace/name``.
        self._watch_restarts = watch_restarts

    # -- updates -------------------------------------------------------------

    def _update(self, key: tuple[str, str], change: Callable[[StackSeries], StackSeries]) -> None:
        with self._lock:
            self._stacks[key] = change(self._stacks.get(key) or StackSeries())

    def reconciled(
        self,
        key: tuple[str, str],
        status: Mapping[str, Any],
        *,
        succeeded: bool,
        in_place: Callable[[str], bool],
        gpus: int | None,
    ) -> None:
        """Record what one reconcile reported in ``status`` (before the hub's merge)."""
        conditions = conditions_from_status(status)
        ready = ("Ready", "True") in conditions
        components = components_from_status(status, in_place)
        now = self._clock()

        def change(s: StackSeries) -> StackSeries:
            return replace(
                s,
                ready=ready,
                conditions=conditions,
                # A reconcile stopped before planning says nothing of them.
                components=components or s.components,
                gpus=gpus if gpus is not None else s.gpus,
                last_success=now if succeeded else s.last_success,
            )

        self._update(key, change)

    def helm_action(self, key: tuple[str, str], component: str, action: str, outcome: str) -> None:
        triple = (_value(component), _value(action), _value(outcome))

        def change(s: StackSeries) -> StackSeries:
            if triple not in s.helm_actions and len(s.helm_actions) >= MAX_HELM_KEYS:
                return s
            return replace(
                s, helm_actions={**s.helm_actions, triple: s.helm_actions.get(triple, 0) + 1}
            )

        self._update(key, change)

    def drift_corrected(self, key: tuple[str, str], component: str) -> None:
        name = _value(component)

        def change(s: StackSeries) -> StackSeries:
            if name not in s.drift_corrections and len(s.drift_corrections) >= MAX_COMPONENTS:
                return s
            counts = {**s.drift_corrections, name: s.drift_corrections.get(name, 0) + 1}
            return replace(s, drift_corrections=counts)

        self._update(key, change)

    def forget(self, key: tuple[str, str]) -> None:
        """The stack is gone from this operator: every series of it goes."""
        with self._lock:
            self._stacks.pop(key, None)

    def stacks(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._stacks)

    # -- rendering -----------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        with self._lock:
            stacks = sorted(self._stacks.items())
        restarts = {key: self._watch_restarts(f"{key[0]}/{key[1]}") for key, _ in stacks}
        yield from _render(stacks, restarts)

    def describe(self) -> Iterable[Any]:
        # Nothing to describe at registration: the families depend on the stacks.
        return ()


def _render(
    stacks: list[tuple[tuple[str, str], StackSeries]], watch_restarts: Mapping[tuple[str, str], int]
) -> Iterator[Any]:
    stack = ["namespace", "name"]
    ready = GaugeMetricFamily(
        "modelplane_stack_ready", "1 when the stack's Ready condition is True.", labels=stack
    )
    cond = GaugeMetricFamily(
        "modelplane_stack_condition",
        "Each condition of the stack: 1 for its current status, 0 for the others.",
        labels=[*stack, "type", "status"],
    )
    state = GaugeMetricFamily(
        "modelplane_component_state",
        "1 for each component's current state.",
        labels=[*stack, "component", "state"],
    )
    version = GaugeMetricFamily(
        "modelplane_component_version_info",
        "Each component's desired version, and the installed one when it is in place.",
        labels=[*stack, "component", "installed", "desired"],
    )
    gpus = GaugeMetricFamily(
        "modelplane_stack_gpus",
        "GPU devices the stack's target publishes (status.target.gpus).",
        labels=stack,
    )
    success = GaugeMetricFamily(
        "modelplane_stack_last_success_timestamp_seconds",
        "When a reconcile of the stack last finished with nothing blocked or failed.",
        labels=stack,
    )
    helm = CounterMetricFamily(
        "modelplane_stack_helm_actions",
        "Helm actions run for the stack, by component, action and outcome.",
        labels=[*stack, "component", "action", "outcome"],
    )
    drift = CounterMetricFamily(
        "modelplane_stack_release_drift_corrections",
        "Release workloads deleted or edited by hand and restored, by component.",
        labels=[*stack, "component"],
    )
    restarts = CounterMetricFamily(
        "modelplane_stack_watch_restarts",
        "Target watches of the stack that broke and listed again.",
        labels=stack,
    )
    for (namespace, name), s in stacks:
        who = [namespace, name]
        ready.add_metric(who, 1.0 if s.ready else 0.0)
        for type_, status in s.conditions:
            for candidate in CONDITION_STATUSES:
                cond.add_metric([*who, type_, candidate], 1.0 if status == candidate else 0.0)
        for c in s.components:
            state.add_metric([*who, c.name, c.state], 1.0)
            version.add_metric([*who, c.name, c.installed, c.desired], 1.0)
        if s.gpus is not None:
            gpus.add_metric(who, float(s.gpus))
        if s.last_success is not None:
            success.add_metric(who, s.last_success)
        for (component, action, outcome), count in sorted(s.helm_actions.items()):
            helm.add_metric([*who, component, action, outcome], float(count))
        # Each component's count is there from 0, so that its first
        # correction is an increase a rule over a window sees.
        counted = {c.name: 0 for c in s.components} | s.drift_corrections
        for component, count in sorted(counted.items()):
            drift.add_metric([*who, component], float(count))
        restarts.add_metric(who, float(watch_restarts.get((namespace, name), 0)))
    yield from (ready, cond, state, version, gpus, success, helm, drift, restarts)


def key_of(label: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of a stack's ``namespace/name`` label; None without one."""
    namespace, sep, name = label.partition("/")
    return (namespace, name) if sep and namespace and name else None
