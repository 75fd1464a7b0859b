"""Telling a restored sandbox what it was restored from (issue 30): the containers' post_restore
hooks (the template's `lifecycle.postRestore.httpPost`), called once the wakeup probe answered and
before the Restore returns, so before any traffic reaches the actor.

Copies of one snapshot (forks, or every actor's first resume from its template's golden snapshot)
start with the same memory: what must be unique (tokens, seeds, leases) has to be renewed, and
the workload learns here that it should. The body is JSON:
``{"actor": "demo/c1", "source": "actor/demo/src", "generation": 3, "forked": true,
"suspended_at": "2026-12-07T18:30:00Z", "suspended_seconds": 12.5, "restored_at": "..."}``
(`suspended_at` and `suspended_seconds` null when not known).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from atelet import probe
from atelet.errors import precondition
from atelet.proto import atelet_pb2 as pb

POST_RESTORE_TIMEOUT_SECONDS = 10.0
"""How long a post_restore hook may take to answer before the restore fails."""


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def notice_body(actor: tuple[str, str], notice: pb.RestoreNotice, now: float) -> bytes:
    """The JSON a post_restore hook gets (see the module's docstring); `now` in epoch seconds."""
    known = notice.suspended_at > 0
    return json.dumps({
        "actor": f"{actor[0]}/{actor[1]}",
        "source": notice.source,
        "generation": notice.generation,
        "forked": notice.forked,
        "suspended_at": _iso(notice.suspended_at) if known else None,
        "suspended_seconds": round(max(0.0, now - notice.suspended_at), 3) if known else None,
        "restored_at": _iso(now),
    }).encode()  # fmt: skip


async def tell_restored(worker_ip: str, actor: tuple[str, str], spec: pb.WorkloadSpec, notice: pb.RestoreNotice) -> None:
    """POST the notice to every container's post_restore hook, in order.

    Raises:
        AteletError: FAILED_PRECONDITION when a hook does not answer 2xx within
            POST_RESTORE_TIMEOUT_SECONDS, naming the container, the hook and the answer.
    """
    body = notice_body(actor, notice, time.time())
    for container in spec.containers:
        hook = container.post_restore
        if not hook.port:
            continue
        status = await probe.http_post(worker_ip, hook.port, hook.path or "/", body, POST_RESTORE_TIMEOUT_SECONDS)
        if status is None or not 200 <= status < 300:
            answer = f"answered {status}" if status is not None else (
                f"gave no answer (nothing listening, or no answer within {POST_RESTORE_TIMEOUT_SECONDS:g} s)")  # fmt: skip
            raise precondition(
                f"postRestore hook POST :{hook.port}{hook.path or '/'} of container {container.name} {answer}; "
                "the restored actor was not let in: fix the hook, or remove lifecycle.postRestore from the template"
            )
