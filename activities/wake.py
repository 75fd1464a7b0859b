"""The request a wake sends (a schedule's, `workflows/wake_actor.py`): `GET <path>` to the actor
through the router, as any client's request goes, so the router resumes the actor, parks the
request meanwhile and keeps its drains; the actor's idle policy takes it down again after.
"""

from __future__ import annotations

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import activity_defn
from domain.activity_names import Activity
from domain.reasons import Reason
from domain.schedules import WakeActorInput, WakeActorResult

WAKE_TIMEOUT_SECONDS = 60.0
"""How long one wake's request may take (the router's park budget and the actor's answer)."""

RETRY_STATUSES = frozenset({502, 503, 504})
"""Answers a wake retries (the router found no room, or the actor was on its way): the activity's
retry policy tries again."""


REFUSED_STATUSES = {401: "asks for a credential (its template says access: token; a wake carries none)",
                    403: "refused it", 404: "does not know the actor (deleted?)"}
"""Answers that end a wake as failed, not retried: the wake did not reach the actor."""


class WakeActivities:
    """The wake's request, through the router at `router_url` (None: wakes cannot be sent; each
    fails naming the setting). A wake carries no credential: ate does not speak for a user to an
    actor, and a credential sent along could reach the actor's sandbox (`passCredential`)."""

    def __init__(self, router_url: str | None) -> None:
        self.router_url = router_url.rstrip("/") if router_url else None

    @activity_defn(Activity.WAKE_REQUEST)
    async def wake_request(self, request: WakeActorInput) -> WakeActorResult:
        """Send `GET request.path` to `request.actor` through the router.

        Returns:
            The status and the first 200 characters of the body (the actor's answer).

        Raises:
            ApplicationError: the router is not configured, or answered 401, 403 or 404 (the
                wake did not reach the actor; non-retryable), or it answered 502, 503 or 504, or
                could not be reached (retryable).
        """
        if self.router_url is None:
            raise ApplicationError(
                "wakes go through the router, and this worker has no --router-url (ATE_ROUTER_URL)",
                type=Reason.INVALID_ARGUMENT,
                non_retryable=True,
            )
        headers = {"ate-target-actor": request.actor.key, "ate-wake": request.reason or "wake"}
        try:
            async with httpx.AsyncClient(timeout=WAKE_TIMEOUT_SECONDS) as client:
                response = await client.get(self.router_url + request.path, headers=headers)
        except httpx.HTTPError as error:
            raise ApplicationError(f"the router at {self.router_url} did not answer: {error}") from error
        if response.status_code in REFUSED_STATUSES:
            raise ApplicationError(
                f"the router {REFUSED_STATUSES[response.status_code]}: {response.status_code} for {request.actor.key}",
                type=Reason.FAILED_PRECONDITION,
                non_retryable=True,
            )
        if response.status_code in RETRY_STATUSES:
            raise ApplicationError(
                f"the router answered {response.status_code} for {request.actor.key}: {response.text[:200]}"
            )
        activity.logger.info("woke %s: GET %s -> %d", request.actor.key, request.path, response.status_code)
        return WakeActorResult(status=response.status_code, body=response.text[:200])
