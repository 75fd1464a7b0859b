"""/v1/operations: operations in flight, from Temporal's visibility store (what the UI shows)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query
from temporalio.client import Client, WorkflowExecution

from api.deps import TemporalDep
from api.names import check_name
from api.schemas import RunningOperation
from workflows.search_attributes import ACTOR, ATESPACE, OPERATION

router = APIRouter(tags=["operations"])


def visibility_query(atespace: str | None, actor: str | None) -> str:
    """The Temporal visibility query for running ate operations, optionally of one atespace/actor.

    Names are validated DNS-1123 labels, so they need no escaping inside the quotes.
    """
    clauses = ["ExecutionStatus = 'Running'", "AteOperation IS NOT NULL"]
    if atespace:
        clauses.append(f"AteAtespace = '{atespace}'")
    if actor:
        clauses.append(f"AteActor = '{actor}'")
    return " AND ".join(clauses)


async def _step(client: Client, execution: WorkflowExecution) -> str | None:
    """The workflow's current step (its current details), or None if it cannot be asked now."""
    try:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        metadata: Any = await asyncio.wait_for(handle.query("__temporal_workflow_metadata"), 2.0)
    except Exception:
        return None
    if isinstance(metadata, dict):
        details = metadata.get("currentDetails") or metadata.get("current_details")
    else:
        details = getattr(metadata, "current_details", None)
    return str(details) if details else None


@router.get("/v1/operations")
async def list_operations(
    temporal: TemporalDep,
    atespace: str | None = None,
    actor: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, list[RunningOperation]]:
    """Operations in flight (optionally of one atespace and/or actor), with their current step."""
    if atespace:
        check_name("atespace", atespace)
    if actor:
        check_name("actor", actor)
    executions: list[WorkflowExecution] = []
    async for execution in temporal.list_workflows(visibility_query(atespace, actor), limit=limit):
        executions.append(execution)
    steps = await asyncio.gather(*(_step(temporal, e) for e in executions))
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
