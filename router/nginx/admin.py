"""The client of nginx's admin server (a unix socket that only the control service reaches):
invalidations pushed in order, counters, the recent requests, in-flight counts, the actors with
traffic, drains, cuts, the lease and nginx's worker processes (router/nginx/ate_admin.lua serves them)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import quote

import httpx

from router.core import statusz

log = logging.getLogger(__name__)


class NginxAdmin:
    """Client of nginx's admin server (a unix socket): invalidations, counters, recent requests.

    Args:
        socket: Path of the admin socket.
    """

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=socket), base_url="http://nginx")
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sending queued invalidations (in order, retried until nginx takes them)."""
        if self._task is None:
            self._task = asyncio.create_task(self._send_invalidations(), name="ate-router-nginx-invalidate")

    async def stop(self) -> None:
        """Stop sending and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._client.aclose()

    def invalidate(self, key: str | None) -> None:
        """Queue forgetting actor ``key`` (None: every actor) in nginx."""
        self._queue.put_nowait(key)

    async def settled(self) -> None:
        """Return once nginx took every invalidation queued so far."""
        await self._queue.join()

    async def _send_invalidations(self) -> None:
        while True:
            key = await self._queue.get()
            path = "/flush" if key is None else f"/invalidate?key={quote(key, safe='')}"
            delay = 0.05
            while True:
                try:
                    (await self._client.post(path, timeout=5)).raise_for_status()
                    break
                except httpx.HTTPError as exc:
                    # nginx restarting: its dict starts empty, so a late invalidation is harmless.
                    log.warning("nginx did not take %s (%s); retrying in %.2fs", path, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            self._queue.task_done()

    async def in_flight(self, key: str) -> int:
        """Requests of actor ``key`` nginx is proxying now (every worker process); for drain.

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        resp = await self._client.get(f"/inflight?key={quote(key, safe='')}", timeout=5)
        resp.raise_for_status()
        return int(resp.text or 0)

    async def active(self) -> list[str]:
        """The actors nginx saw traffic for since the last call (a request ended, or one in
        flight now), as keys ``<atespace>/<name>``; the marks are taken.

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        resp = await self._client.get("/active", timeout=1)  # before each heartbeat: never hold it long
        resp.raise_for_status()
        return [line for line in resp.text.splitlines() if line]

    async def drain(self, key: str, token: int) -> None:
        """A drain of actor ``key`` begins in nginx: its entries are void and no answer of the
        control service about it with a drain token below ``token`` is used (its requests ask again).

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        resp = await self._client.post(f"/drain?key={quote(key, safe='')}&seq={token}", timeout=5)
        resp.raise_for_status()

    async def cut(self, key: str) -> list[tuple[str, int]]:
        """Mark the requests of actor ``key`` in flight now as cut (outcome ``error``).

        Returns:
            The upstreams (``host:port``) they use, with how many use each.

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        resp = await self._client.post(f"/cut?key={quote(key, safe='')}", timeout=5)
        resp.raise_for_status()
        found = []
        for line in resp.text.splitlines():
            upstream, _, count = line.rpartition("\t")
            if upstream:
                found.append((upstream, int(count)))
        return found

    async def lease(self, seconds: float) -> None:
        """Tell nginx this replica's lease runs ``seconds`` longer (0: over; it then uses no entry).

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        (await self._client.post(f"/lease?seconds={max(seconds, 0.0):.3f}", timeout=5)).raise_for_status()

    async def recent(self) -> list[statusz.RecentRequest]:
        """The last 100 requests nginx finished, newest first (empty when nginx does not answer)."""
        try:
            resp = await self._client.get("/recent", timeout=2)
        except httpx.HTTPError:
            return []
        found = []
        for line in resp.text.splitlines():
            fields = line.split("\t")
            if len(fields) != 8:
                continue
            started, request_id, target, method, path, status, outcome, ms = fields
            found.append(
                # its end, as the Python router lists a request (nginx logs its start)
                statusz.RecentRequest(
                    float(started) + float(ms) / 1000, request_id, target, method, path, int(status), outcome, float(ms)
                )
            )
        return found

    def stats(self) -> dict[str, float]:
        """nginx's counters (blocking; for the metrics thread): ``n:<outcome>`` requests,
        ``s:<outcome>`` seconds, ``b:<outcome>:<bucket index|inf>``, ``in``, ``out``, ``f:<actor>``.

        Raises:
            httpx.HTTPError: nginx's admin server did not answer.
        """
        with httpx.Client(transport=httpx.HTTPTransport(uds=self.socket), base_url="http://nginx") as client:
            resp = client.get("/stats", timeout=2)
            resp.raise_for_status()
        found: dict[str, float] = {}
        for line in resp.text.splitlines():
            name, _, value = line.rpartition("\t")
            if name:
                found[name] = float(value)
        return found
