"""The nginx part of the drain of an actor before its checkpoint (router.core.drain runs the
sequence; this is its ``DrainElsewhere`` on a replica with the nginx data path).

The same steps as router.core.drain, carried out in nginx through its admin server:

1. the actor is dropped from the control service's cache, its resume call in flight unshared,
   and in nginx (``NginxAdmin.drain``) its entries made void and every answer of the control
   service about it given before now refused (nginx asks again; the control service holds
   those requests while the drain runs, then they park for the resume);
2. nginx counts a request in its actor's in-flight requests before it chooses the upstream
   (router/nginx/ate_router.lua), so the requests that may still send to the old worker are
   exactly those counted when the drain began or that found no drain when they counted;
3. the drain waits (polling every ``POLL_SECONDS``) for nginx's count of the actor to reach 0
   within ``drain_timeout_seconds``; then its requests are marked cut, and each exchange with
   the worker (router/nginx/ate_exchange.lua) sees the mark within a quarter of a second, even
   while the worker is silent: it resets its worker connection and tells its client (503), or
   truncates an answer that began; the drain waits up to ``settle_seconds`` for them to end;
4. only then is the drain acknowledged (router.core.registration).

The requests nginx relays to the control service's Python router (WebSockets, requests asking
for an event stream, chunked uploads: router.nginx.control) are drained as on the Python data path, at the same
time: their WebSockets and event streams are ended at once (close 1001 with the drain's
reason; the end of the stream), and the others are waited for and cut at ``--drain-timeout``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx

from router.core.metrics import DRAIN_CUT_REQUESTS

if TYPE_CHECKING:
    from router.nginx.admin import NginxAdmin

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
"""How often a drain reads nginx's in-flight count of the actor."""


class NginxDrain:
    """The part of each drain carried out in nginx (``admin``, a router.nginx.admin.NginxAdmin):
    a ``router.core.drain.DrainElsewhere`` for the control service's drain gate."""

    where = " (nginx)"

    def __init__(self, admin: NginxAdmin) -> None:
        self.admin = admin

    async def drain(self, drain_id: int, key: str, clock: int, timeout: float, settle: float) -> tuple[int, int]:
        """Drain actor ``key`` in nginx (module docstring, steps 1 to 3).

        Returns:
            (nginx's requests waited for, those cut); nginx's admin server not answering is
            logged (nginx restarting: its dicts start empty, nothing of the actor is in flight there).
        """
        admin = self.admin
        waited_for = cut = 0
        try:
            await admin.drain(key, clock)
            waited_for = await admin.in_flight(key)
            if not await self._emptied_within(key, timeout):
                cut = await self._cut(key)
                DRAIN_CUT_REQUESTS.inc(cut)
                if not await self._emptied_within(key, settle):
                    left = await admin.in_flight(key)
                    log.warning("drain %d of actor %s: %d cut requests still open in nginx", drain_id, key, left)
        except httpx.HTTPError as exc:
            log.warning("drain %d of actor %s: nginx's admin server did not answer (%s)", drain_id, key, exc)
        return waited_for, cut

    async def busy(self, key: str) -> bool:
        """Whether nginx has a request of actor ``key`` in flight (an idle action's drain is then
        refused); False when its admin server does not answer (logged; the drain goes on)."""
        try:
            return await self.admin.in_flight(key) > 0
        except httpx.HTTPError as exc:
            log.warning("idle drain of actor %s: nginx's admin server did not answer (%s)", key, exc)
            return False

    async def active(self) -> set[str]:
        """The actors nginx saw traffic for since the last call (empty when its admin server does
        not answer: logged; nginx restarting has nothing in flight)."""
        try:
            return set(await self.admin.active())
        except httpx.HTTPError as exc:
            log.warning("nginx's admin server did not say which actors had traffic (%s)", exc)
            return set()

    async def _emptied_within(self, key: str, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while await self.admin.in_flight(key):
            if loop.time() >= until:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def _cut(self, key: str) -> int:
        """Mark the requests of actor ``key`` in flight in nginx cut; the number of them. Each
        ends within ate_exchange.lua's POLL_SECONDS, even one whose worker is silent: its worker
        connection reset, its client told (503) or its answer truncated."""
        upstreams = await self.admin.cut(key)
        return sum(count for _upstream, count in upstreams)
