"""Who may reach an actor through the router: its template's access rule (`public` or `token`,
domain.templates.ActorAccess), the caller's credential (`Authorization: Bearer <token>`, or the
cookie `ate-token` for browsers), and the API's access review of it.

Refusals never tell an unknown actor from one the caller may not reach: both get the same 401
(no credential, or one that is not valid) or 403 (a valid token without access), naming the
actor. A caller whose token reaches the actor's atespace learns that an actor does not exist
(404, from the resume).

What is cached, so that the hot path asks the API nothing: a template's rule (templates are
immutable), an actor's template for ACTOR_TEMPLATE_SECONDS (and until the actor's deletion, or
its creation after a lookup found none, is notified), a review's answer for REVIEW_SECONDS (so a revoked token may still pass for that
long).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import TypeVar

from domain.changes import DELETED, ActorChange
from domain.refs import ActorRef
from domain.templates import AccessMode, ActorAccess
from router.core import errors
from router.core.api_client import AccessReview, ApiClient, LookupFailed, TemplateError
from router.core.errors import RouteError

COOKIE = "ate-token"
"""The cookie a browser may carry the token in."""

ACTOR_TEMPLATE_SECONDS = 30.0
"""How long an actor's template is remembered (an actor deleted and made again from another
template within this time may be judged by its old template's rule, unless notified)."""

REVIEW_SECONDS = 10.0
"""How long the API's answer about one token and one actor is remembered."""

MAX_ENTRIES = 100_000
"""Entries per cache before it is emptied (a bound on memory, not a policy)."""

_T = TypeVar("_T")
_AUTHORIZATION = b"authorization"
_COOKIE = b"cookie"


@dataclass(frozen=True, slots=True)
class Admission:
    """A request let through: the headers to forward (the credential stripped unless the
    template passes it on).

    Attributes:
        headers: The headers to forward.
        public: Whether the actor's template lets anyone through (no credential was needed).
        strips_credential: Whether ``headers`` lost the credential (Authorization, cookie ate-token).
    """

    headers: list[tuple[bytes, bytes]]
    public: bool = True
    strips_credential: bool = True


def credential_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The caller's token: `Authorization: Bearer <token>`, else cookie `ate-token`; None."""
    cookie_header = None
    for key, value in headers:
        if key == _AUTHORIZATION:
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif key == _COOKIE:
            cookie_header = value.decode("latin-1")
    if cookie_header:
        try:
            jar = SimpleCookie(cookie_header)
        except CookieError:
            return None
        if COOKIE in jar and jar[COOKIE].value:
            return jar[COOKIE].value
    return None


def without_credential(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` without Authorization and without the `ate-token` cookie (other cookies stay)."""
    kept: list[tuple[bytes, bytes]] = []
    for key, value in headers:
        if key == _AUTHORIZATION:
            continue
        if key == _COOKIE:
            parts = [p for p in value.split(b";") if p.strip().split(b"=", 1)[0] != COOKIE.encode()]
            if parts:
                kept.append((key, b";".join(parts).strip()))
            continue
        kept.append((key, value))
    return kept


class AccessGate:
    """Decides whether a request may reach its actor.

    Args:
        api: The router's API client (role `router`: reads actors and templates, reviews tokens).
        api_url: The API's URL, named when it cannot be reached.
    """

    def __init__(self, api: ApiClient, api_url: str = "") -> None:
        self.api = api
        self.api_url = api_url
        self._templates: dict[str, tuple[float, str | None]] = {}
        self._reviews: dict[tuple[str, str], tuple[float, AccessReview]] = {}

    def forget(self, key: str | None) -> None:
        """Forget actor `key`'s template (it changed, or went); None: every actor's."""
        if key is None:
            self._templates.clear()
        else:
            self._templates.pop(key, None)

    def on_actor_change(self, change: ActorChange | None) -> None:
        """Apply an `ate_actor_changes` notification (None: one that named no actor, or the
        cache was cleared). An actor's template is fixed for its life, so a change of state
        (RUNNING, FROZEN, SUSPENDED...) keeps what is known of it: the next request after a
        suspend or a freeze asks the API nothing before its resume. The template is forgotten
        when the actor went (DELETED: one made again under its name may have another) and when
        it was known not to exist (it exists now)."""
        if change is None:
            self.forget(None)
            return
        known = self._templates.get(change.actor.key)
        if change.state == DELETED or (known is not None and known[1] is None):
            self.forget(change.actor.key)

    async def admit(self, target: ActorRef, headers: list[tuple[bytes, bytes]], deadline: float) -> Admission:
        """Let the request through, with the headers to forward.

        Args:
            target: The actor asked for.
            headers: The request's headers (ASGI pairs).
            deadline: `loop.time()` by which to give up asking an unreachable API (retried with
                backoff, as the resume is).

        Raises:
            RouteError: 401 without a valid credential, 403 with one that does not reach the
                actor (the same for an actor that does not exist), 503 when the API cannot say.
        """
        access = await self._retried(lambda: self._access_of(target), target, deadline)
        if access is not None and access.mode == AccessMode.PUBLIC:
            passes = access.pass_credential
            return Admission(headers if passes else without_credential(headers), True, not passes)
        token = credential_of(headers)
        if token is None:
            raise RouteError(
                401,
                errors.UNAUTHENTICATED,
                f"actor {target}: not found, or it needs a bearer token (header 'Authorization: Bearer <token>' "
                f"or cookie {COOKIE}); `ate create token --grant user:{target}` makes one",
            )
        review = await self._retried(lambda: self._review(token, target), target, deadline)
        if not review.authenticated:
            raise RouteError(
                401, errors.UNAUTHENTICATED, f"actor {target}: not found, or the bearer token is not valid"
            )
        if not review.allowed:
            raise RouteError(
                403, errors.FORBIDDEN, f"actor {target}: not found, or this token does not grant access to it"
            )
        passes = access is not None and access.pass_credential
        return Admission(headers if passes else without_credential(headers), False, not passes)

    async def _retried(self, ask: Callable[[], Awaitable[_T]], target: ActorRef, deadline: float) -> _T:
        """`ask()` again after 50 ms, times 1.5, at most 500 ms, while it fails and time is left.

        Raises:
            RouteError: 503 naming the API when the deadline passed.
        """
        loop = asyncio.get_running_loop()
        delay = 0.05
        while True:
            try:
                return await ask()
            except (LookupFailed, TemplateError) as exc:
                if loop.time() + delay >= deadline:
                    raise RouteError(
                        503,
                        errors.UNAVAILABLE,
                        f"control plane at {self.api_url} is unreachable or failing ({exc}); access to actor "
                        f"{target} could not be checked; retry later",
                        errors.RETRY_RESUMING_SECONDS,
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    async def _access_of(self, target: ActorRef) -> ActorAccess | None:
        """The rule of the actor's template; None when there is no such actor."""
        now = time.monotonic()
        known = self._templates.get(target.key)
        if known is None or known[0] < now:
            template = await self.api.actor_template(target.atespace, target.name)
            if len(self._templates) >= MAX_ENTRIES:
                self._templates.clear()
            known = (now + ACTOR_TEMPLATE_SECONDS, template)
            self._templates[target.key] = known
        if known[1] is None:
            return None
        return (await self.api.template_routing(target.atespace, known[1])).access

    async def _review(self, token: str, target: ActorRef) -> AccessReview:
        key = (hashlib.sha256(token.encode()).hexdigest(), target.key)
        now = time.monotonic()
        cached = self._reviews.get(key)
        if cached is not None and cached[0] >= now:
            return cached[1]
        review = await self.api.review(token, target.atespace, target.name)
        if len(self._reviews) >= MAX_ENTRIES:
            self._reviews.clear()
        self._reviews[key] = (now + REVIEW_SECONDS, review)
        return review
