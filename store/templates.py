"""Actor templates: immutable, each with the phase of its golden snapshot (Pending, Ready, Failed)."""

from __future__ import annotations

import asyncpg

from domain.templates import ActorTemplateSpec
from store.atespaces import Atespaces
from store.errors import AlreadyExists, FailedPrecondition, NotFound
from store.records import TemplateRecord
from store.sql import QUERIES as Q


class Templates:
    """create, get, of_atespace, set_phase and delete."""

    def __init__(self, pool: asyncpg.Pool, atespaces: Atespaces) -> None:
        self.pool = pool
        self.atespaces = atespaces

    async def create(self, atespace: str, name: str, spec: ActorTemplateSpec) -> TemplateRecord:
        """Create a template in phase Pending (the spec stored as its document).

        Raises:
            NotFound: unknown atespace.
            AlreadyExists: the name is taken.
        """
        await self.atespaces.get(atespace)
        row = await self.pool.fetchrow(Q["create_template"], atespace, name, spec.document())
        if row is None:
            message = f"actor template {atespace}/{name} already exists (templates are immutable)"
            existing = await self.pool.fetchrow(Q["get_template"], atespace, name)
            if existing is not None and existing["phase"] == "Failed":  # what to do about a failed one
                message += (f"; it is Failed ({existing['reason']}): delete it with 'ate delete template {name} "
                            f"-a {atespace}' and create it again")
            raise AlreadyExists(message)
        return TemplateRecord.from_row(row)

    async def get(self, atespace: str, name: str) -> TemplateRecord:
        """One template. Raises NotFound."""
        row = await self.pool.fetchrow(Q["get_template"], atespace, name)
        if row is None:
            raise NotFound(f"actor template {atespace}/{name} not found")
        return TemplateRecord.from_row(row)

    async def of_atespace(self, atespace: str) -> list[TemplateRecord]:
        """The templates of an atespace. Raises NotFound (atespace)."""
        await self.atespaces.get(atespace)
        rows = await self.pool.fetch(Q["list_templates"], atespace)
        return [TemplateRecord.from_row(r) for r in rows]

    async def registry_images_for_node(self, node: str, limit: int = 1000) -> list[str]:
        """The registry images (pinned, as recorded) of the templates whose sandbox class the
        active workers of `node` serve, for it to pull before any resume needs them; at most
        `limit`, in name order."""
        rows = await self.pool.fetch(Q["registry_images_for_node"], node, limit)
        return [str(r["image"]) for r in rows]

    async def set_phase(
        self, atespace: str, name: str, phase: str, reason: str | None, golden_snapshot_id: int | None
    ) -> None:
        """Record a GoldenSnapshot outcome (idempotent)."""
        await self.pool.execute(Q["set_template_phase"], atespace, name, phase, reason, golden_snapshot_id)

    async def delete(self, atespace: str, name: str) -> None:
        """Delete a template. Raises NotFound, FailedPrecondition (actors use it)."""
        await self.get(atespace, name)
        row = await self.pool.fetchrow(Q["delete_template"], atespace, name)
        if row is None:
            raise FailedPrecondition(f"actor template {atespace}/{name} is used by actors; delete them first")
