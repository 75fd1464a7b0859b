"""Getting an actor RUNNING on demand: single-flight resume, parking, error classification.

``Resumer.wait_running`` parks a request until its actor is RUNNING or the request's budget
runs out. Per actor key at most one resume call to the API is in flight; every parked request
for that actor waits on it (20 concurrent requests to a suspended actor cause one restore).
Busy actors (409 OperationInProgress), no capacity (503 NoCapacity), actors whose node stopped
answering (503 Unreachable: it may return within its grace), API timeouts and an unreachable API
are retried with backoff (50 ms, times 1.5, capped at 500 ms) within the budget.
A request that gives up never cancels the call in flight: the resume carries on. Failures no
retry fixes (unknown actor, FailedPrecondition such as CRASHED, no worker with the selected
labels or sandbox class) are answered at once, without ``Retry-After``; transient 503/504
answers carry one.

The parking lot is bounded: a request takes a slot only when it has to wait for a resume.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass

from domain.refs import ActorRef
from router.core import api_client as api
from router.core.api_client import ApiClient, ResumeReply, TemplateError
from router.core.cache import ActorCache
from router.core.errors import (
    BAD_TARGET,
    NO_ROOM,
    NOT_FOUND,
    RETRY_CAPACITY_SECONDS,
    RETRY_RESUMING_SECONDS,
    TIMEOUT,
    UNAVAILABLE,
    RouteError,
)
from router.core.metrics import PARK_DURATION, PARKED, PARKED_NO_ROOM, RESUMES, RESUMES_STARTED
from router.core.upstream import Upstream

log = logging.getLogger(__name__)

BACKOFF_START_SECONDS = 0.05
BACKOFF_FACTOR = 1.5
BACKOFF_MAX_SECONDS = 0.5

@dataclass(frozen=True, slots=True)
class Attempt:
    """Result of one shared resume call: an upstream, or the reply that explains why not."""

    upstream: Upstream | None
    reply: ResumeReply


class Resumer:
    """Resumes actors through the API on behalf of parked requests.

    Args:
        api: API client.
        cache: RUNNING-actor cache, filled from successful resumes.
        budget_seconds: Default parking budget per request, in seconds.
        max_parked: Maximum number of requests parked at once.
        api_url: API base URL, named in "control plane unreachable" messages.
    """

    def __init__(
        self,
        api: ApiClient,
        cache: ActorCache,
        budget_seconds: float,
        max_parked: int,
        api_url: str = "",
    ) -> None:
        self.api = api
        self.cache = cache
        self.budget_seconds = budget_seconds
        self.max_parked = max_parked
        self.api_url = api_url or api.base_url
        self.parked = 0
        self._inflight: dict[str, asyncio.Task[Attempt]] = {}

    def in_flight(self, key: str) -> bool:
        """Tell whether a resume call for actor ``key`` is running."""
        return key in self._inflight

    def unshare(self, key: str) -> None:
        """Let requests from now on start a resume call of their own for actor ``key`` (its
        actor is being drained: an answer to the call in flight may name its old worker). The
        call in flight goes on for those already waiting on it."""
        self._inflight.pop(key, None)

    async def wait_running(self, target: ActorRef, deadline: float) -> Upstream:
        """Park until ``target`` is RUNNING and return where it serves.

        Args:
            target: The actor.
            deadline: ``loop.time()`` by which to give up (request arrival + budget).

        Returns:
            The actor's upstream address.

        Raises:
            RouteError: 404 unknown actor or atespace; 503 failed precondition or no matching
                worker (at once), parking lot full, no capacity, the actor's node silent
                (UNREACHABLE, with the API's reason) or API unreachable; 504 still resuming when
                the budget ran out.
        """
        if self.parked >= self.max_parked:
            raise RouteError(
                503,
                UNAVAILABLE,
                f"router at capacity: {self.parked} requests are already waiting for actors to "
                f"resume; actor {target} was not resumed; retry shortly",
                RETRY_CAPACITY_SECONDS,
            )
        self.parked += 1
        PARKED.inc()
        started = asyncio.get_running_loop().time()
        try:
            return await self._park(target, deadline)
        finally:
            self.parked -= 1
            PARKED.dec()
            PARK_DURATION.observe(asyncio.get_running_loop().time() - started)

    async def _park(self, target: ActorRef, deadline: float) -> Upstream:
        """``_park_for`` counted in ``ate_router_parked_no_room_requests`` from its first
        NoCapacity answer to its end."""
        no_room: list[bool] = []
        try:
            return await self._park_for(target, deadline, no_room)
        finally:
            if no_room:
                PARKED_NO_ROOM.dec()

    async def _park_for(self, target: ActorRef, deadline: float, no_room: list[bool]) -> Upstream:
        loop = asyncio.get_running_loop()
        delay = BACKOFF_START_SECONDS
        last: ResumeReply | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise self._out_of_budget(target, last)
            task = self._inflight.get(target.key)
            if task is None:
                task = asyncio.create_task(self._attempt(target, remaining))
                self._inflight[target.key] = task
                task.add_done_callback(functools.partial(self._forget, target.key))
            try:
                attempt = await asyncio.wait_for(asyncio.shield(task), remaining)
            except TimeoutError:
                raise self._out_of_budget(target, last) from None
            if attempt.upstream is not None:
                return attempt.upstream
            last = attempt.reply
            self._raise_final(target, last)
            if last.kind == api.NO_CAPACITY and not no_room:
                no_room.append(True)
                PARKED_NO_ROOM.inc()
            pause = min(delay, deadline - loop.time())
            if pause > 0:
                await asyncio.sleep(pause)
            delay = min(delay * BACKOFF_FACTOR, BACKOFF_MAX_SECONDS)

    def _forget(self, key: str, task: asyncio.Task[Attempt]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("resume of %s failed unexpectedly", key, exc_info=task.exception())

    async def _attempt(self, target: ActorRef, timeout_seconds: float) -> Attempt:
        """One resume call shared by every request parked on ``target``; never raises."""
        ticket = self.cache.begin(target.key)
        RESUMES_STARTED.inc()
        try:
            reply = await self.api.resume(target.atespace, target.name, timeout_seconds)
            RESUMES.labels(reply.kind).inc()
            if reply.kind != api.RUNNING or reply.actor is None:
                return Attempt(None, reply)
            actor = reply.actor
            try:
                port = await self.api.template_port(target.atespace, str(actor.get("template")))
            except TemplateError as exc:
                return Attempt(None, ResumeReply(api.ERROR, str(exc)))
            upstream = Upstream(str(actor["worker"]["ip"]), port)
            self.cache.put(ticket, upstream)
            return Attempt(upstream, reply)
        except Exception as exc:  # shared by many waiters: report, never raise
            log.exception("resume of %s failed", target)
            return Attempt(None, ResumeReply(api.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            self.cache.end(ticket)

    def _raise_final(self, target: ActorRef, reply: ResumeReply) -> None:
        """Raise for replies that no retry can fix (no Retry-After); return for retryable ones."""
        if reply.kind == api.NOT_FOUND:
            raise RouteError(404, NOT_FOUND, _not_found_message(target, reply.message))
        if reply.kind == api.FAILED_PRECONDITION:
            raise RouteError(503, UNAVAILABLE, _precondition_message(target, reply))
        if reply.kind == api.NO_MATCHING_WORKER:
            raise RouteError(503, NO_ROOM, f"actor {target} cannot be placed: {reply.message}")
        if reply.kind == api.BAD_REQUEST:
            raise RouteError(400, BAD_TARGET, f"the API rejected actor {target}: {reply.message}")

    def _out_of_budget(self, target: ActorRef, last: ResumeReply | None) -> RouteError:
        """Build the answer for a request whose budget ran out, from the last reply seen."""
        budget = f"{self.budget_seconds:g}s"
        still = RouteError(
            504,
            TIMEOUT,
            f"actor {target} was not RUNNING within {budget}; its resume continues in the "
            "background; retry shortly",
            RETRY_RESUMING_SECONDS,
        )
        if last is None or last.kind == api.TIMEOUT:
            return still
        if last.kind == api.NO_CAPACITY:
            message = (
                f"actor {target} could not be placed within {budget}: {last.message}; "
                "retry later or free a worker"
            )
            return RouteError(503, NO_ROOM, message, RETRY_CAPACITY_SECONDS)
        if last.kind == api.ACTOR_UNREACHABLE:
            message = last.message if target.key in last.message else f"actor {target}: {last.message}"
            return RouteError(503, UNAVAILABLE, f"{message}; retry later", RETRY_RESUMING_SECONDS)
        if last.kind == api.UNREACHABLE:
            message = (
                f"control plane at {self.api_url} is unreachable ({last.message}); "
                f"actor {target} could not be resumed; retry later"
            )
        elif last.kind == api.BUSY:
            operation = (last.details or {}).get("operation")
            what = f" ({operation})" if operation else ""
            return RouteError(
                504,
                TIMEOUT,
                f"actor {target} is busy with another operation{what} and was not RUNNING "
                f"within {budget}; retry shortly",
                RETRY_CAPACITY_SECONDS,
            )
        else:
            message = f"control plane failed to resume actor {target}: {last.message}; retry later"
        return RouteError(503, UNAVAILABLE, message, RETRY_RESUMING_SECONDS)


def _not_found_message(target: ActorRef, message: str) -> str:
    """The 404 text: what is missing, and how to create it when it is the actor."""
    if message.startswith("atespace "):
        return f"atespace {target.atespace} not found (see 'ate get atespaces')"
    if message.startswith("actor ") and not message.startswith("actor template "):
        return (
            f"actor {target} not found; create it with "
            f"'ate create actor {target.name} -a {target.atespace} --template <template>'"
        )
    return f"actor {target}: {message}"  # something else is missing (e.g. its template)


def _precondition_message(target: ActorRef, reply: ResumeReply) -> str:
    """The API's message, with the actor and ``details.state`` added when it names neither."""
    message = reply.message
    if target.key not in message:
        message = f"actor {target}: {message}"
    state = (reply.details or {}).get("state")
    if state and str(state) not in message:
        message = f"{message} (state {state})"
    return message
