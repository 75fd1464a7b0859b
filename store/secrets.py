"""Secrets as PostgreSQL keeps them: sealed values (nonce, ciphertext and tag) with the ID of the
key that sealed them, and metadata that may be shown. The store neither sees a key nor a value:
the api-server seals and opens (`api/secret_box.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from store.atespaces import Atespaces
from store.errors import AlreadyExists, NotFound
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class SecretRecord:
    """A secret as listed: never its value.

    Attributes:
        size_bytes: The value's length in bytes.
        key_id: The key of the ring that sealed it (a rotation shows which are left to re-seal).
    """

    atespace: str
    name: str
    key_id: str
    size_bytes: int
    created_by: str
    created_at: datetime
    updated_at: datetime
    type: str = "opaque"
    """`opaque` or `registry` (`domain.registry_credentials.SecretType`)."""
    registry: str | None = None
    """The registry (`host[:port]`) a `registry` secret is for; None for an opaque one."""

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> SecretRecord:
        """Build from a row of `insert_secret`, `list_secrets` or `get_secret`."""
        return cls(
            atespace=row["atespace"], name=row["name"], key_id=row["key_id"], size_bytes=row["size_bytes"],
            created_by=row["created_by"], created_at=row["created_at"], updated_at=row["updated_at"],
            type=row["type"], registry=row["registry"],
        )  # fmt: skip


@dataclass(frozen=True)
class SealedSecret:
    """A secret's sealed value, to be opened with key `key_id`."""

    atespace: str
    name: str
    key_id: str
    sealed: bytes
    type: str = "opaque"
    registry: str | None = None


class Secrets:
    """create, all, get, sealed, delete, and what a key rotation needs (sealed_by_others, reseal)."""

    def __init__(self, pool: asyncpg.Pool, atespaces: Atespaces) -> None:
        self.pool = pool
        self.atespaces = atespaces

    async def create(
        self, atespace: str, name: str, key_id: str, sealed: bytes, size_bytes: int, created_by: str,
        type: str = "opaque", registry: str | None = None,
    ) -> SecretRecord:
        """Store a new secret (`type` `opaque`, or `registry` with the `registry` it is for).

        Raises:
            NotFound: no such atespace.
            AlreadyExists: the atespace has a secret of that name.
        """
        await self.atespaces.get(atespace)
        try:
            row = await self.pool.fetchrow(Q["insert_secret"], atespace, name, key_id, sealed, size_bytes, created_by,
                                       type, registry)  # fmt: skip
        except asyncpg.ForeignKeyViolationError:
            raise NotFound(f"atespace {atespace} not found") from None
        if row is None:
            raise AlreadyExists(
                f"atespace {atespace} already has a secret named {name}; delete it first "
                f"('ate delete secret {name} -a {atespace}')"
            )
        return SecretRecord.from_row(row)

    async def all(self, atespace: str) -> list[SecretRecord]:
        """The atespace's secrets by name. Raises NotFound: no such atespace."""
        await self.atespaces.get(atespace)
        return [SecretRecord.from_row(r) for r in await self.pool.fetch(Q["list_secrets"], atespace)]

    async def get(self, atespace: str, name: str) -> SecretRecord:
        """One secret's metadata. Raises NotFound: no such atespace or secret."""
        row = await self.pool.fetchrow(Q["get_secret"], atespace, name)
        if row is None:
            await self.atespaces.get(atespace)
            raise NotFound(f"secret {name} not found in atespace {atespace} (see 'ate get secrets -a {atespace}')")
        return SecretRecord.from_row(row)

    async def sealed(self, atespace: str, name: str) -> SealedSecret:
        """One secret's sealed value. Raises NotFound: no such atespace or secret."""
        row = await self.pool.fetchrow(Q["get_sealed_secret_of_type"], atespace, name)
        if row is None:
            await self.get(atespace, name)  # raises the NotFound that says which is missing
            raise NotFound(f"secret {name} not found in atespace {atespace}")  # deleted meanwhile
        return SealedSecret(atespace, name, row["key_id"], bytes(row["sealed"]), row["type"], row["registry"])

    async def pull_secrets_for_node(self, node: str, image: str, registry: str, limit: int = 20) -> list[SealedSecret]:
        """The registry secrets for `registry` that `node` may pull `image` (a pinned reference, as
        a template records it) with: those listed in `imagePullSecrets` by the templates that run
        `image` and whose sandbox class the node's active workers serve; at most `limit`."""
        rows = await self.pool.fetch(Q["pull_secrets_for_node"], node, image, registry, limit)
        return [SealedSecret(r["atespace"], r["name"], r["key_id"], bytes(r["sealed"]), "registry", r["registry"])
                for r in rows]  # fmt: skip

    async def delete(self, atespace: str, name: str) -> None:
        """Delete a secret. Raises NotFound: no such atespace or secret."""
        if await self.pool.fetchval(Q["delete_secret"], atespace, name) is None:
            await self.get(atespace, name)
            raise NotFound(f"secret {name} not found in atespace {atespace}")

    async def sealed_by_others(self, primary_key_id: str, limit: int = 100) -> list[SealedSecret]:
        """Up to `limit` secrets sealed by another key than `primary_key_id`."""
        rows = await self.pool.fetch(Q["secrets_sealed_by_others"], primary_key_id, limit)
        return [SealedSecret(r["atespace"], r["name"], r["key_id"], bytes(r["sealed"])) for r in rows]

    async def reseal(self, old: SealedSecret, key_id: str, sealed: bytes) -> bool:
        """Replace `old`'s sealed value by `sealed` (under `key_id`) unless it changed meanwhile;
        returns whether it was replaced."""
        done = await self.pool.fetchval(
            Q["reseal_secret"], old.atespace, old.name, old.key_id, old.sealed, key_id, sealed
        )
        return done is not None
