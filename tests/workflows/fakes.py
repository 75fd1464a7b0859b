"""Recorded fakes at the activity boundary: one stand-in per real activity, nothing else faked.

`Fakes` registers, for every activity the real worker registers (`temporal_worker.main.activities`),
an `@activity.defn` of the same name and the same input and result types, so the workflows run
unchanged against the real Temporal test server and only the side effects are scripted. Each
call is recorded (name, input, attempt); its answer is the next scripted response:

- a value (a real `domain` dataclass, a bool, a list...): returned;
- an exception instance: raised (an `ApplicationError` as the real activity would raise it; see
  `store_failure` and `atelet_failure`, which build it with the real translation of
  `activities.errors`);
- a callable: called with the input; its result (awaited when it is awaitable) is the answer
  as above, so a response can depend on the input or wait for the test.

The last response of a script repeats; an activity with no script fails the workflow with an
`Unscripted` error naming it, so a test sees any call it did not expect.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.atelet import AteletActivities
from activities.atelet_tls import AteletClientTls
from activities.db import DbActivities
from activities.errors import AteletCallFailed, from_atelet_error, from_store_error
from store import Store, StoreError
from temporal_worker.main import activities


@dataclass(frozen=True)
class RealActivity:
    """What the real worker registers for one activity: its name, input type and result type."""

    name: str
    input_type: Any
    result_type: Any


def _real_activities() -> dict[str, RealActivity]:
    # The bound methods are only inspected, never called: no store or atelet is needed.
    found: dict[str, RealActivity] = {}
    unused = AteletClientTls(Path("unused.crt"), Path("unused.key"), Path("unused-ca.crt"))  # never loaded
    for fn in activities(DbActivities(cast(Store, None)), AteletActivities(tls=unused)):
        definition = activity._Definition.must_from_callable(fn)  # the SDK's own record of what it registers
        assert definition.name is not None and definition.arg_types is not None
        (input_type,) = definition.arg_types
        found[definition.name] = RealActivity(definition.name, input_type, definition.ret_type)
    return found


REAL_ACTIVITIES = _real_activities()
"""Every activity name the workflows may call, with its real input and result types."""


@dataclass(frozen=True)
class Call:
    """One recorded activity call: the activity's name, its (decoded) input and its attempt."""

    name: str
    input: Any
    attempt: int


class Fakes:
    """Scripted, recording stand-ins of every real activity (see the module docstring)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._scripts: dict[str, list[Any]] = {}
        self._changed = asyncio.Condition()

    def script(self, name: str, *responses: Any) -> Fakes:
        """Answer the next calls of `name` with `responses` in order; the last one repeats.

        Raises:
            KeyError: `name` is not a real activity.
        """
        if name not in REAL_ACTIVITIES:
            raise KeyError(f"{name} is not an activity the worker registers: {sorted(REAL_ACTIVITIES)}")
        if not responses:
            raise ValueError("script at least one response")
        self._scripts[name] = list(responses)
        return self

    def names(self) -> list[str]:
        """The names of the activities called so far, in call order."""
        return [call.name for call in self.calls]

    def inputs(self, name: str) -> list[Any]:
        """The inputs of every call of `name`, in call order."""
        return [call.input for call in self.calls if call.name == name]

    async def wait_for(self, name: str, count: int = 1, timeout: float = 10.0) -> list[Any]:
        """Wait until `name` was called `count` times; returns those inputs.

        `timeout` (wall-clock seconds) only bounds a test that would otherwise hang.
        """
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.inputs(name)) >= count), timeout)
        return self.inputs(name)

    def activities(self) -> list[Callable[..., Any]]:
        """One fake per real activity, to register on a test worker."""
        return [self._fake(real) for real in REAL_ACTIVITIES.values()]

    def _fake(self, real: RealActivity) -> Callable[..., Any]:
        async def fake(request: Any) -> Any:
            return await self._answer(real.name, request)

        # The real input and result types: the converter decodes the input into the real
        # dataclass and checks the scripted result against the real type on the way back.
        fake.__annotations__ = {"request": real.input_type, "return": real.result_type}
        fake.__name__ = fake.__qualname__ = f"fake_{real.name}"
        return activity.defn(name=real.name)(fake)

    async def _answer(self, name: str, request: Any) -> Any:
        async with self._changed:
            self.calls.append(Call(name, request, activity.info().attempt))
            self._changed.notify_all()
        script = self._scripts.get(name)
        if not script:
            raise ApplicationError(
                f"unscripted call of activity {name}: {request!r}", type="Unscripted", non_retryable=True
            )
        response = script.pop(0) if len(script) > 1 else script[0]
        if callable(response) and not isinstance(response, BaseException):
            response = response(request)
            if inspect.isawaitable(response):
                response = await response
        if isinstance(response, BaseException):
            raise response
        return response


def fail(kind: str, message: str, *, retryable: bool = False) -> Callable[[Any], ApplicationError]:
    """A scripted failure of type `kind`, non-retryable unless `retryable` (a fresh error per call)."""
    return lambda _request: ApplicationError(message, type=kind, non_retryable=not retryable)


def store_failure(error: StoreError) -> Callable[[Any], ApplicationError]:
    """What a Postgres activity raises when the store raises `error` (the real translation)."""
    return lambda _request: from_store_error(error)


def atelet_failure(
    code: grpc.StatusCode,
    details: str,
    call: str = "Restore",
    address: str = "127.0.0.1:8085",
    *,
    unreachable: bool = False,
) -> Callable[[Any], ApplicationError]:
    """What an atelet activity raises when the atelet answers `code` (the real translation:
    type `Atelet<Code>`, retryable unless the code is final); `unreachable`: the call reached no
    atelet (the channel could not connect)."""

    def failure(_request: Any) -> ApplicationError:
        rpc = grpc.aio.AioRpcError(
            code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details, debug_error_string=""
        )
        return from_atelet_error(AteletCallFailed(call, address, rpc, unreachable=unreachable))

    return failure
