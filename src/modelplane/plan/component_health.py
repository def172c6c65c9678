"""A component's health: the worst of its workloads', by one documented rule.

Like cluster-api's ``Ready`` summary, the component's state and reason are
derived from its workloads' verdicts (``plan.health.judge``), never written
by hand: the worst state, then the worst reason by ``RANK``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from modelplane.plan.frozen import Frozen
from modelplane.plan.health import MAX_MESSAGE, RANK, STATE_RANK, Health, Reason, State
from modelplane.plan.workloads import MAX_NAME
from modelplane.untrusted import printable

# The most workloads a component's message names before "and N more".
MAX_NAMED = 3


class ComponentHealth(Frozen):
    component: str
    state: State
    reason: Reason
    message: str
    workloads: list[Health] = Field(default_factory=list)


def component_health(component: str, judged: Sequence[Health]) -> ComponentHealth:
    """A component is as healthy as its least healthy workload.

    Its reason is the worst workload's (``RANK``); its message names that
    workload's words first, then the others not healthy, up to
    ``MAX_NAMED``. A component that runs no workload (CRDs, RBAC) is healthy.
    """
    name = printable(component, MAX_NAME)
    if not judged:
        return ComponentHealth(
            component=name, state=State.HEALTHY, reason=Reason.AVAILABLE, message="no workloads"
        )
    ordered = sorted(
        judged, key=lambda h: (STATE_RANK.index(h.state), RANK.index(h.reason), h.key.shown)
    )
    worst = ordered[0]
    if worst.state is State.HEALTHY:
        message = f"{len(judged)} workloads available" if len(judged) > 1 else worst.message
        return ComponentHealth(
            component=name,
            state=State.HEALTHY,
            reason=Reason.AVAILABLE,
            message=printable(message, MAX_MESSAGE),
            workloads=list(judged),
        )
    unhealthy = [h for h in ordered if not h.healthy]
    named = [h.message for h in unhealthy[:MAX_NAMED]]
    rest = len(unhealthy) - len(named)
    if rest:
        named.append(f"and {rest} more workloads not available")
    return ComponentHealth(
        component=name,
        state=worst.state,
        reason=worst.reason,
        message=printable("; ".join(named), MAX_MESSAGE),
        workloads=list(judged),
    )
