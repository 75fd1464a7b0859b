"""The bare-Temporal floor: a workflow of one activity that does nothing, in ResumeActor's shape.

Same shape as ResumeActor (since it places, restores and marks RUNNING in one activity,
`place_and_restore`): one regular activity with the options of workflows.steps.atelet_step
(heartbeat timeout, on the same task queue, so eagerly executed), and a worker with the
settings of temporal_worker.main.build_worker (WorkerSettings defaults, 20 workflow-task
pollers, sticky ratio 0.5, the same Prometheus runtime), on its own task queue of the same
Temporal server. Earlier floors: three local activities, then local + regular + local
(bench/README.md has their figures). Run as its own process, like `ate worker`:
`python -m bench.floorwf --address HOST:PORT` prints `floor: ready` and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

import uvloop
from temporalio import activity, workflow
from temporalio.common import RetryPolicy

TASK_QUEUE = "bench-floor"
_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=2),
    maximum_attempts=20,
)


@activity.defn(name="bench_noop")
async def noop(value: str) -> str:
    return value


@workflow.defn(name="BenchFloor")
class FloorWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        result: str = await workflow.execute_activity(
            "bench_noop",
            value,
            result_type=str,
            start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=_RETRY,
        )
        return result


async def serve(address: str, metrics_listen: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from temporal_worker.settings import WorkerSettings

    settings = WorkerSettings()
    runtime = None
    try:
        from temporal_worker.main import metrics_runtime

        runtime = metrics_runtime(metrics_listen)
    except ImportError:
        pass
    client = await Client.connect(address, runtime=runtime) if runtime else await Client.connect(address)
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[FloorWorkflow],
        # the same sandbox setting as `ate worker` (its own workflow package passed through)
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("bench")
        ),
        activities=[noop],
        max_concurrent_workflow_tasks=settings.max_concurrent_workflow_tasks,
        max_concurrent_local_activities=settings.max_concurrent_local_activities,
        max_cached_workflows=settings.max_cached_workflows,
        max_concurrent_workflow_task_polls=20,
        nonsticky_to_sticky_poll_ratio=0.5,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(worker.run())
    print("floor: ready", flush=True)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([run, waiter], return_when=asyncio.FIRST_COMPLETED)
    await worker.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--metrics-listen", default="127.0.0.1:19101")
    args = parser.parse_args()
    # the same event loop as `ate worker` (uvloop)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(args.address, args.metrics_listen))
