"""Planning: from a ServingStack and what is observed on its target, everything to do."""

from modelplane.plan.model import Plan
from modelplane.plan.observed import Observed
from modelplane.plan.planner import plan

__all__ = ["Observed", "Plan", "plan"]
