"""``modelplane check``'s side of the checks: the plan's results, for a person.

The rules are the catalog's and the planner's, and reading the target is
``observe.facts``': this module only pretends a Provided-mode ServingStack,
runs the plan on what was observed, and summarises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient

from modelplane.api.models import API_GROUP, API_VERSION, KIND, ServingStack
from modelplane.catalog.components import COMPONENTS
from modelplane.observe.facts import observe_for_check
from modelplane.pins import Stack
from modelplane.plan import plan
from modelplane.plan.model import RequirementResult, RequirementStatus, Severity
from modelplane.plan.observed import Observed
from modelplane.plan.pull_secrets import PULL_SECRET_MISSING
from modelplane.plan.sources import Sources


def provided_stack(stack: Stack) -> ServingStack:
    """A ServingStack of ``stack`` in Provided mode, as ``modelplane check`` pretends one."""
    return ServingStack.model_validate(
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": "check", "namespace": "default"},
            "spec": {
                "stack": str(stack),
                "components": "Provided",
                "secrets": [{"type": "Kubeconfig", "name": "target", "key": "kubeconfig"}],
            },
        }
    )


def check_results(
    stack: Stack,
    observed: Observed,
    sources: Sources | None = None,
) -> list[RequirementResult]:
    """The plan's requirement results for the substrate, grouped by component.

    With the sources' image mirrors, a provided workload that pulls from a
    registry they name is a warning (``plan.provided_images``), as the
    operator's is; with their pull secrets, so is each one missing where the
    product's own pods would run (``plan.pull_secrets``). Neither is ever unmet.
    """
    p = plan(provided_stack(stack), observed, sources)
    results = p.requirements + [
        RequirementResult(
            component=m.component,
            requirement=f"pull Secret {m.secret} in {m.namespace}",
            status=RequirementStatus.WARNING,
            message=f"{PULL_SECRET_MISSING}: {m}: the product's pods there cannot pull from "
            "the mirror until it exists",
            severity=Severity.ADVISORY,
        )
        for m in p.missing_pull_secrets
    ]
    order = {c.name: i for i, c in enumerate(COMPONENTS)}
    # The product's own objects ("configuration") after the substrate.
    return sorted(results, key=lambda r: order.get(r.component, len(order)))


async def run_checks(
    client: AsyncClient,
    stack: Stack,
    sources: Sources | None = None,
) -> list[RequirementResult]:
    pull_secrets = sources.image_pull_secrets if sources is not None else ()
    observed = await observe_for_check(client, stack, pull_secrets)
    return check_results(stack, observed, sources)


@dataclass(frozen=True)
class Summary:
    met: int
    unmet: int
    warning: int
    unknown: int

    @property
    def requirements_met(self) -> bool:
        return self.unmet == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "met": self.met,
            "unmet": self.unmet,
            "warning": self.warning,
            "unknown": self.unknown,
            "requirementsMet": self.requirements_met,
        }


def summarize(results: list[RequirementResult]) -> Summary:
    def count(status: RequirementStatus) -> int:
        return sum(1 for r in results if r.status is status)

    # Only required results can be unmet; advisory ones are warnings at worst.
    return Summary(
        met=count(RequirementStatus.MET),
        unmet=sum(
            1
            for r in results
            if r.severity is Severity.REQUIRED and r.status is not RequirementStatus.MET
        ),
        warning=count(RequirementStatus.WARNING),
        unknown=count(RequirementStatus.UNKNOWN),
    )
