"""The base of every request body: unknown fields are refused, so a typo names the field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
