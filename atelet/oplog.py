"""Idempotency by operation ID: each completed operation's response survives atelet restarts.

``OperationLog.run(op_id, kind, response_type, fn)`` runs ``fn`` once per ``op_id``:
- a completed operation (a JSON record ``<dir>/<sha256(op_id)>.json`` holding the kind and the
  serialized response) returns the recorded response without running anything;
- while it runs, the same file holds a ``started`` record (kind, no response): after an atelet
  crash it tells which operations were in flight (``in_flight``); it is replaced by the completed
  record, or removed when the operation fails. A started record does not answer a repeat: the
  repeat runs the operation again (``Node`` makes that safe, e.g. by adopting the sandbox the
  interrupted Run/Restore started);
- a repeat while the first call still runs waits for that same run (which is shielded from the
  cancellation of any one caller, so a dropped gRPC call never leaves a half-done side effect);
- failures are not recorded: a retry after an error runs the operation again;
- reusing an op_id for a different kind of call is INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from google.protobuf.message import Message

from atelet.errors import invalid

M = TypeVar("M", bound=Message)


class OperationLog:
    """Completed-operation records in ``directory`` plus the in-flight ones in memory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._running: dict[str, tuple[str, asyncio.Task[Message]]] = {}

    def _path(self, op_id: str) -> Path:
        return self.directory / f"{hashlib.sha256(op_id.encode()).hexdigest()}.json"

    def recorded(self, op_id: str, kind: str, response_type: type[M]) -> M | None:
        """The response recorded for ``op_id``, None when the operation never completed here."""
        try:
            record = json.loads(self._path(op_id).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if record.get("kind") != kind:
            raise invalid(f"operation_id: {op_id!r} was already used for a {record.get('kind')} call")
        if "response" not in record:  # started, never finished (the atelet died meanwhile)
            return None
        response = response_type()
        response.ParseFromString(base64.b64decode(record["response"]))
        return response

    def in_flight(self) -> list[tuple[str, str]]:
        """(operation_id, kind) of every operation recorded as started and never finished."""
        found = []
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(record, dict) and "response" not in record:
                found.append((str(record.get("operation_id")), str(record.get("kind"))))
        return found

    def prune(self, older_than_seconds: float, now: float | None = None) -> int:
        """Removes the records of calls that completed more than ``older_than_seconds`` ago (a
        retry that late runs the call again, which each call's own checks make safe: a restore
        onto a worker that runs the actor already, a checkpoint onto a destination that holds
        its own snapshot); a record of a call in flight, or one that started and never
        finished, stays. Returns how many were removed."""
        limit = (time.time() if now is None else now) - older_than_seconds
        removed = 0
        for path in self.directory.glob("*.json") if self.directory.is_dir() else ():
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if "response" in record and float(record.get("completed_at") or 0) < limit \
                    and str(record.get("operation_id")) not in self._running:  # fmt: skip
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def _write(self, op_id: str, record: dict[str, object]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(op_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)

    def _started(self, op_id: str, kind: str) -> None:
        self._write(op_id, {"operation_id": op_id, "kind": kind, "started_at": time.time()})

    def _failed(self, op_id: str) -> None:
        path = self._path(op_id)
        try:
            if "response" not in json.loads(path.read_text()):
                path.unlink()
        except (OSError, json.JSONDecodeError):
            pass

    def _record(self, op_id: str, kind: str, response: Message) -> None:
        self._write(op_id, {
            "operation_id": op_id,
            "kind": kind,
            "completed_at": time.time(),
            "response": base64.b64encode(response.SerializeToString()).decode(),
        })

    async def run(self, op_id: str, kind: str, response_type: type[M], fn: Callable[[], Awaitable[M]]) -> M:
        """Runs ``fn`` at most once to success for ``op_id`` (see the module doc)."""
        if not op_id:
            raise invalid("operation_id: required")
        done = self.recorded(op_id, kind, response_type)
        if done is not None:
            return done
        running = self._running.get(op_id)
        if running is None:
            async def body() -> M:
                try:
                    self._started(op_id, kind)
                    try:
                        response = await fn()
                    except BaseException:
                        self._failed(op_id)
                        raise
                    self._record(op_id, kind, response)
                    return response
                finally:
                    self._running.pop(op_id, None)

            task: asyncio.Task[Message] = asyncio.ensure_future(body())
            self._running[op_id] = (kind, task)
        else:
            running_kind, task = running
            if running_kind != kind:
                raise invalid(f"operation_id: {op_id!r} is in use by a running {running_kind} call")
        result = await asyncio.shield(task)
        assert isinstance(result, response_type)
        return result

    async def drain(self) -> None:
        """Waits for every in-flight operation (used at shutdown)."""
        tasks = [task for _, task in self._running.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
