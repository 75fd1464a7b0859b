"""An actor's output (`ate logs`): nodes ship the lines, readers read and follow them.

`POST /v1/nodes/{node}/logs`: an atelet delivers lines its actor's sandbox printed (only a node's
own credentials; a node may write only the output of actors placed on its workers, or of one
whose newest stored line it wrote: the last lines it ships after the actor left).

`GET /v1/atespaces/{atespace}/actors/{name}/logs`: the actor's kept output across its whole life
(suspends, resumes on other workers and nodes, atelet restarts), oldest first, with its lifecycle
events (`resumed on default/w-1`, `suspended: idle for 300 s`) between the lines, as
newline-delimited JSON; `follow=true` keeps the answer open and sends what comes, across suspends
and resumes, until the client goes or the actor is deleted. `viewer` and above may read logs
(`actors.logs`; not the router): they hold whatever the workload printed, secrets it printed
included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from api.access.guard import needs
from api.deps import StoreDep
from api.errors import ApiError
from api.schemas import ActorRefBody
from api.strict import Strict
from domain.access import Permission
from domain.logs import MAX_LINE_BYTES, MAX_LINES_PER_BATCH, MAX_TAIL_LINES, parse_since
from domain.reasons import Reason
from domain.refs import ActorRef
from store import NotFound
from store.actor_logs import LogEvent, LogLine, ShippedLine

router = APIRouter(tags=["actors"])

FOLLOW_POLL_SECONDS = 0.5
"""How often a follow looks for new lines and events."""
FOLLOW_CHECK_SECONDS = 5.0
"""How often a follow checks that the actor still exists (it ends when the actor is deleted)."""
NDJSON = "application/x-ndjson"


class ShippedLineBody(Strict):
    """One line a node read from an actor's log file."""

    time: datetime = Field(description="When the node read it.")
    offset: int = Field(ge=0, description="Its byte offset in the node's log file `log_id`.")
    line: str = Field(max_length=MAX_LINE_BYTES, description="Its text, without the newline.")


class NodeLogBatch(Strict):
    """POST body of `/v1/nodes/{node}/logs`: lines of one actor's log file on the node."""

    worker: str = Field(min_length=1, max_length=200, description="The worker the actor ran on, <pool>/<worker>.")
    actor: ActorRefBody
    log_id: str = Field(min_length=1, max_length=100, description="The node's name for this log file.")
    lines: list[ShippedLineBody] = Field(max_length=MAX_LINES_PER_BATCH)


@router.post("/v1/nodes/{node}/logs", **needs(Permission.NODES_REGISTER))
async def ship_logs(node: str, body: NodeLogBatch, store: StoreDep) -> dict[str, bool]:
    """Store an actor's lines from this node (a line already stored is skipped). `accepted` is
    false, and nothing stored, when the actor is not this node's to write."""
    ref = ActorRef(body.actor.atespace, body.actor.name)
    lines = [ShippedLine(line.time, line.offset, line.line) for line in body.lines]
    accepted = await store.actor_logs.append(node, body.worker, ref, body.log_id, lines) if lines else True
    return {"accepted": accepted}


def _line_record(line: LogLine) -> dict[str, Any]:
    return {"type": "line", "time": line.time.isoformat(), "stream": line.stream, "node": line.node,
            "worker": line.worker, "line": line.line}  # fmt: skip


def _event_record(event: LogEvent) -> dict[str, Any]:
    return {"type": "event", "time": event.time.isoformat(), "event": event.event.text(),
            "operation": event.event.operation, "outcome": event.event.outcome}  # fmt: skip


def _merged(lines: list[LogLine], events: list[LogEvent]) -> list[dict[str, Any]]:
    """Lines and events in time order (a line before an event of the same instant)."""
    timed = [(line.time, 0, _line_record(line)) for line in lines]
    timed += [(event.time, 1, _event_record(event)) for event in events]
    timed.sort(key=lambda item: (item[0], item[1]))
    return [record for _, _, record in timed]


def _encode(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(record, ensure_ascii=False).encode() + b"\n" for record in records)


@router.get("/v1/atespaces/{atespace}/actors/{name}/logs", **needs(Permission.ACTORS_LOGS),
            response_class=StreamingResponse,
            responses={200: {"content": {NDJSON: {}}, "description": "One JSON object per line: "
                             "{type: line, time, stream, node, worker, line} or {type: event, time, event, "
                             "operation, outcome}."}})  # fmt: skip
async def actor_logs(
    atespace: str,
    name: str,
    request: Request,
    store: StoreDep,
    tail: Annotated[int | None, Query(ge=0, le=MAX_TAIL_LINES, description="Only the newest N lines.")] = None,
    since: Annotated[str | None, Query(description="Only lines of the last duration: 30s, 10m, 2h, 1d.")] = None,
    follow: Annotated[bool, Query(description="Keep the answer open and send new lines and events.")] = False,
) -> StreamingResponse:
    """The actor's output with its lifecycle events, oldest first (newline-delimited JSON).
    Refused (409) for an actor that has never run, unless `follow` (which waits for its first line)."""
    ref = ActorRef(atespace, name)
    since_time: datetime | None = None
    if since is not None:
        try:
            since_time = datetime.now(UTC) - timedelta(seconds=parse_since(since))
        except ValueError as error:
            raise ApiError(str(error), {"field": "since"}, Reason.INVALID_ARGUMENT) from None
    await store.actors.get(ref)  # NotFound: 404
    if not follow and not await store.actor_logs.has_run(ref):
        raise ApiError(f"actor {ref.key} has never run, so it has no output yet: send it a request or run "
                       f"`ate resume actor {name} -a {atespace}`, then ask again (`ate logs -f` waits for its "
                       "first line)", {"actor": ref.key}, Reason.FAILED_PRECONDITION)  # fmt: skip
    lines = await store.actor_logs.lines(ref, since=since_time, limit=MAX_TAIL_LINES if tail is None else tail)
    if since_time is not None:
        events_from = since_time
    elif tail is not None:
        events_from = lines[0].time if lines else datetime.now(UTC)
    else:
        events_from = datetime.fromtimestamp(0, UTC)
    events = await store.actor_logs.events(ref, events_from)
    first = _encode(_merged(lines, events))

    async def body() -> AsyncIterator[bytes]:
        yield first
        if not follow:
            return
        cursor = lines[-1].seq if lines else 0
        if not lines and tail is not None:  # nothing now: follow from what is there
            cursor = await _last_seq(store, ref)
        seen = {event.operation_id for event in events}
        last_event = max((event.time for event in events), default=events_from)
        checked = asyncio.get_running_loop().time()
        while not await request.is_disconnected():
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
            new_lines = await store.actor_logs.lines(ref, after_seq=cursor, limit=MAX_LINES_PER_BATCH)
            new_events = [e for e in await store.actor_logs.events(ref, last_event) if e.operation_id not in seen]
            if new_lines:
                cursor = new_lines[-1].seq
            for event in new_events:
                seen.add(event.operation_id)
                last_event = max(last_event, event.time)
            if new_lines or new_events:
                yield _encode(_merged(new_lines, new_events))
            now = asyncio.get_running_loop().time()
            if now - checked > FOLLOW_CHECK_SECONDS:
                checked = now
                try:
                    await store.actors.get(ref)
                except NotFound:
                    yield _encode([{"type": "event", "time": datetime.now(UTC).isoformat(),
                                    "event": "deleted", "operation": "", "outcome": "ok"}])  # fmt: skip
                    return

    return StreamingResponse(body(), media_type=NDJSON)


async def _last_seq(store: Any, ref: ActorRef) -> int:
    newest = await store.actor_logs.lines(ref, limit=1)
    return int(newest[-1].seq) if newest else 0
