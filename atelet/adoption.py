"""Adoption after an atelet restart: taking over the sandboxes a previous atelet process started.

Sandboxes are detached and outlive the atelet process. Whenever what runs on a worker changes, it
is persisted (``atelet.assignments``). At start (``adopt_sandboxes``, from ``Node.start``) every
recorded sandbox that still runs is adopted: the worker is running that actor again (exit watch
re-armed, shown in Health and heartbeats), and its network namespace is left as it is (only the
host end's address is re-applied, ``SandboxDriver.reattach``). A recorded sandbox that is gone or
stopped is deleted and its worker reported idle (its durable dirs are kept); sandboxes no record
names are deleted. A Run/Restore repeated with the operation ID that started an adopted sandbox
(the atelet died before it recorded the response) probes that sandbox and answers success instead
of starting a second one (``SandboxOperations``). A record with a checkpoint in progress is
adopted whatever its sandbox's state (a FULL save ends the sandbox): the worker keeps the actor
and the checkpoint, and ``Node.start`` has its save followed (``atelet.checkpoint_ops``). A record
marked ``frozen`` (Freeze) is adopted frozen (``SandboxDriver.reattach`` with ``frozen``): its
exit watch is re-armed, and Thaw lets it run.
"""

from __future__ import annotations

import logging

from atelet.assignments import Assignment
from atelet.drivers import Drivers
from atelet.drivers.base import SandboxDriver
from atelet.exits import ExitWatcher
from atelet.workers import WorkerTable, describe

log = logging.getLogger(__name__)


async def adopt_sandboxes(drivers: Drivers, table: WorkerTable, exits: ExitWatcher) -> None:
    """Adopts every recorded sandbox that still runs, forgets the other records and deletes every
    sandbox of each driver that was not adopted.

    Args:
        drivers: the runtime of each sandbox class whose sandboxes survived the restart (a
            record goes to the driver of its worker's pool's class).
        table: the workers (adopted ones become ``running`` with ``adopted`` set) and their records.
        exits: re-arms the exit watch of each adopted sandbox.

    Raises:
        AteletError: when a driver cannot list or delete its sandboxes.
    """
    listed = {sandbox_class: await driver.list() for sandbox_class, driver in drivers.items()}
    adopted: set[str] = set()
    for name, record in table.assignments.load_all().items():
        worker = table.by_name.get(name)
        driver = drivers.get(worker.pool.sandbox_class) if worker is not None else None
        found = set(listed.get(worker.pool.sandbox_class, [])) if worker is not None else set()
        if await _adopt(driver, table, exits, name, record, found):
            if record.container_id is not None:
                adopted.add(record.container_id)
        else:
            table.assignments.remove(name)
    for sandbox_class, driver in drivers.items():
        for cid in listed[sandbox_class]:
            if cid not in adopted:
                log.warning("removing leftover sandbox %s from a previous run", cid)
                await driver.delete(cid)


async def _adopt(driver: SandboxDriver | None, table: WorkerTable, exits: ExitWatcher, name: str, record: Assignment,
                 listed: set[str]) -> bool:
    """Takes over the sandbox ``record`` names if it still runs and its network is intact, or
    if a checkpoint of it was in progress."""
    worker = table.by_name.get(name)
    what = f"sandbox {record.container_id or '(exited)'} of {describe(record.actor)} on {name}"
    why = ""
    if worker is None or driver is None:
        why = "no such worker any more"
    elif record.net != worker.net:
        why = f"the worker's network changed ({record.net.worker_ip} -> {worker.net.worker_ip})"
    elif record.checkpoint is not None:
        worker.actor, worker.spec, worker.container_id = record.actor, record.spec, record.container_id
        worker.state, worker.exit_reason, worker.adopted = record.state, record.exit_reason, True
        worker.operation = (record.operation_id, record.operation_kind)
        worker.started_at, worker.checkpoint = record.started_at, record.checkpoint
        table.persist(worker)
        log.warning("adopted %s with its checkpoint %s in progress (to %s)", what, record.checkpoint.operation_id,
                    record.checkpoint.snapshot_uri)
        return True
    elif record.state != "running" or not record.container_id:
        why = f"it had {record.state} before the restart"
    else:
        why = await driver.reattach(record.container_id, record.net, listed, frozen=record.frozen)
    if why or worker is None:
        log.warning("not adopting %s: %s; the worker is idle (durable dirs kept)", what, why)
        return False
    worker.actor, worker.spec, worker.container_id = record.actor, record.spec, record.container_id
    worker.state, worker.exit_reason, worker.adopted = "running", "", True
    worker.operation = (record.operation_id, record.operation_kind)
    worker.started_at, worker.frozen = record.started_at, record.frozen
    exits.watch(worker)
    table.persist(worker)
    log.warning("adopted %s (started by operation %s, %s)%s", what, record.operation_id, record.operation_kind,
                " frozen" if record.frozen else "")
    return True
