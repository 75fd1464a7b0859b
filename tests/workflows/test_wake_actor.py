"""WakeActor (workflows/wake_actor.py): one request through the router, retried while the router
answers 5xx (the activity raises), its answer returned."""

from __future__ import annotations

from domain.schedules import WakeActorInput, WakeActorResult
from tests.workflows.fakes import fail
from tests.workflows.harness import Ate
from tests.workflows.samples import C1
from workflows.wake_actor import WakeActorWorkflow

REQUEST = WakeActorInput(actor=C1, path="/tick?from=schedule", reason="schedule every-2s")


async def test_a_wake_sends_its_request_and_returns_the_answer(ate: Ate) -> None:
    ate.fakes.script("wake_request", WakeActorResult(status=200, body="ok"))
    result = await ate.execute(WakeActorWorkflow.run, REQUEST, id="wake/demo/c1/every-2s")
    assert result == WakeActorResult(status=200, body="ok")
    assert ate.fakes.inputs("wake_request") == [REQUEST]


async def test_a_router_that_answers_503_is_asked_again(ate: Ate) -> None:
    busy = fail("ApplicationError", "the router answered 503 for demo/c1", retryable=True)
    ate.fakes.script("wake_request", busy, busy, WakeActorResult(status=200))
    result = await ate.execute(WakeActorWorkflow.run, REQUEST, id="wake/demo/c1/every-2s")
    assert result.status == 200
    assert [call.attempt for call in ate.fakes.calls] == [1, 2, 3]


async def test_a_worker_without_a_router_fails_the_wake_naming_the_setting(ate: Ate) -> None:
    message = "wakes go through the router, and this worker has no --router-url (ATE_ROUTER_URL)"
    ate.fakes.script("wake_request", fail("InvalidArgument", message))
    failure = await ate.failure(WakeActorWorkflow.run, REQUEST, id="wake/demo/c1/every-2s")
    assert (failure.type, failure.message) == ("InvalidArgument", message)
