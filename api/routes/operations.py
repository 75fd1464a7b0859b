"""/v1/operations: operations in flight, from Temporal's visibility store (what the UI shows)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query
from temporalio.client import Client, WorkflowExecution
from temporalio.common import SearchAttributeKey

from api.access.guard import PrincipalDep, needs, readable_atespaces
from api.deps import StoreDep, TemporalDep
from api.names import check_name
from api.schemas import RunningOperation
from domain.access import Permission
from domain.refs import ActorRef
from domain.temporal import SEARCH_ATTRIBUTES
from store import StoreError
from store.interfaces import ApiStore

router = APIRouter(tags=["operations"])


ATESPACE, ACTOR, OPERATION = (SearchAttributeKey.for_keyword(name) for name in SEARCH_ATTRIBUTES)
"""The keys of the search attributes every ate workflow carries."""


def visibility_query(atespaces: set[str] | None, actor: str | None) -> str:
    """The Temporal visibility query for running ate operations, optionally of some atespaces
    and one actor.

    Names are validated DNS-1123 labels (atespaces from the path or from grants, which hold
    checked names), so they need no escaping inside the quotes.
    """
    clauses = ["ExecutionStatus = 'Running'", "AteOperation IS NOT NULL"]
    if atespaces is not None:
        listed = ", ".join(f"'{a}'" for a in sorted(atespaces))
        clauses.append(f"AteAtespace IN ({listed})")
    if actor:
        clauses.append(f"AteActor = '{actor}'")
    return " AND ".join(clauses)


async def _step(client: Client, store: ApiStore, execution: WorkflowExecution) -> str | None:
    """The workflow's current step (its current details, as the Temporal UI shows them).

    A workflow whose task is busy (a Postgres step runs inside it) or whose worker is down
    answers no query in time; then the step is told from the actor's state in Postgres instead.
    """
    try:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        metadata: Any = await asyncio.wait_for(handle.query("__temporal_workflow_metadata"), 0.5)
    except Exception:  # the workflow is busy in a long step: read the state it wrote
        return await _step_from_state(store, execution)
    if isinstance(metadata, dict):
        details = metadata.get("currentDetails") or metadata.get("current_details")
    else:
        details = getattr(metadata, "current_details", None)
    return str(details) if details else await _step_from_state(store, execution)


async def _step_from_state(store: ApiStore, execution: WorkflowExecution) -> str | None:
    attributes = execution.typed_search_attributes
    atespace, actor = attributes.get(ATESPACE), attributes.get(ACTOR)
    if not atespace or not actor or not execution.id.startswith("actor/"):
        return None
    try:
        record = await store.actors.get(ActorRef(atespace, actor))
    except StoreError:
        return None
    where = f" on worker {record.worker.pool}/{record.worker.name} ({record.worker.node})" if record.worker else ""
    return f"{record.state}{where}"


@router.get("/v1/operations", **needs(Permission.ACTORS_READ))
async def list_operations(
    temporal: TemporalDep,
    store: StoreDep,
    principal: PrincipalDep,
    atespace: str | None = None,
    actor: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, list[RunningOperation]]:
    """Operations in flight of the atespaces the caller may read (optionally of one atespace
    and/or actor), with their current step."""
    if atespace:
        check_name("atespace", atespace)
    if actor:
        check_name("actor", actor)
    shown = readable_atespaces(principal, Permission.ACTORS_READ, atespace or None)
    executions: list[WorkflowExecution] = []
    async for execution in temporal.list_workflows(visibility_query(shown, actor), limit=limit):
        executions.append(execution)
    steps = await asyncio.gather(*(_step(temporal, store, e) for e in executions))
    items = []
    for execution, step in zip(executions, steps, strict=True):
        attributes = execution.typed_search_attributes
        items.append(
            RunningOperation(
                workflow_id=execution.id,
                operation=attributes.get(OPERATION) or execution.workflow_type,
                atespace=attributes.get(ATESPACE),
                actor=attributes.get(ACTOR),
                started_at=execution.start_time,
                step=step,
            )
        )
    return {"items": items}
