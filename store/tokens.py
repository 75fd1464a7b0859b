"""Bearer tokens ate issues itself: created with their grants, shown once, kept as a hash of the
secret, revoked; and the check of a presented token (`authenticate`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from domain.access import Grant, IssuedToken, new_token, parse_token, same_secret
from store.errors import NotFound
from store.sql import QUERIES as Q


@dataclass
class TokenRecord:
    """A token as listed (never its secret)."""

    token_id: str
    name: str
    grants: list[Grant]
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> TokenRecord:
        """Build from a row of `insert_token`/`get_token`/`list_tokens`."""
        return cls(
            token_id=row["id"],
            name=row["name"],
            grants=[Grant.parse(g) for g in row["grants"]],
            created_by=row["created_by"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
        )


class AccessTokens:
    """create, authenticate, all and revoke."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(
        self, name: str, grants: list[Grant], created_by: str, expires_at: datetime | None = None
    ) -> tuple[TokenRecord, IssuedToken]:
        """A new token with `grants`. Returns its record and the token to show once."""
        issued = new_token()
        row = await self.pool.fetchrow(
            Q["insert_token"],
            issued.token_id,
            name,
            issued.secret_hash,
            [g.text() for g in grants],
            created_by,
            expires_at,
        )
        return TokenRecord.from_row(row), issued

    async def authenticate(self, text: str) -> TokenRecord | None:
        """The token `text` names when it is an ate token, its secret matches, and it is neither
        revoked nor expired; else None (the caller says no more than "not valid")."""
        presented = parse_token(text)
        if presented is None:
            return None
        row = await self.pool.fetchrow(Q["get_token"], presented.token_id)
        if row is None or not same_secret(row["secret_hash"], presented.secret):
            return None
        record = TokenRecord.from_row(row)
        if record.revoked_at is not None:
            return None
        if record.expires_at is not None and record.expires_at <= datetime.now(UTC):
            return None
        return record

    async def all(self) -> list[TokenRecord]:
        """Every token not revoked, newest first."""
        return [TokenRecord.from_row(r) for r in await self.pool.fetch(Q["list_tokens"])]

    async def get(self, token_id: str) -> TokenRecord:
        """One token (revoked ones too). Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_token"], token_id)
        if row is None:
            raise NotFound(f"token {token_id} not found")
        return TokenRecord.from_row(row)

    async def revoke(self, token_id: str) -> None:
        """Revoke a token (idempotent). Raises NotFound."""
        if await self.pool.fetchval(Q["revoke_token"], token_id) is None:
            raise NotFound(f"token {token_id} not found")
