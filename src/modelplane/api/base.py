"""The base of every ServingStack model: the wire's names, and nothing unknown."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Camel-case on the wire, snake_case in Python, unknown fields refused.

    Input is read by alias only: the API server knows only the wire names and
    refuses ``nvidia_driver_root``, so the models (and ``render``) must too.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        extra="forbid",
        frozen=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # The API server prunes a null from a field that is not nullable
        # before it defaults and validates, so "className: null" is the
        # default there; the models read it the same way.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data
