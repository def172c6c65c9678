"""The ServingStack custom resource: its names on the hub, and the whole object.

The models are the single source of the API: the CRD's OpenAPI schema is
generated from them (see ``modelplane.api.crd``), so every limit, enum and
default written in them is what the hub's API server enforces too. The
object's parts have their modules: ``api.spec``, ``api.status``,
``api.metadata``, and the string grammars they use, ``api.grammar``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from modelplane.api.metadata import ObjectMeta
from modelplane.api.spec import ServingStackSpec
from modelplane.api.status import ServingStackStatus
from modelplane.untrusted import printable

API_GROUP = "infrastructure.modelplane.ai"
API_VERSION = "v1alpha1"
KIND = "ServingStack"
PLURAL = "servingstacks"
SHORT_NAME = "ss"


class ServingStack(BaseModel):
    """A whole ServingStack object as read from a manifest or the hub."""

    model_config = ConfigDict(
        validate_by_alias=True, validate_by_name=False, extra="forbid", frozen=True
    )

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: ServingStackSpec
    status: ServingStackStatus | None = None

    @model_validator(mode="before")
    @classmethod
    def _check_type(cls, data: Any) -> Any:
        if isinstance(data, dict):
            expected = f"{API_GROUP}/{API_VERSION}"
            # What the file holds is shown cut and printable: it may be 200 KB
            # or carry a terminal escape.
            if data.get("apiVersion") != expected:
                got = printable(repr(data.get("apiVersion")), 80)
                raise ValueError(f"apiVersion must be {expected}, got {got}")
            if data.get("kind") != KIND:
                got = printable(repr(data.get("kind")), 80)
                raise ValueError(f"kind must be {KIND}, got {got}")
        return data
