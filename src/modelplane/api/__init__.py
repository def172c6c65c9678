"""The ServingStack API: pydantic models of spec and status, and the hub CRD."""

from modelplane.api.models import API_GROUP, API_VERSION, KIND, ServingStack
from modelplane.api.spec import ServingStackSpec
from modelplane.api.status import ServingStackStatus
from modelplane.pins import ComponentsMode, Stack

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "ComponentsMode",
    "ServingStack",
    "ServingStackSpec",
    "ServingStackStatus",
    "Stack",
]
