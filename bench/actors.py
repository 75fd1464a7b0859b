"""Setting up atespaces, templates and actors through the REST API, and reading Temporal history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT

COUNTER = ROOT / "examples" / "counter" / "template.yaml"


def setup(
    api_url: str, token: str, atespace: str, actors: list[str], template: Path = COUNTER, name: str = "counter"
) -> dict[str, Any]:
    """Create atespace, template (waits for its golden snapshot) and actors with the admin
    `token`; returns the template."""
    from ate.cli.client import ApiClient
    from ate.cli.manifest import load_template_spec

    with ApiClient(api_url, timeout=300, token=token) as api:
        api.create_atespace(atespace)
        tpl = api.create_template(atespace, name, load_template_spec(template), wait=True)
        if tpl.get("phase") != "Ready":
            raise RuntimeError(f"template {atespace}/{name} not Ready: {tpl}")
        for actor in actors:
            api.create_actor(atespace, actor, name, {})
    return tpl


class CallFailed(RuntimeError):
    """A verb the API answered with an error status; `reason` is the answer's (empty when the body
    is not the API's error format)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


async def call(client: httpx.AsyncClient, verb: str, atespace: str, name: str) -> httpx.Response:
    """POST /v1/atespaces/{a}/actors/{n}/{resume|suspend}.

    Raises:
        CallFailed: an error status (its reason from the API's error body).
    """
    r = await client.post(f"/v1/atespaces/{atespace}/actors/{name}/{verb}", json={})
    if r.status_code != 200:
        try:
            reason = str(r.json().get("reason", ""))
        except (ValueError, AttributeError):
            reason = ""
        raise CallFailed(f"{verb} {atespace}/{name}: HTTP {r.status_code} {r.text[:300]}", reason)
    return r


def _ts(event: Any) -> float:
    return float(event.event_time.seconds + event.event_time.nanos / 1e9)


async def workflow_steps(temporal: Any, workflow_id: str) -> dict[str, Any]:
    """Wall-clock times of a finished workflow (latest run): server events and activity completions.

    Returns {"started", "task_started", "completed", "result", "la": [(activity_type, complete_time)],
    "results": {activity_type: decoded result of its last ActivityTaskCompleted}}.
    Local activities' completion times come from their marker's `data` (Core SDK marker format);
    regular activities' (the atelet calls) from their ActivityTaskCompleted event.
    """
    handle = temporal.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    out: dict[str, Any] = {"la": []}
    scheduled: dict[int, str] = {}
    for e in history.events:
        kind = e.event_type
        if kind == 1:  # WORKFLOW_EXECUTION_STARTED
            out["started"] = _ts(e)
        elif kind == 6 and "task_started" not in out:  # WORKFLOW_TASK_STARTED
            out["task_started"] = _ts(e)
        elif kind == 10:  # ACTIVITY_TASK_SCHEDULED
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif kind == 12:  # ACTIVITY_TASK_COMPLETED
            done = e.activity_task_completed_event_attributes
            name = scheduled.get(done.scheduled_event_id)
            out["la"].append((name, _ts(e)))
            if done.result.payloads:
                out.setdefault("results", {})[name] = json.loads(done.result.payloads[0].data)
        elif kind == 25:  # MARKER_RECORDED
            details = e.marker_recorded_event_attributes.details
            if "data" in details and details["data"].payloads:
                data = json.loads(details["data"].payloads[0].data)
                ct = data.get("complete_time") or {}
                out["la"].append((data.get("activity_type"), ct.get("seconds", 0) + ct.get("nanos", 0) / 1e9))
        elif kind == 2:  # WORKFLOW_EXECUTION_COMPLETED
            out["completed"] = _ts(e)
            payloads = e.workflow_execution_completed_event_attributes.result.payloads
            out["result"] = json.loads(payloads[0].data) if payloads else None
    return out
