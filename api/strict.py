"""The bases of every request body: limits on the document (depth, size, string length, NUL and
lone surrogates, `domain.documents`) for all of them; unknown fields refused (`Strict`, so a typo
names the field) or ignored (`Tolerant`, for atelets that may be newer than this API)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from domain.documents import DocumentError, check_document
from domain.idle import PolicyError

T = TypeVar("T")

DOCUMENT_LIMIT = "document_limit"
"""The pydantic error type of a broken document limit; its ctx carries the `path` below the
model's own location and the `problem` (`api.errors.validation_message` joins them)."""


NESTED_FIELD = "nested_field"
"""The pydantic error type of a field found wrong below the model's own location (a policy's
step, say); its ctx carries the `path` below it and the `problem`, as DOCUMENT_LIMIT's does."""


def nested_error(path: str, problem: str) -> PydanticCustomError:
    """The error of a value wrong at `path` below the field being validated (e.g. `[1].action`)."""
    return PydanticCustomError(NESTED_FIELD, "{problem}", {"path": path, "problem": problem})


def policy_checked(parse: Callable[[Any], T], value: Any) -> T:
    """`parse(value)` (a `domain.idle` policy parser), its PolicyError raised as a NESTED_FIELD
    error naming where below the field (`[1].action`)."""
    try:
        return parse(value)
    except PolicyError as error:
        raise nested_error(error.path, error.problem) from None


def within_limits(data: Any) -> Any:
    """`data` when it keeps the document limits.

    Raises:
        PydanticCustomError: DOCUMENT_LIMIT, with the path and the problem.
    """
    try:
        check_document(data)
    except DocumentError as error:
        raise PydanticCustomError(DOCUMENT_LIMIT, "{problem}", {"path": error.path, "problem": error.problem}) from None
    return data


class _Checked(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        return within_limits(data)


class Strict(_Checked):
    """Base: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Tolerant(_Checked):
    """Base: unknown fields are ignored (and never stored)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
