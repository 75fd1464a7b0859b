"""This router replica's registration with the control plane: its heartbeat and lease, the
actors with traffic on it, and the drains it is told to carry out and acknowledge.

Every ``heartbeat_seconds`` the replica sends ``PUT /v1/routers/<replica>`` with ``active``, the
keys of the actors with traffic on it since the last heartbeat (router.core.activity), at most
``MAX_ACTIVE_PER_HEARTBEAT`` a call: a replica with more sends the rest in further calls right
after, in the same beat; keys of a heartbeat that did not reach the API go with the next one.
The answer lists the drains it has not acknowledged. Drains also arrive at once by NOTIFY on
``ate_router_drains`` (payload ``"<id>[:idle] <atespace>/<name>"``, domain.changes) through the
cache's LISTEN connection; the heartbeat brings any that a lost connection missed. Each drain is
carried out by ``DrainGate.drain`` and then acknowledged (``POST
/v1/routers/<replica>/drains/<id>/ack``); an idle action's drain (``if_idle``) is refused
instead when the replica is busy with the actor (``DrainGate.drain_if_idle``): acknowledged at
once with body ``{"busy": true}``, nothing cut or held. A failed acknowledgement is sent again
(with the same answer) when the next heartbeat lists the drain. A replica that stops cleanly gives its lease
back (``DELETE /v1/routers/<replica>``), so drains do not wait for it.

The lease: the control plane waits only for replicas heard from within their lease. So the
replica holds a lease only until ``lease_seconds - LEASE_MARGIN_SECONDS`` after it *sent* its
last heartbeat that was answered, which ends before the control plane stops waiting for it;
without a lease it uses no cache and sends no request to a worker (``DrainGate.enter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import uuid

from domain.changes import ROUTER_DRAINS_CHANNEL, parse_drain_notice
from domain.operations.router_drain import MAX_ACTIVE_PER_HEARTBEAT
from router.core.api_client import ApiClient, DrainOrder, LookupFailed
from router.core.cache import ActorCache, CacheInvalidator
from router.core.drain import DrainGate

log = logging.getLogger(__name__)

LEASE_MARGIN_SECONDS = 1.0
"""How much earlier than the control plane the replica considers its own lease over."""

DONE_REMEMBERED = 10_000
"""Drains acknowledged that are remembered (a drain listed again is acknowledged, not re-run)."""


def default_replica_name() -> str:
    """``router-<host>-<pid>-<4 hex>``, cut to a DNS label (unique per process)."""
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:30] or "host"
    return f"router-{host}-{os.getpid()}-{uuid.uuid4().hex[:4]}"[:63].strip("-")


class Registration:
    """Heartbeats, the lease, and the drains of this replica.

    Args:
        api: The API client.
        gate: Where drains are carried out.
        cache: The RUNNING-actor cache (cleared when the lease ends).
        replica: This replica's name (a DNS label).
        lease_seconds: The lease the heartbeat asks for.
        heartbeat_seconds: Time between heartbeats.
    """

    def __init__(
        self,
        api: ApiClient,
        gate: DrainGate,
        cache: ActorCache,
        replica: str,
        lease_seconds: float,
        heartbeat_seconds: float,
    ) -> None:
        self.api = api
        self.gate = gate
        self.cache = cache
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.lease_until = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self._drains: dict[int, asyncio.Task[None]] = {}
        self._done: dict[int, bool] = {}  # drain id -> refused busy
        self._was_leased = False

    def leased(self) -> bool:
        """Whether this replica's lease runs now (it may use its cache and send to workers)."""
        leased = asyncio.get_running_loop().time() < self.lease_until
        if not leased and self._was_leased:
            log.warning(
                "router replica %s: no answered heartbeat for %gs, lease over: cache cleared, no request is sent "
                "to a worker until the API answers again",
                self.replica, self.lease_seconds,
            )  # fmt: skip
            self.cache.clear()
        self._was_leased = leased
        return leased

    async def start(self) -> None:
        """Send the first heartbeat (waiting for it, so a lease is there before traffic when
        the API answers), then keep sending them in the background."""
        await self._beat()
        self._task = asyncio.create_task(self._run(), name="ate-router-heartbeat")

    async def stop(self) -> None:
        """Stop the heartbeats and the drains in progress, then give the lease back (called once
        the replica's requests have finished): drains stop waiting for this replica at once
        instead of until its lease runs out. Its lease is over here first, so it sends nothing
        more to a worker even if the API does not answer."""
        tasks = [t for t in (self._task, *self._drains.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        registered = self.lease_until != float("-inf")
        self.lease_until = float("-inf")
        self._was_leased = False
        self.cache.clear()
        if not registered:
            return
        try:
            await self.api.release(self.replica)
        except LookupFailed as exc:
            log.warning("router replica %s: %s; drains wait for it until its lease runs out", self.replica, exc)
            return
        log.info("router replica %s: lease given back", self.replica)

    def on_notification(self, payload: str) -> None:
        """Apply one ``ate_router_drains`` payload ``"<id>[:idle] <atespace>/<name>"``."""
        notice = parse_drain_notice(payload)
        if notice is None:
            log.warning("unparsable %s payload %r", ROUTER_DRAINS_CHANNEL, payload)
            return
        self.dispatch(notice.drain_id, notice.actor.key, notice.if_idle)

    def dispatch(self, drain_id: int, key: str, if_idle: bool = False) -> None:
        """Carry out drain ``drain_id`` of actor ``key`` (an idle action's when ``if_idle``: refused
        when busy) and acknowledge it (once; a drain already done is only acknowledged again,
        with the same answer)."""
        if drain_id in self._drains:
            return
        task = asyncio.create_task(self._drain_and_ack(drain_id, key, if_idle), name=f"ate-router-ack-{drain_id}")
        self._drains[drain_id] = task
        task.add_done_callback(lambda _t: self._drains.pop(drain_id, None))

    async def _drain_and_ack(self, drain_id: int, key: str, if_idle: bool) -> None:
        busy = self._done.get(drain_id)
        if busy is None:
            if if_idle:
                busy = await self.gate.drain_if_idle(drain_id, key) is None
                if busy:
                    log.info("idle drain %d of actor %s refused: a request of it is in flight here", drain_id, key)
            else:
                await self.gate.drain(drain_id, key)
                busy = False
            self._done[drain_id] = busy
            if len(self._done) > DONE_REMEMBERED:
                self._done.pop(next(iter(self._done)))
        try:
            await self.api.ack_drain(self.replica, drain_id, busy)
        except LookupFailed as exc:
            log.warning("drain %d of actor %s done but not acknowledged (%s); again at the next heartbeat", drain_id, key, exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            await self._beat()

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        active = sorted(await self.gate.active())
        sent = loop.time()
        try:
            drains = await self._heartbeat(active)
        except LookupFailed as exc:
            self.gate.activity.mark_all(active)  # reported with the next heartbeat
            left = self.lease_until - loop.time()
            log.warning("router replica %s: %s (lease %s)", self.replica, exc,
                        f"ends in {left:.1f}s" if left > 0 else "over")  # fmt: skip
            self.leased()
            return
        if self.lease_until == float("-inf"):
            log.info("router replica %s registered (lease %gs)", self.replica, self.lease_seconds)
        self.lease_until = sent + self.lease_seconds - LEASE_MARGIN_SECONDS
        self.leased()
        for order in drains:
            self.dispatch(order.drain_id, order.key, order.if_idle)

    async def _heartbeat(self, active: list[str]) -> list[DrainOrder]:
        """One heartbeat with the ``active`` keys, in as many calls as ``MAX_ACTIVE_PER_HEARTBEAT``
        needs (the drains of the last answer: each lists every drain not acknowledged).

        Raises:
            LookupFailed: A call failed (the keys not sent are the caller's to send again).
        """
        drains: list[DrainOrder] = []
        for start in range(0, max(len(active), 1), MAX_ACTIVE_PER_HEARTBEAT):
            chunk = active[start : start + MAX_ACTIVE_PER_HEARTBEAT]
            drains = await self.api.heartbeat(self.replica, self.lease_seconds, self.gate.drain_timeout_seconds, chunk)
        return drains


def register_replica(
    api: ApiClient,
    drains: DrainGate,
    cache: ActorCache,
    invalidator: CacheInvalidator | None,
    replica_name: str | None,
    lease_seconds: float,
    heartbeat_seconds: float,
) -> Registration:
    """This replica's registration, wired as both data paths use it: the drain gate and the cache
    are usable only while the lease runs, and drains also arrive by NOTIFY on ROUTER_DRAINS_CHANNEL when
    there is a LISTEN connection (else through the heartbeats). Not started: call its `start`."""
    registration = Registration(
        api, drains, cache, replica_name or default_replica_name(), lease_seconds, heartbeat_seconds
    )
    drains.leased = registration.leased
    cache.usable = registration.leased
    if invalidator is not None:
        invalidator.channels[ROUTER_DRAINS_CHANNEL] = registration.on_notification
    return registration
