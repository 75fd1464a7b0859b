"""The atelet's decision socket: where Squid's helpers ask and its log daemon reports.

A unix stream socket in the egress run dir, mode 0660, group Squid's: only root and Squid's user
connect (checked again on each connection by the peer's credentials, ``SO_PEERCRED``). Each
connection (``atelet.egress.relay``) opens with one line saying what it is:

- ``acl <slots>``: a helper of a Squid configuration with ``<slots>`` credential header slots;
  then lines ``<channel> <fields...>`` (``atelet.egress.decision.FIELDS``), each answered,
  concurrently and in any order, ``<channel> OK|ERR <annotations>``;
- ``log``: then access log lines, each handed to ``consume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from atelet.egress.decision import Ask, Verdict, parse_ask, refuse

log = logging.getLogger(__name__)

Decide = Callable[[Ask, int], Awaitable[Verdict]]
"""Decides one lookup from a helper whose configuration has the given number of header slots."""

MAX_LINE = 64 * 1024


class DecisionSocket:
    """Serves ``path`` until ``stop``.

    Args:
        path: the socket's path.
        decide: answers a helper's lookup.
        consume: takes one access log line.
        uids: the peer users let in (root and Squid's).
        gid: the socket file's group (Squid's).
    """

    def __init__(self, path: Path, decide: Decide, consume: Callable[[str], None], uids: set[int], gid: int) -> None:
        self.path = path
        self.decide = decide
        self.consume = consume
        self.uids = uids
        self.gid = gid
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listens (a stale socket file is replaced)."""
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_LINE)
        os.chown(self.path, 0, self.gid)
        self.path.chmod(0o660)

    async def stop(self) -> None:
        """Stops listening and ends the open connections."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):  # ends each connection's read loop (cancelling its task
            writer.close()  # would make asyncio's stream callback log the CancelledError)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        self.path.unlink(missing_ok=True)

    def _peer_uid(self, writer: asyncio.StreamWriter) -> int | None:
        sock = writer.get_extra_info("socket")
        if sock is None:
            return None
        try:
            _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return None
        return int(uid)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            uid = self._peer_uid(writer)
            if uid not in self.uids:
                log.warning("egress: decision socket: refused a connection of uid %s", uid)
                return
            hello = (await reader.readline()).decode(errors="replace").split()
            if hello[:1] == ["acl"] and len(hello) == 2 and hello[1].isdigit():
                await self._lookups(reader, writer, int(hello[1]))
            elif hello == ["log"]:
                while line := await reader.readline():
                    self.consume(line.decode(errors="replace"))
            else:
                log.warning("egress: decision socket: unknown greeting %r", " ".join(hello)[:100])
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # the helper went away (Squid restarted it) or sent an overlong line
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _lookups(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slots: int) -> None:
        pending: set[asyncio.Task[None]] = set()

        async def answer(channel: str, fields: list[str]) -> None:
            try:
                verdict = await self.decide(parse_ask(fields), slots)
            except Exception:
                log.exception("egress: the decision failed")
                verdict = refuse("-", "?", "decision failed", "the node's egress decision failed")
            writer.write(f"{channel} {verdict.reply()}\n".encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()

        try:
            while line := await reader.readline():
                words = line.decode(errors="replace").split()
                if not words:
                    continue
                task = asyncio.create_task(answer(words[0], words[1:]))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            for task in pending:
                task.cancel()
