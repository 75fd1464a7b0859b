"""Retention of the operations history (issue 30, bounded storage): every resume, suspend, exec
and idle step adds a row to `operations` (what `ate describe actor` and the events of `ate logs`
show); without an end the table grows with every one. Each api-server prunes it every
`PRUNE_SECONDS`: finished operations older than `ApiSettings.operation_history_days`, and those
beyond each actor's newest `ApiSettings.operation_history_per_actor`. Running ones stay.
Several replicas pruning at once delete the same rows, which is harmless."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from store.interfaces import ApiStore

log = logging.getLogger(__name__)

PRUNE_SECONDS = 600.0


async def prune_once(store: ApiStore, days: float, per_actor: int) -> int:
    """One pruning (module doc); returns how many rows went."""
    return await store.history.prune(datetime.now(UTC) - timedelta(days=days), per_actor)


async def prune_loop(store: ApiStore, days: float, per_actor: int, interval: float = PRUNE_SECONDS) -> None:
    """`prune_once` now and every `interval` seconds until cancelled; a failure is logged and
    tried again at the next round."""
    while True:
        try:
            removed = await prune_once(store, days, per_actor)
            if removed:
                log.info("operations history: removed %d rows (older than %g days, or past %d per actor)", removed,
                         days, per_actor)  # fmt: skip
        except Exception as error:  # the database down, a timeout: the next round tries again
            log.warning("operations history: pruning failed (tried again in %.0f s): %s", interval, error)
        await asyncio.sleep(interval)
