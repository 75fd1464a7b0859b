"""The router's calls to the ate REST API: resume an actor, read a template's serving port.

Each resume call is classified into a ``ResumeReply`` (never raises for API answers), so the
parking logic in ``router.resume`` can decide between answering, retrying and giving up.
Template ports are cached forever (templates are immutable).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import httpx

from domain.templates import ActorTemplateSpec

# Reply kinds of ResumeReply.kind.
RUNNING = "running"
NOT_FOUND = "not_found"
BUSY = "busy"  # 409 OperationInProgress
NO_CAPACITY = "no_capacity"  # 503 NoCapacity
# No worker can ever take the actor as configured (labels, sandbox class): 409/503
# NoMatchingWorker, or (older APIs) a 503 NoCapacity whose message says no worker has the labels.
NO_MATCHING_WORKER = "no_matching_worker"
FAILED_PRECONDITION = "failed_precondition"  # 409 FailedPrecondition (e.g. CRASHED)
TIMEOUT = "timeout"  # 504 Timeout: the resume keeps running
BAD_REQUEST = "bad_request"  # 400 InvalidArgument
UNREACHABLE = "unreachable"  # transport failure talking to the API
ERROR = "error"  # anything else (500 Internal, unexpected answers)

RETRYABLE = frozenset({BUSY, NO_CAPACITY, TIMEOUT, UNREACHABLE, ERROR})

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


class ApiClient:
    """HTTP client of the ate REST API, as the router uses it.

    Args:
        base_url: API base URL, e.g. ``"http://127.0.0.1:8080"``.
        client: Optional pooled ``httpx.AsyncClient`` (keep-alive to the API is fine).
    """

    def __init__(self, base_url: str, client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, connect=2.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
        )
        self._ports: dict[tuple[str, str], int] = {}
        self._port_flights: dict[tuple[str, str], asyncio.Future[int]] = {}

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
                second, at least 1).

        Returns:
            The classified reply; transport failures give kind ``unreachable``.
        """
        seconds = max(1, math.ceil(timeout_seconds))
        url = f"{self.base_url}/v1/atespaces/{atespace}/actors/{name}/resume"
        try:
            resp = await self._client.post(
                url,
                json={"timeout_seconds": seconds},
                timeout=httpx.Timeout(seconds + 10.0, connect=2.0),
            )
        except httpx.TransportError as exc:
            return ResumeReply(UNREACHABLE, f"{type(exc).__name__}: {exc}".rstrip(": "))
        return classify(resp.status_code, _json(resp))

    async def template_port(self, atespace: str, template: str) -> int:
        """Return a template's serving port, fetching it once per template.

        Args:
            atespace: Atespace label.
            template: Template name.

        Returns:
            ``ActorTemplateSpec.serving_port``: containers[0].port, else its wakeup probe's port, else 80.

        Raises:
            TemplateError: The template cannot be read (not found, API unreachable, bad JSON).
        """
        key = (atespace, template)
        port = self._ports.get(key)
        if port is not None:
            return port
        flight = self._port_flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fetch_port(atespace, template))
            self._port_flights[key] = flight
            flight.add_done_callback(lambda _f: self._port_flights.pop(key, None))
        port = await asyncio.shield(flight)
        self._ports[key] = port
        return port

    async def _fetch_port(self, atespace: str, template: str) -> int:
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
            return ActorTemplateSpec.from_document(body["spec"]).serving_port
        except ValueError as exc:
            raise TemplateError(f"cannot read template {atespace}/{template}: {exc}") from exc


def classify(status: int, body: dict[str, Any]) -> ResumeReply:
    """Classify an API answer to a resume call.

    Args:
        status: HTTP status.
        body: Parsed JSON body ({} when not JSON).

    Returns:
        The reply; 200 with a RUNNING actor on a worker is ``running``, the documented errors
        map by ``reason``, anything else is ``error``.
    """
    reason = body.get("reason", "")
    message = str(body.get("message") or f"HTTP {status}")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    if status == 200:
        worker = body.get("worker") or {}
        if body.get("state") == "RUNNING" and worker.get("ip"):
            return ResumeReply(RUNNING, actor=body)
        return ResumeReply(ERROR, f"resume answered state {body.get('state')!r} without a worker IP")
    if reason == "NoMatchingWorker" or (
        status == 503 and reason == "NoCapacity" and "has the labels" in message
    ):
        return ResumeReply(NO_MATCHING_WORKER, message, details=details)
    if status == 404:
        return ResumeReply(NOT_FOUND, message, details=details)
    if status == 409 and reason == "OperationInProgress":
        return ResumeReply(BUSY, message, details=details)
    if status == 409:
        return ResumeReply(FAILED_PRECONDITION, message, details=details)
    if status == 503 and reason == "NoCapacity":
        return ResumeReply(NO_CAPACITY, message, details=details)
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
