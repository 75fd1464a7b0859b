"""`ate worker`: the Temporal worker for task queue `ate-control` (all workflows and activities).

Entry point only: loads settings, opens the store and the Temporal client, registers the
workflows and activities, serves until SIGTERM/SIGINT, then drains and shuts down before the
event loop closes (TEMPORAL.md: a worker left running at interpreter exit can crash it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

import uvloop
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.atelet import AteletActivities
from activities.atelet_tls import AteletClientTls, AteletTlsError
from activities.db import DbActivities
from activities.wake import WakeActivities
from domain.operations.snapshot_gc import SnapshotGcInput
from domain.temporal import SNAPSHOT_GC_WORKFLOW_ID, TASK_QUEUE, WORKFLOW_TASK_TIMEOUT
from store import Store
from temporal_worker.namespace_retention import ensure_retention
from temporal_worker.search_attributes import ensure_search_attributes
from temporal_worker.settings import WorkerSettings
from workflows.eviction_deadline import EvictionDeadlineWorkflow
from workflows.exec_in_actor import ExecInActorWorkflow
from workflows.freeze_actor import FreezeActorWorkflow
from workflows.golden_snapshot import GoldenSnapshotWorkflow
from workflows.pause_actor import PauseActorWorkflow
from workflows.resume_actor import ResumeActorWorkflow
from workflows.revert_actor import RevertActorWorkflow
from workflows.snapshot_gc import SnapshotGarbageCollectionWorkflow
from workflows.suspend_actor import SuspendActorWorkflow
from workflows.upload_snapshot import UploadSnapshotWorkflow
from workflows.wake_actor import WakeActorWorkflow

log = logging.getLogger("ate.worker")

WORKFLOWS = [
    ResumeActorWorkflow,
    SuspendActorWorkflow,
    PauseActorWorkflow,
    FreezeActorWorkflow,
    ExecInActorWorkflow,
    UploadSnapshotWorkflow,
    GoldenSnapshotWorkflow,
    RevertActorWorkflow,
    EvictionDeadlineWorkflow,
    SnapshotGarbageCollectionWorkflow,
    WakeActorWorkflow,
]


def metrics_runtime(listen: str) -> Runtime:
    """A Temporal runtime exporting the SDK's metrics and ate's operation metrics on `listen`/metrics.

    Operation metrics come from the workflows (workflows.steps.record_operation): counts and
    durations by operation and outcome; the SDK adds task latencies, slots and failures.
    """
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=listen, counters_total_suffix=True, durations_as_seconds=True)
        )
    )


async def ensure_snapshot_gc(client: Client, settings: WorkerSettings) -> None:
    """Start the snapshot garbage collector unless it already runs (one per namespace)."""
    await client.start_workflow(
        SnapshotGarbageCollectionWorkflow.run,
        SnapshotGcInput(
            interval_seconds=settings.snapshot_gc_interval_seconds, min_age_seconds=settings.snapshot_gc_min_age_seconds
        ),
        id=SNAPSHOT_GC_WORKFLOW_ID,
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
    )


SANDBOX_PASSTHROUGH = ("workflows", "domain")
"""Our workflow and domain packages are imported once and shared by every workflow run instead of being
re-imported into each run's sandbox (TEMPORAL.md: the sandbox costs ~8 ms of CPU per workflow,
much of it re-importing). Its modules are deterministic: no I/O, clocks or randomness outside
`temporalio.workflow`; the sandbox still guards everything else they import."""


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox every ate workflow runs in (and is replayed in), with SANDBOX_PASSTHROUGH."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    )


def activities(
    db: DbActivities, atelets: AteletActivities, wakes: WakeActivities | None = None
) -> list[Callable[..., Any]]:
    """Every activity the workflows call, registered by the name each is defined with (`wakes`:
    the schedules' requests; None: a worker without a router URL, whose wakes fail saying so)."""
    wakes = wakes or WakeActivities(None)
    return [
        db.begin_resume,
        db.finish_resume,
        db.resume_finished,
        db.resume_progress,
        db.rollback_resume,
        db.begin_suspend,
        db.drain_routers,
        db.complete_suspend,
        db.rollback_suspend,
        db.suspend_completed,
        db.begin_pause,
        db.complete_pause,
        db.begin_upload,
        db.complete_upload,
        db.abandon_upload,
        db.begin_golden,
        db.complete_golden,
        db.fail_golden,
        atelets.start,
        atelets.place_and_restore,
        atelets.checkpoint,
        atelets.copy_snapshot,
        atelets.terminate,
        db.begin_revert,
        db.fence_worker,
        db.finish_revert,
        db.begin_drain,
        db.drain_leftovers,
        db.crash_after_deadline,
        db.garbage_snapshots,
        atelets.delete_snapshot,
        db.begin_freeze,
        db.finish_freeze,
        db.rollback_freeze,
        atelets.freeze,
        db.begin_exec,
        db.finish_exec,
        atelets.exec_command,
        db.pressure_victims,
        db.release_room,
        db.leave_room_queue,
        db.rollback_thaw,
        wakes.wake_request,
    ]


def build_worker(client: Client, store: Store, atelets: AteletActivities, settings: WorkerSettings) -> Worker:
    """A Temporal worker with every ate workflow and activity, tuned as TEMPORAL.md measured."""
    return Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=WORKFLOWS,
        workflow_runner=workflow_runner(),
        activities=activities(
            DbActivities(store), atelets, WakeActivities(settings.router_url)
        ),
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        max_concurrent_local_activities=settings.max_concurrent_local_activities,
        max_cached_workflows=settings.max_cached_workflows,
        max_concurrent_workflow_task_polls=20,
        nonsticky_to_sticky_poll_ratio=0.5,
        # A workflow whose worker died waits this long for its sticky queue before another worker
        # takes it (the SDK default is 10 s): the failover bound WORKFLOW_TASK_TIMEOUT promises.
        sticky_queue_schedule_to_start_timeout=WORKFLOW_TASK_TIMEOUT,
    )


async def serve(settings: WorkerSettings) -> None:
    """Run the worker until cancelled or signalled.

    Raises:
        AteletTlsError: the atelet client's TLS settings are missing or their files unusable.
    """
    tls = AteletClientTls.from_settings(
        settings.atelet_client_tls_cert, settings.atelet_client_tls_key, settings.atelet_client_tls_ca,
        "ate_atelet_client_tls",
    )
    tls.credentials()  # unusable files fail the start, not every activity
    store = await Store.connect(settings.database_url, max_size=20)
    await store.migrate()
    client = await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        runtime=metrics_runtime(settings.metrics_listen),
    )
    await ensure_search_attributes(client, settings.temporal_namespace)
    await ensure_retention(client, settings.temporal_namespace, settings.temporal_retention_days)
    atelets = AteletActivities(store, tls=tls)
    worker = build_worker(client, store, atelets, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(worker.run())
    await ensure_snapshot_gc(client, settings)
    print(f"worker: ready on task queue {TASK_QUEUE} ({settings.temporal_address})", flush=True)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([run, waiter], return_when=asyncio.FIRST_COMPLETED)
    await worker.shutdown()
    waiter.cancel()
    await atelets.close()
    await store.close()


def main(argv: list[str] | None = None) -> None:
    """`ate worker [--database-url URL] [--temporal-address HOST:PORT] [--namespace NS]`."""
    parser = argparse.ArgumentParser(prog="ate worker", description="Temporal worker for ate-control")
    parser.add_argument("--database-url", help="PostgreSQL URL (env ATE_DATABASE_URL)")
    parser.add_argument("--temporal-address", help="Temporal frontend host:port (env ATE_TEMPORAL_ADDRESS)")
    parser.add_argument("--namespace", help="Temporal namespace (env ATE_TEMPORAL_NAMESPACE)")
    parser.add_argument("--metrics-listen", help="host:port of /metrics (env ATE_METRICS_LISTEN)")
    parser.add_argument("--atelet-client-tls-cert", help="PEM: the control plane's client certificate for atelets "
                        "(env ATE_ATELET_CLIENT_TLS_CERT)")
    parser.add_argument("--atelet-client-tls-key", help="PEM: its key (env ATE_ATELET_CLIENT_TLS_KEY)")
    parser.add_argument("--router-url", help="a router's base URL, where schedules' wakes are sent (env ATE_ROUTER_URL)")
    parser.add_argument("--atelet-client-tls-ca", help="PEM: the CA of the nodes' certificates (env ATE_ATELET_CLIENT_TLS_CA)")
    args = parser.parse_args(argv)
    overrides = {
        k: v
        for k, v in {
            "database_url": args.database_url,
            "temporal_address": args.temporal_address,
            "temporal_namespace": args.namespace,
            "metrics_listen": args.metrics_listen,
            "atelet_client_tls_cert": args.atelet_client_tls_cert,
            "atelet_client_tls_key": args.atelet_client_tls_key,
            "atelet_client_tls_ca": args.atelet_client_tls_ca,
            "router_url": args.router_url,
        }.items()
        if v
    }
    settings = WorkerSettings(**overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # uvloop runs the worker's own event loop (gRPC to Temporal and atelets, asyncpg); workflow
    # code keeps running on Temporal's deterministic loop. The throughput benchmark's profile
    # had a third of the worker's CPU in the pure-Python selector loop and its thread wake-ups.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            runner.run(serve(settings))
        except AteletTlsError as error:
            print(f"worker: {error}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
