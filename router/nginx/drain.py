"""The drain of an actor before its checkpoint on a replica with the nginx data path.

The same steps as router.drain, carried out in nginx through its admin server:

1. the actor is dropped from the control service's cache, its resume call in flight unshared,
   and in nginx (``NginxAdmin.drain``) its entries made void and every answer of the control
   service about it given before now refused (nginx asks again; the control service holds
   those requests while the drain runs, then they park for the resume);
2. nginx counts a request in its actor's in-flight requests before it chooses the upstream
   (router/nginx/ate_router.lua), so the requests that may still send to the old worker are
   exactly those counted when the drain began or that found no drain when they counted;
3. the drain waits (polling every ``POLL_SECONDS``) for nginx's count of the actor to reach 0
   within ``drain_timeout_seconds``; then its requests are marked cut (nginx's body filter ends
   each answer at its next piece from the worker) and the connections nginx's workers hold to
   the actor's worker are destroyed (``ss -K``, which needs CAP_NET_ADMIN; it also ends an
   answer that stays silent), again until ``settle_seconds`` have passed;
4. only then is the drain acknowledged (router.registration).

The requests nginx relays to the control service's Python router (WebSockets, requests asking
for an event stream, chunked uploads: router.nginx.control) are drained as on the Python data path, at the same
time: their WebSockets and event streams are ended at once (close 1001 with the drain's
reason; the end of the stream), and the others are waited for and cut at ``--drain-timeout``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from typing import TYPE_CHECKING, Any

import httpx

from router.drain import DRAIN_REASON, DrainGate, DrainOutcome
from router.metrics import DRAIN_CUT_REQUESTS

if TYPE_CHECKING:
    from router.nginx.admin import NginxAdmin

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
"""How often a drain reads nginx's in-flight count of the actor."""

_PID = re.compile(r"pid=(\d+)")


class NginxDrainGate(DrainGate):
    """``DrainGate`` whose drains are carried out in nginx (``admin``, a
    router.nginx.admin.NginxAdmin); the other arguments are ``DrainGate``'s. ``hold``,
    ``draining``, ``token`` and ``enter`` serve the control service's answers as they serve the
    Python data path's requests."""

    def __init__(self, admin: NginxAdmin, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admin = admin

    async def _drain(self, drain_id: int, key: str) -> DrainOutcome:
        admin = self.admin
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._open_drain(key)
        ended = self.end_sessions(key, DRAIN_REASON)
        if ended:
            log.info("drain %d of actor %s: %d relayed WebSockets or event streams ended", drain_id, key, ended)
        waited_for = self.in_flight(key)
        cut = 0
        try:
            relayed = asyncio.create_task(self._relayed_drained(key))
            try:
                await admin.drain(key, self._clock)
                waited_for += await admin.in_flight(key)
                if not await self._nginx_emptied_within(key, self.drain_timeout_seconds):
                    cut = await self._cut(key)
                    DRAIN_CUT_REQUESTS.inc(cut)
                    settle_until = loop.time() + self.settle_seconds
                    while await admin.in_flight(key) and loop.time() < settle_until:
                        await asyncio.sleep(POLL_SECONDS * 2)
                        await self._cut(key)  # one that slipped in between counting and connecting
                    left = await admin.in_flight(key)
                    if left:
                        log.warning("drain %d of actor %s: %d cut requests still open in nginx", drain_id, key, left)
            except httpx.HTTPError as exc:
                # nginx restarting: its dicts start empty, nothing of the actor is in flight there.
                log.warning("drain %d of actor %s: nginx's admin server did not answer (%s)", drain_id, key, exc)
            finally:
                cut += await relayed
        finally:
            self._close_drain(key)
        return self._outcome(drain_id, key, started, waited_for, cut, " (nginx)")

    async def _relayed_drained(self, key: str) -> int:
        """Wait for the relayed requests of actor ``key`` to finish within the drain timeout,
        then cut those left (as router.drain does); how many were cut."""
        if await self._emptied_within(key, self.drain_timeout_seconds):
            return 0
        flights = list(self._flights.get(key, ()))
        for flight in flights:
            flight.cut = True
            self.upstream_client.cut(flight)
        DRAIN_CUT_REQUESTS.inc(len(flights))
        if not await self._emptied_within(key, self.settle_seconds):
            log.warning("drain of actor %s: %d cut relayed requests still open", key, self.in_flight(key))
        return len(flights)

    async def _nginx_emptied_within(self, key: str, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while await self.admin.in_flight(key):
            if loop.time() >= until:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def _cut(self, key: str) -> int:
        """Destroy the connections nginx's workers hold to the upstreams of actor ``key``'s
        requests in flight; the number of those requests."""
        upstreams = await self.admin.cut(key)
        workers = await self.admin.workers()
        for upstream, _count in upstreams:
            await destroy_connections(upstream, workers)
        return sum(count for _upstream, count in upstreams)


async def destroy_connections(upstream: str, pids: set[int]) -> int:
    """Destroy (``ss -K``, SOCK_DESTROY) the TCP connections processes ``pids`` hold to
    ``upstream`` (``host:port``); the number destroyed. Without CAP_NET_ADMIN none is, and a
    warning says so."""
    host, _, port = upstream.rpartition(":")
    host = host.strip("[]")
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        infos = await asyncio.get_running_loop().getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        address = str(infos[0][4][0])
    listed = await _run("ss", "-tnpH", "state", "established", "dst", address, "dport", "=", f":{port}")
    destroyed = 0
    for line in listed.splitlines():
        ends = [t for t in line.split() if ":" in t and not t.startswith("users:")]
        if len(ends) < 2 or not {int(p) for p in _PID.findall(line)} & pids:
            continue
        local, _, local_port = ends[0].rpartition(":")
        local = local.strip("[]")
        out = await _run(
            "ss", "-K", "-tnH", "src", local, "sport", "=", f":{local_port}", "dst", address, "dport", "=", f":{port}"
        )
        if out.strip():
            destroyed += 1
        else:
            log.warning(
                "could not cut nginx's connection %s:%s -> %s (ss -K needs CAP_NET_ADMIN)", local, local_port, upstream
            )
    return destroyed


async def _run(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await process.communicate()
    return out.decode(errors="replace")
