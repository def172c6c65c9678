"""The base of the plan's values: pydantic models that cannot change once made.

A plan, a diff or a health verdict is computed once and then read by the
reconciler, the status writer and the CLI; frozen, none of them can alter
what another reads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)
