"""Actors' output: read from their log files on this node, written to the atelet's stdout as JSON,
and shipped to ate-api-server (`ate logs`, domain/logs.py).

Each actor's sandboxes append their stdout and stderr to one file (``NodeLayout.log_path``; the
sandbox keeps writing it while the atelet restarts). ``OutputCollector.run`` looks at the files
of the actors on this node's workers every ``interval`` seconds, cuts what was appended into
lines (at most ``MAX_LINE_BYTES`` each; a line still without its newline waits until it has one
or its sandbox is gone), stamps each with the time it was read, and:

- writes it to stdout as one JSON object with its labels, for a cluster's log collector:
  ``{"time", "node", "worker", "atespace", "actor", "template", "container", "generation", "stream", "line"}``;
- ships it (not a template's golden boot's, ``WorkloadSpec.golden``: those lines go into the golden
  snapshot, which each actor of the template inherits at its first restore, and no actor owns
  them): ``POST {api_server}/v1/nodes/{node}/logs`` with ``{"worker", "actor", "log_id",
  "lines": [{"time", "offset", "line"}]}``, in order, at most ``BATCH_LINES`` lines and
  ``BATCH_BYTES`` bytes a request. What the API acknowledged is recorded next to the file
  (``<name>.shipped``: ``{"log_id", "inode", "offset"}``), so a restarted atelet ships the rest
  and nothing twice (the API skips a line it has by (node, log_id, offset) as well). A failed
  delivery is retried at the next look, the lines kept in memory meanwhile (up to
  ``MAX_PENDING_BYTES``; reading waits beyond that).

``flush`` reads and ships one actor's lines at once: a checkpoint calls it before the sandbox's
state is saved, so the lines printed just before a suspend arrive while the actor is still placed
here. ``begin`` is called before a sandbox starts on the file: a file larger than
``MAX_FILE_BYTES`` whose lines were all shipped starts again empty, so a node's disk holds a bounded
amount per actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx

from atelet.layout import NodeLayout
from atelet.snapshots.manifest import OUTPUT_BYTES
from atelet.workers import Worker
from domain.logs import MAX_LINE_BYTES, OUTPUT_STREAM, clean_text

log = logging.getLogger(__name__)

BATCH_LINES = 500
BATCH_BYTES = 256 * 1024
MAX_PENDING_BYTES = 4 * 1024 * 1024
"""Lines read and not yet acknowledged, per actor; reading that actor's file waits beyond this."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""A log file past this size starts again empty before the actor's next sandbox starts on it (once
its lines are shipped; past 4 times this, even if they are not)."""
READ_BYTES = 256 * 1024
"""The most one look reads of one file."""
STATE_SUFFIX = ".shipped"


@dataclass
class _Line:
    time: float
    offset: int
    text: str

    def size(self) -> int:
        return len(self.text.encode()) + 64


@dataclass
class _Followed:
    """One actor's log file as the collector reads it."""

    actor: tuple[str, str]
    path: Path
    log_id: str
    inode: int
    read_offset: int  # bytes read (cut into lines or held in `partial`)
    acked_offset: int  # bytes whose lines the API acknowledged
    worker: str = ""  # <pool>/<worker> of the sandbox that writes it
    container: str = ""
    template: str = ""  # the actor's template ("" when the control plane did not say)
    generation: int = 0  # of the actor's snapshot the sandbox was restored from (0: golden, or a boot)
    golden: bool = False  # a template's golden boot: printed, never shipped (no actor owns it)
    partial: bytes = b""  # the bytes after the last newline read
    skip_first: bool = False  # reading began inside a line (a large file first seen): drop it
    pending: list[_Line] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def pending_bytes(self) -> int:
        return sum(line.size() for line in self.pending)


class OutputCollector:
    """Reads, prints and ships the output of the actors on ``workers``.

    Args:
        workers: the node's workers by name (what runs on each).
        layout: where the log files are.
        node: this node's name (a label of every line, and the API route).
        api_server: the API's URL; None: lines are only written to stdout.
        auth: the node's credentials for the API.
        stdout: where the JSON lines go; None: nowhere.
        interval: seconds between looks.
        clock: the time stamped on a line (seconds since the epoch).
    """

    def __init__(self, workers: dict[str, Worker], layout: NodeLayout, node: str, api_server: str | None,
                 auth: httpx.Auth | None, *, stdout: IO[str] | None = sys.stdout, interval: float = 0.25,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.workers = workers
        self.layout = layout
        self.node = node
        self.url = f"{api_server.rstrip('/')}/v1/nodes/{node}/logs" if api_server else None
        self.auth = auth
        self.stdout = stdout
        self.interval = interval
        self.clock = clock
        self._followed: dict[tuple[str, str], _Followed] = {}
        self._client: httpx.AsyncClient | None = None
        self._retry_at = 0.0
        self._backoff = interval

    async def run(self) -> None:
        """Looks every ``interval`` seconds until cancelled."""
        try:
            while True:
                try:
                    await self.look()
                except Exception:  # a bug here must not stop the node's output for good
                    log.exception("output collector: a look failed")
                await asyncio.sleep(self.interval)
        finally:
            if self._client is not None:
                await self._client.aclose()

    async def look(self) -> None:
        """Reads and ships the new output of every actor on a worker, and of those that left with
        lines still to ship."""
        placed = {w.actor: w for w in self.workers.values() if w.actor is not None}
        for actor in list(placed) + [a for a in self._followed if a not in placed]:
            await self._collect(actor, placed.get(actor), deliver=self.clock() >= self._retry_at)

    async def flush(self, actor: tuple[str, str], timeout: float = 2.0) -> None:
        """Reads and ships ``actor``'s output now, waiting at most ``timeout`` seconds for the API
        (what it could not deliver is shipped later, as always); never raises."""
        worker = next((w for w in self.workers.values() if w.actor == actor), None)
        try:
            await asyncio.wait_for(self._collect(actor, worker, deliver=True), timeout)
        except Exception as error:
            log.warning("output of %s/%s not flushed before the checkpoint: %s", *actor, error)

    def begin(self, worker: Worker, actor: tuple[str, str]) -> None:
        """Before a sandbox of ``actor`` starts on ``worker``: a log file past ``MAX_FILE_BYTES`` whose lines are
        all shipped (or past 4 times that, shipped or not) starts again empty; what the file holds
        now is read at once (lines a restore inherited are stamped before the sandbox runs)."""
        path = self.layout.log_path(actor)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        followed = self._followed.get(actor) or self._load(actor, path)
        if size > MAX_FILE_BYTES:
            shipped = followed is not None and followed.acked_offset >= size and not followed.pending
            if shipped or size > 4 * MAX_FILE_BYTES:
                if not shipped:
                    log.warning("log of %s/%s is %d bytes and not all shipped: starting it again empty", *actor, size)
                self._followed.pop(actor, None)
                path.unlink(missing_ok=True)
                path.with_name(path.name + STATE_SUFFIX).unlink(missing_ok=True)
                return
        if followed is not None and not followed.lock.locked():
            self._followed[actor] = followed
            self._label(followed, worker)
            self._read(followed, final=False)

    def _load(self, actor: tuple[str, str], path: Path) -> _Followed | None:
        """The file's follow state: from its ``.shipped`` record when that names this file, else
        a new log id from the start (the newest MAX_PENDING_BYTES of a larger file)."""
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        state: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(path.with_name(path.name + STATE_SUFFIX).read_text())
        if state.get("inode") == stat.st_ino and isinstance(state.get("offset"), int) and state["offset"] <= stat.st_size:
            offset = state["offset"]
            return _Followed(actor, path, str(state.get("log_id")), stat.st_ino, offset, offset)
        start = max(0, stat.st_size - MAX_PENDING_BYTES)
        followed = _Followed(actor, path, uuid.uuid4().hex, stat.st_ino, start, start)
        followed.skip_first = start > 0
        return followed

    async def _collect(self, actor: tuple[str, str], worker: Worker | None, *, deliver: bool) -> None:
        followed = self._followed.get(actor)
        path = self.layout.log_path(actor)
        if followed is None:
            followed = self._load(actor, path)
            if followed is None:
                return
            self._followed[actor] = followed
        async with followed.lock:
            if worker is not None:
                self._label(followed, worker)
            writing = worker is not None and worker.state == "running"
            self._read(followed, final=not writing)
            if deliver and followed.pending:
                await self._deliver(followed)
            if not writing and not followed.pending and not followed.partial:
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_size <= followed.read_offset:
                        self._followed.pop(actor, None)

    @staticmethod
    def _label(followed: _Followed, worker: Worker) -> None:
        """The worker, container, template and generation the file's next lines carry."""
        followed.worker = f"{worker.pool.name}/{worker.name}"
        if worker.spec is not None:
            followed.template, followed.generation = worker.spec.template, worker.spec.generation
            followed.golden = worker.spec.golden
            if worker.spec.containers:
                followed.container = worker.spec.containers[0].name

    def _read(self, followed: _Followed, *, final: bool) -> None:
        """Reads what was appended to the file into lines (``final``: the sandbox is gone, a
        line without its newline is one too)."""
        try:
            stat = followed.path.stat()
        except FileNotFoundError:
            return
        if stat.st_ino != followed.inode or stat.st_size < followed.read_offset:  # a new file
            followed.inode, followed.log_id = stat.st_ino, uuid.uuid4().hex
            followed.read_offset = followed.acked_offset = 0
            followed.partial = b""
        if followed.pending_bytes() >= MAX_PENDING_BYTES:
            return
        if stat.st_size == followed.read_offset and not (final and followed.partial):
            return  # nothing new (most looks): no open, no read
        with open(followed.path, "rb") as f:
            f.seek(followed.read_offset)
            data = f.read(READ_BYTES)
        now = self.clock()
        start = followed.read_offset - len(followed.partial)
        followed.read_offset += len(data)
        data = followed.partial + data
        followed.partial = b""
        for offset, raw in _cut(data, start, final=final and followed.read_offset >= stat.st_size):
            if raw is None:
                followed.partial = data[offset - start:]
                break
            if followed.skip_first:
                followed.skip_first = False
                continue
            line = _Line(now, offset, clean_text(raw))
            followed.pending.append(line)
            self._print(followed, line)

    def _print(self, followed: _Followed, line: _Line) -> None:
        if self.stdout is None:
            return
        record = {"time": datetime.fromtimestamp(line.time, UTC).isoformat(), "node": self.node,
                  "worker": followed.worker, "atespace": followed.actor[0], "actor": followed.actor[1],
                  "template": followed.template, "container": followed.container,
                  "generation": followed.generation, "stream": OUTPUT_STREAM, "line": line.text}  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            self.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.stdout.flush()

    async def _deliver(self, followed: _Followed) -> None:
        """Ships the pending lines in batches, recording each acknowledged one; stops at a failure
        (retried later, with a backoff up to 10 s shared by all files)."""
        while followed.pending:
            batch: list[_Line] = []
            size = 0
            for line in followed.pending:
                if batch and (len(batch) >= BATCH_LINES or size + line.size() > BATCH_BYTES):
                    break
                batch.append(line)
                size += line.size()
            if self.url is not None and not followed.golden and not await self._post(followed, batch):
                return
            del followed.pending[: len(batch)]
            followed.acked_offset = followed.pending[0].offset if followed.pending else \
                followed.read_offset - len(followed.partial)  # fmt: skip
            self._record(followed)

    async def _post(self, followed: _Followed, batch: list[_Line]) -> bool:
        assert self.url is not None
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(5.0), auth=self.auth)
        body = {"worker": followed.worker or "unknown", "log_id": followed.log_id,
                "actor": {"atespace": followed.actor[0], "name": followed.actor[1]},
                "lines": [{"time": datetime.fromtimestamp(line.time, UTC).isoformat(), "offset": line.offset,
                           "line": line.text} for line in batch]}  # fmt: skip
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.HTTPError as error:
            return self._failed(f"{type(error).__name__}: {error}")
        if not response.is_success:
            return self._failed(f"{response.status_code} {response.text[:200]}")
        self._backoff = self.interval
        if response.json().get("accepted") is False:
            log.warning("the API refused %d lines of %s/%s from this node (the actor is no longer placed here)",
                        len(batch), *followed.actor)  # fmt: skip
        return True

    def _failed(self, why: str) -> bool:
        log.warning("output POST %s failed: %s; retrying in %.1fs", self.url, why, self._backoff)
        self._retry_at = self.clock() + self._backoff
        self._backoff = min(self._backoff * 2, 10.0)
        return False

    def _record(self, followed: _Followed) -> None:
        state = followed.path.with_name(followed.path.name + STATE_SUFFIX)
        temporary = state.with_name(state.name + ".tmp")
        try:
            temporary.write_text(json.dumps({"log_id": followed.log_id, "inode": followed.inode,
                                             "offset": followed.acked_offset}))  # fmt: skip
            os.replace(temporary, state)
        except OSError as error:
            log.warning("cannot record the shipped offset of %s: %s", followed.path, error)


def _cut(data: bytes, start: int, *, final: bool) -> list[tuple[int, bytes | None]]:
    """``data`` (which begins at byte ``start`` of the file) as (offset, line) pairs; a last
    piece without its newline is (offset, None) unless ``final`` or longer than MAX_LINE_BYTES."""
    pieces: list[tuple[int, bytes | None]] = []
    position = 0
    while position < len(data):
        end = data.find(b"\n", position, position + MAX_LINE_BYTES + 1)
        if end < 0:
            rest = len(data) - position
            if rest <= MAX_LINE_BYTES and not final:
                pieces.append((start + position, None))
                break
            end = min(len(data), position + MAX_LINE_BYTES)
            while end < len(data) and end > position + 1 and (data[end] & 0xC0) == 0x80:
                end -= 1  # not inside a UTF-8 character
            pieces.append((start + position, data[position:end]))
            position = end
            continue
        pieces.append((start + position, data[position:end]))
        position = end + 1
    return pieces


def keep_output(log_path: Path, start: int, destination: Path) -> None:
    """Writes the newest ``OUTPUT_BYTES`` of ``log_path`` from byte ``start`` on (beginning at a
    line) to ``destination``: what a FULL snapshot keeps of its sandbox's output. Nothing is
    written when there is none. Blocking."""
    try:
        size = log_path.stat().st_size
    except FileNotFoundError:
        return
    begin = max(start if start <= size else 0, size - OUTPUT_BYTES)
    with open(log_path, "rb") as f:
        f.seek(begin)
        data = f.read(size - begin)
    if begin > start:  # cut inside a line: from the next one
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    if data:
        destination.write_bytes(data)


def inherit(snapshot_output: Path, log_path: Path) -> None:
    """Appends a snapshot's kept output (``OUTPUT_FILE``) to ``log_path``, ending it with a
    newline: a sandbox restored from another actor's snapshot printed those lines before the
    save. Nothing when the snapshot kept none. Blocking."""
    try:
        data = snapshot_output.read_bytes()
    except FileNotFoundError:
        return
    if not data:
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as f:
        f.write(data if data.endswith(b"\n") else data + b"\n")
