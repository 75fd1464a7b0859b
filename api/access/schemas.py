"""Pydantic models of the access routes: tokens, access reviews, whoami."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from api.strict import Strict
from domain.access import Grant, Role

MAX_TOKEN_SECONDS = 10 * 365 * 24 * 3600
"""The longest expiry a token may be given (ten years)."""


class TokenCreate(Strict):
    """POST body of a token: its name, its grants (`<role>[:<atespace>[/<actor>]]`, e.g.
    `operator:demo`, `user:demo/counter`, `cluster-viewer`) and an optional lifetime."""

    name: str = Field(max_length=63)
    grants: list[str] = Field(min_length=1, max_length=32)
    expires_in_seconds: int | None = Field(default=None, ge=60, le=MAX_TOKEN_SECONDS)

    @field_validator("grants")
    @classmethod
    def _grants(cls, values: list[str]) -> list[str]:
        for value in values:
            if len(value) > 200:
                raise ValueError("a grant is at most 200 characters")
            grant = Grant.parse(value)
            if grant.role == Role.NODE:
                raise ValueError("node grants come from node certificates, never from tokens")
        return values


class TokenPublic(BaseModel):
    """A token as listed: never its secret."""

    token_id: str
    name: str
    grants: list[str]
    created_by: str
    created_at: datetime
    expires_at: datetime | None


class TokenCreated(TokenPublic):
    """A new token, with the secret shown this once (`token`)."""

    token: str


class AccessReviewCreate(Strict):
    """May the bearer of `token` reach actor `atespace`/`actor` through the router?"""

    token: str = Field(max_length=8192)
    atespace: str = Field(max_length=63)
    actor: str = Field(max_length=63)


class AccessReviewResult(BaseModel):
    """`allowed` when the token is valid and grants reaching that actor; `authenticated` tells a
    bad token (401 at the router) from a valid one without the grant (403)."""

    authenticated: bool
    allowed: bool
    principal: str | None = None


class WhoAmI(BaseModel):
    """The caller as the API sees it."""

    name: str
    grants: list[str]
