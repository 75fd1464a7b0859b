"""The router's calls to the ate REST API: resume an actor, read a template's serving port and
access rule, read an actor's template, review a caller's token, send this replica's heartbeat
and acknowledge a drain.

Each resume call is classified into a ``ResumeReply`` (never raises for API answers), so the
parking logic in ``router.core.resume`` can decide between answering, retrying and giving up.
Template ports are cached forever (templates are immutable).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import httpx

from domain.operations.resume import ROOM_ANSWER_MARGIN_SECONDS
from domain.reasons import Reason
from domain.templates import ActorAccess, ActorTemplateSpec

# Reply kinds of ResumeReply.kind.
RUNNING = "running"
NOT_FOUND = "not_found"
BUSY = "busy"  # 409 OperationInProgress
NO_CAPACITY = "no_capacity"  # 503 NoCapacity
# No worker can ever take the actor as configured (labels, sandbox class): reason NoMatchingWorker
# (409, as api/errors.py maps the store's NoMatchingWorker; 503 accepted too). Decided from the
# reason only, never from the message's text.
NO_MATCHING_WORKER = "no_matching_worker"
FAILED_PRECONDITION = "failed_precondition"  # 409 FailedPrecondition (e.g. CRASHED)
TIMEOUT = "timeout"  # 504 Timeout: the resume keeps running
BAD_REQUEST = "bad_request"  # 400 InvalidArgument
UNREACHABLE = "unreachable"  # transport failure talking to the API
# 503 Unreachable: the actor's node stopped answering; it is RUNNING again if the node returns
# within the grace, CRASHED after it (the API's message says how long it has waited and may wait).
ACTOR_UNREACHABLE = "actor_unreachable"
ERROR = "error"  # anything else (500 Internal, unexpected answers)

RETRYABLE = frozenset({BUSY, NO_CAPACITY, TIMEOUT, UNREACHABLE, ACTOR_UNREACHABLE, ERROR})

RELEASE_TIMEOUT_SECONDS = 2.0
"""How long a stopping replica waits for the API to take its lease back (it stops anyway)."""

@dataclass(frozen=True, slots=True)
class ResumeReply:
    """The classified answer to one resume call.

    Attributes:
        kind: One of the reply kinds above (``running``, ``busy``, ...).
        message: The API's message, or a description of the transport failure.
        actor: The Actor JSON when ``kind == "running"``, else None.
        details: The API error's ``details`` object ({} when absent).
    """

    kind: str
    message: str = ""
    actor: dict[str, Any] | None = None
    details: dict[str, Any] | None = None


class TemplateError(Exception):
    """A template's serving port could not be read; the message says why."""


class LookupFailed(Exception):
    """The API could not say what the router asked (unreachable, an unexpected answer)."""


@dataclass(frozen=True, slots=True)
class DrainOrder:
    """A drain the API lists in a heartbeat's answer: its id, the actor's key, and whether it
    is an idle action's (``if_idle``: refused when this replica is busy with the actor)."""

    drain_id: int
    key: str
    if_idle: bool = False


@dataclass(frozen=True, slots=True)
class TemplateRouting:
    """What the router needs of a template: its serving port and its access rule."""

    port: int
    access: ActorAccess


@dataclass(frozen=True, slots=True)
class AccessReview:
    """The API's answer to "may this token reach that actor?"."""

    authenticated: bool
    allowed: bool


class ApiClient:
    """HTTP client of the ate REST API, as the router uses it.

    Args:
        base_url: API base URL, e.g. ``"http://127.0.0.1:8080"``.
        client: Optional pooled ``httpx.AsyncClient`` (keep-alive to the API is fine).
        token: The router's bearer token (role ``router``), sent with every call; None for none.
    """

    def __init__(self, base_url: str, client: httpx.AsyncClient | None = None, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, connect=2.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
        if token:
            self._client.headers["Authorization"] = f"Bearer {token}"
        self._routings: dict[tuple[str, str], TemplateRouting] = {}
        self._routing_flights: dict[tuple[str, str], asyncio.Future[TemplateRouting]] = {}

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self._client.aclose()

    async def resume(self, atespace: str, name: str, timeout_seconds: float) -> ResumeReply:
        """Ask the API to resume an actor and wait up to ``timeout_seconds`` for RUNNING.

        The API attaches to an in-flight resume, and keeps resuming after answering 504.

        Args:
            atespace: Atespace label.
            name: Actor label.
            timeout_seconds: Budget handed to the API, in seconds (sent rounded up to a whole
                second, at least 1); the resume may wait for room that long less
                ``ROOM_ANSWER_MARGIN_SECONDS``, so a request parked for room is served as soon as
                a worker frees, and hears "no room" before its budget ends.

        Returns:
            The classified reply; transport failures give kind ``unreachable``.
        """
        room_wait = round(max(0.0, timeout_seconds - ROOM_ANSWER_MARGIN_SECONDS), 3)
        seconds = max(1, math.ceil(timeout_seconds))
        url = f"{self.base_url}/v1/atespaces/{atespace}/actors/{name}/resume"
        try:
            resp = await self._client.post(
                url,
                json={"timeout_seconds": seconds, "room_wait_seconds": room_wait},
                timeout=httpx.Timeout(seconds + 10.0, connect=2.0),
            )
        except httpx.TransportError as exc:
            return ResumeReply(UNREACHABLE, f"{type(exc).__name__}: {exc}".rstrip(": "))
        return classify(resp.status_code, _json(resp))

    async def template_port(self, atespace: str, template: str) -> int:
        """Return a template's serving port (``template_routing``'s)."""
        return (await self.template_routing(atespace, template)).port

    async def template_routing(self, atespace: str, template: str) -> TemplateRouting:
        """Return a template's serving port and access rule, fetching them once per template
        (templates are immutable).

        Returns:
            The port (``ActorTemplateSpec.serving_port``: containers[0].port, else its wakeup
            probe's port, else 80) and the access rule.

        Raises:
            TemplateError: The template cannot be read (not found, API unreachable, bad JSON).
        """
        key = (atespace, template)
        routing = self._routings.get(key)
        if routing is not None:
            return routing
        flight = self._routing_flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fetch_routing(atespace, template))
            self._routing_flights[key] = flight
            flight.add_done_callback(lambda _f: self._routing_flights.pop(key, None))
        return await asyncio.shield(flight)

    async def _fetch_routing(self, atespace: str, template: str) -> TemplateRouting:
        # Remembered inside the flight, before it completes: the flight leaves the table in its
        # done callback, which runs before its waiters wake, so a caller arriving in between must
        # find the answer here (CI run 24 fetched a template twice under 20 concurrent requests).
        routing = await self._read_routing(atespace, template)
        self._routings[(atespace, template)] = routing
        return routing

    async def _read_routing(self, atespace: str, template: str) -> TemplateRouting:
        url = f"{self.base_url}/v1/atespaces/{atespace}/templates/{template}"
        try:
            resp = await self._client.get(url)
        except httpx.TransportError as exc:
            raise TemplateError(f"cannot read template {atespace}/{template}: {exc!r}") from exc
        body = _json(resp)
        if resp.status_code != 200 or not isinstance(body.get("spec"), dict):
            message = body.get("message") or f"HTTP {resp.status_code}"
            raise TemplateError(f"cannot read template {atespace}/{template}: {message}")
        try:
            spec = ActorTemplateSpec.from_document(body["spec"])
        except ValueError as exc:
            raise TemplateError(f"cannot read template {atespace}/{template}: {exc}") from exc
        return TemplateRouting(spec.serving_port, spec.access)

    async def health(self) -> str:
        """`ok` when the API's /healthz answers 200 within a second, else what went wrong."""
        try:
            resp = await self._client.get(f"{self.base_url}/healthz", timeout=1.0)
        except httpx.HTTPError as exc:
            return f"unreachable ({type(exc).__name__})"
        return "ok" if resp.status_code == 200 else f"HTTP {resp.status_code}"

    async def actor_template(self, atespace: str, name: str) -> str | None:
        """The template of actor ``atespace/name``; None when there is no such actor.

        Raises:
            LookupFailed: The API is unreachable or answered something else.
        """
        url = f"{self.base_url}/v1/atespaces/{atespace}/actors/{name}"
        try:
            resp = await self._client.get(url)
        except httpx.TransportError as exc:
            raise LookupFailed(f"cannot read actor {atespace}/{name}: {exc!r}") from exc
        if resp.status_code == 404:
            return None
        body = _json(resp)
        if resp.status_code != 200 or not isinstance(body.get("template"), str):
            raise LookupFailed(f"cannot read actor {atespace}/{name}: {body.get('message') or resp.status_code}")
        return str(body["template"])

    async def review(self, token: str, atespace: str, name: str) -> AccessReview:
        """Ask the API whether ``token`` may reach actor ``atespace/name``.

        Raises:
            LookupFailed: The API is unreachable or answered something else.
        """
        url = f"{self.base_url}/v1/accessreviews"
        try:
            resp = await self._client.post(url, json={"token": token, "atespace": atespace, "actor": name})
        except httpx.TransportError as exc:
            raise LookupFailed(f"cannot review access to {atespace}/{name}: {exc!r}") from exc
        body = _json(resp)
        if resp.status_code == 400:  # a credential too long or malformed to review: not valid
            return AccessReview(authenticated=False, allowed=False)
        if resp.status_code != 200:
            raise LookupFailed(f"cannot review access to {atespace}/{name}: {body.get('message') or resp.status_code}")
        return AccessReview(authenticated=bool(body.get("authenticated")), allowed=bool(body.get("allowed")))

    async def heartbeat(
        self, replica: str, lease_seconds: float, drain_timeout_seconds: float, active: list[str] | None = None
    ) -> list[DrainOrder]:
        """Register this router replica or refresh its lease, reporting the actors with traffic
        on it since its last heartbeat (``active``: at most ``MAX_ACTIVE_PER_HEARTBEAT`` keys
        ``"<atespace>/<name>"``); return the drains it must carry out.

        Raises:
            LookupFailed: The API is unreachable or did not take the heartbeat.
        """
        url = f"{self.base_url}/v1/routers/{replica}"
        body: dict[str, Any] = {"lease_seconds": lease_seconds, "drain_timeout_seconds": drain_timeout_seconds}
        if active:
            body["active"] = active
        try:
            resp = await self._client.put(url, json=body, timeout=httpx.Timeout(lease_seconds / 2, connect=2.0))
        except httpx.TransportError as exc:
            raise LookupFailed(f"cannot send the heartbeat of router replica {replica}: {exc!r}") from exc
        answer = _json(resp)
        if resp.status_code != 200:
            raise LookupFailed(
                f"the API refused the heartbeat of router replica {replica}: {answer.get('message') or resp.status_code}"
            )
        listed = answer.get("drains")
        drains: list[Any] = listed if isinstance(listed, list) else []
        return [
            DrainOrder(int(d["id"]), f"{d['atespace']}/{d['name']}", d.get("if_idle") is True)
            for d in drains
            if isinstance(d, dict) and {"id", "atespace", "name"} <= d.keys()
        ]

    async def release(self, replica: str) -> None:
        """Give this replica's lease back at a clean stop (``DELETE /v1/routers/<replica>``).

        Raises:
            LookupFailed: The API is unreachable or did not take it.
        """
        url = f"{self.base_url}/v1/routers/{replica}"
        try:
            resp = await self._client.delete(url, timeout=httpx.Timeout(RELEASE_TIMEOUT_SECONDS))
        except httpx.TransportError as exc:
            raise LookupFailed(f"cannot give the lease of router replica {replica} back: {exc!r}") from exc
        if resp.status_code != 204:
            raise LookupFailed(
                f"the API did not take the lease of router replica {replica} back: "
                f"{_json(resp).get('message') or resp.status_code}"
            )

    async def ack_drain(self, replica: str, drain_id: int, busy: bool = False) -> None:
        """Tell the API that this replica has drained ``drain_id``, or (``busy``) refused an
        idle action's drain because a request of the actor is in flight here.

        Raises:
            LookupFailed: The API is unreachable or did not take it.
        """
        url = f"{self.base_url}/v1/routers/{replica}/drains/{drain_id}/ack"
        try:
            resp = await self._client.post(url, json={"busy": True} if busy else None)
        except httpx.TransportError as exc:
            raise LookupFailed(f"cannot acknowledge drain {drain_id}: {exc!r}") from exc
        if resp.status_code != 200:
            raise LookupFailed(f"cannot acknowledge drain {drain_id}: {_json(resp).get('message') or resp.status_code}")


def classify(status: int, body: dict[str, Any]) -> ResumeReply:
    """Classify an API answer to a resume call.

    Args:
        status: HTTP status.
        body: Parsed JSON body ({} when not JSON).

    Returns:
        The reply; 200 with a RUNNING actor on a worker is ``running``, the documented errors
        map by status and ``reason`` (never by the message's text), anything else is ``error``.
    """
    reason = body.get("reason", "")
    message = str(body.get("message") or f"HTTP {status}")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    if status == 200:
        worker = body.get("worker") or {}
        if body.get("state") == "RUNNING" and worker.get("ip"):
            return ResumeReply(RUNNING, actor=body)
        return ResumeReply(ERROR, f"resume answered state {body.get('state')!r} without a worker IP")
    if reason == Reason.NO_MATCHING_WORKER:
        return ResumeReply(NO_MATCHING_WORKER, message, details=details)
    if status == 404:
        return ResumeReply(NOT_FOUND, message, details=details)
    if status == 409 and reason == Reason.OPERATION_IN_PROGRESS:
        return ResumeReply(BUSY, message, details=details)
    if status == 409:
        return ResumeReply(FAILED_PRECONDITION, message, details=details)
    if status == 503 and reason == Reason.NO_CAPACITY:
        return ResumeReply(NO_CAPACITY, message, details=details)
    if status == 503 and reason == Reason.UNREACHABLE:
        return ResumeReply(ACTOR_UNREACHABLE, message, details=details)
    if status == 504:
        return ResumeReply(TIMEOUT, message, details=details)
    if status == 400:
        return ResumeReply(BAD_REQUEST, message, details=details)
    return ResumeReply(ERROR, f"{reason or 'HTTP ' + str(status)}: {message}", details=details)


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
