"""Kill matrix: every failpoint of every workflow x every process, each killed with SIGKILL.

Each case parks an operation at failpoint F (`ATE_FAILPOINTS_DIR`, domain/failpoints.py), SIGKILLs
process P (the worker, the api-server, the Temporal dev server, the atelet, or Postgres for a few
steps), starts P again, disarms F, lets the operation settle (60 s at most; a request that died
with the api-server is re-sent, as a client would) and then checks, independently of the
product's own view (tests/durability/checks.py):

- the actor is RUNNING or SUSPENDED (never RESUMING/SUSPENDING/REVERTING), a template Ready or
  Failed (never Pending), and no workflow of it is still open;
- a RUNNING actor answers over HTTP at its worker IP with the right counts (examples/counter:
  memory_count and file_count +1 per request, FULL scope keeps both across suspend/resume), and
  the atelet's Health shows it running on exactly the worker the API names; a SUSPENDED actor
  runs nowhere (and, resumed again, answers with the right counts);
- `placements` holds exactly the RUNNING/transitional actors; `/v1/workers` used_places agrees;
- the latest snapshot of every actor and template is COMPLETED, its directory holds a
  manifest.json whose files' sha256 match (hashed here), COMPLETED generations are 1..n;
- `runsc list` shows one sandbox per RUNNING actor, `ip netns list` exactly the workers' namespaces.

Every case uses a fresh actor (or template) and ends with it SUSPENDED, so cases are independent;
after a failed case the actor is quarantined (workflow terminated, rows reset, atelet restarted)
so that one product bug does not fail every later case.

What makes each step idempotent (read from activities/store/store.py, activities/*.py and
atelet/oplog.py, atelet/sandbox_ops.py, atelet/snapshots/); the operation ID is the workflow
run ID, and each atelet call's ID is `<run id>/<run|restore|checkpoint|terminate>`:

| workflow | step (failpoints) | what makes a retry safe |
|---|---|---|
| ResumeActor | placement `begin_resume` (before_placement, after_bind) | one transaction locks the actor row; state guard SUSPENDED; a repeat finds RESUMING with its own `operation_id` and returns the same worker and snapshot; the bind re-checks room under the worker row lock; a placement left by a dead operation is deleted before binding; `mark_actor_resuming` is guarded by the actor version |
| ResumeActor | restore `atelet_start` (atelet_call) | atelet OperationLog keyed by `<run>/restore`: a completed call's response is recorded on disk and returned again, a running one is awaited; the worker accepts only its current actor (`_claim`) |
| ResumeActor | finalize `finish_resume` (before_finalize) | `mark_actor_running` only WHERE state RESUMING AND operation_id = this run; a repeat finds RUNNING with its own operation_id and returns |
| ResumeActor | rollback `rollback_resume` | guarded by operation_id; deletes the placement only if it is this run's |
| SuspendActor | mark `begin_suspend` (before_mark, after_mark) | actor row lock; guard RUNNING; a repeat finds SUSPENDING with its own operation_id and returns the same PENDING snapshot (`in_progress_snapshot_id`); generation = max+1 under the row lock, UNIQUE (owner, generation) |
| SuspendActor | checkpoint `atelet_checkpoint` (atelet_checkpoint) | OperationLog `<run>/checkpoint`; the destination `<gen>-<run id prefix>` is unique per operation and must not exist (or hold this operation's own completed checkpoint); data is staged, hashed, manifest.json written last, then renamed onto the destination |
| SuspendActor | finalize `complete_suspend` (before_finalize) | one transaction: `complete_snapshot` only WHERE state PENDING, `mark_actor_suspended` only WHERE SUSPENDING AND operation_id = this run; a repeat finds SUSPENDED with this snapshot |
| SuspendActor | rollback `rollback_suspend` | guarded by operation_id; deletes the snapshot only while PENDING |
| RevertActor | mark `begin_revert` (before_mark, after_mark) | actor row lock; a repeat finds REVERTING with its own operation_id; any revertable state (REVERTING of a dead revert included) is taken over; the in-progress PENDING snapshot is deleted, never promoted |
| RevertActor | terminate `atelet_terminate` / `fence_worker` | Terminate succeeds when nothing runs (OperationLog `<run>/terminate`); fencing sets the worker UNAVAILABLE, an idempotent write |
| RevertActor | finalize `finish_revert` (before_finalize) | `mark_actor_reverted` only WHERE REVERTING AND operation_id = this run; placement delete idempotent; a repeat finds SUSPENDED and returns |
| PauseActor | mark `begin_pause` (before_mark, after_mark) | as SuspendActor's mark, guard RUNNING; the reserved snapshot is LOCAL (`local:///...`, node = the worker's) |
| PauseActor | checkpoint `atelet_checkpoint` (atelet_checkpoint) | as SuspendActor's checkpoint, into the atelet's local-snapshots dir |
| PauseActor | finalize `complete_pause` (before_finalize) | `complete_snapshot` only WHERE PENDING, `mark_actor_paused` only WHERE PAUSING AND operation_id = this run; a repeat finds PAUSED with this local snapshot |
| SuspendActor from PAUSED | upload `atelet_copy_snapshot` (atelet_copy) | OperationLog `<run>/copy`; CopySnapshot verifies the source against its manifest, stages and renames, and returns an existing identical destination unchanged; the local snapshot is left in place |
| ResumeActor of a PAUSED actor, node full | detach: `begin_suspend`/`atelet_copy_snapshot`/`complete_suspend` under `<run>/detach` | the suspend steps above, under an operation ID of their own; then `begin_resume` as above |
| UploadSnapshot (async suspend) | `begin_upload`, `atelet_copy_snapshot`, `complete_upload` | `begin_upload` reuses the snapshot this run reserved (`find_snapshot_of_operation`); the copy as above; `complete_upload` is an update guarded by "the actor still waits for this local snapshot" and is a no-op when the upload already is the latest |
| GoldenSnapshot | placement `begin_golden` (before_placement, after_bind) | `find_snapshot_of_operation` + the template's placement with this run's operation_id: a repeat returns both; a placement of an earlier run is replaced |
| GoldenSnapshot | boot `atelet_start` (atelet_call) | OperationLog `<run>/run` |
| GoldenSnapshot | checkpoint `atelet_checkpoint` (atelet_checkpoint) | OperationLog `<run>/checkpoint`; unique destination as for SuspendActor |
| GoldenSnapshot | finalize `complete_golden` (before_finalize) | `complete_snapshot` only WHERE PENDING; phase Ready and the placement delete are idempotent writes |
| GoldenSnapshot | failure `fail_golden` | deletes only this run's placement and PENDING rows |

The atelet's operation log and its per-worker assignment records survive an atelet restart:
on start it adopts every recorded sandbox that still runs (runsc sandboxes are detached, so a
killed atelet does not take its actors with it) and deletes only what no record names; a
RUNNING actor whose sandbox did not survive is reported missing by the next heartbeat and
becomes CRASHED.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import pytest

from ate.cli.manifest import load_template_spec
from tests.durability.checks import (
    ATESPACE,
    SETTLE_SECONDS,
    actor_path,
    check_actor,
    check_global,
    check_snapshots,
    count,
    settle_actor,
    settle_template,
)
from tests.durability.harness import Request, Stack
from tests.durability.processes import REPO

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

PROCESSES = ("worker", "api-server", "temporal", "atelet")

FAILPOINTS = {
    "ResumeActor": ("before_placement", "after_bind", "atelet_call", "before_finalize"),
    "SuspendActor": ("before_mark", "after_mark", "atelet_checkpoint", "before_finalize"),
    "GoldenSnapshot": ("before_placement", "after_bind", "atelet_call", "atelet_checkpoint", "before_finalize"),
}


def _revert_steps() -> tuple[str, ...]:
    """RevertActor's failpoints as the activities declare them (none until RevertActor exists)."""
    steps: list[str] = []
    for path in sorted((REPO / "activities").rglob("*.py")):
        steps += re.findall(r'failpoint\("RevertActor\.(\w+)"\)', path.read_text())
    return tuple(dict.fromkeys(steps))


if _revert_steps():
    FAILPOINTS["RevertActor"] = _revert_steps()
POSTGRES_CASES = ("ResumeActor.after_bind", "SuspendActor.atelet_checkpoint", "GoldenSnapshot.before_finalize")

API_STEP = {"ResumeActor": "after_bind", "SuspendActor": "after_mark", "GoldenSnapshot": "atelet_checkpoint"}
"""The api-server holds nothing of an operation (it started the workflow and waits for it), so
its kill is the same at every step: one step per workflow, where a client sees the operation in
flight. (RevertActor: its first step after the mark.)"""
BEFORE_ATELET = {"before_placement", "after_bind"}
"""Resume/golden steps before the first atelet call: killing the atelet there is the same case as
at `atelet_call` (that failpoint also parks before the gRPC call), so only that one runs."""


def meaningful(op: str, step: str, process: str) -> bool:
    """Whether killing `process` at `op.step` is a case of its own (see API_STEP, BEFORE_ATELET)."""
    if process == "api-server":
        return step == API_STEP.get(op, "after_mark")
    if process == "atelet" and op in ("ResumeActor", "GoldenSnapshot"):
        return step not in BEFORE_ATELET
    return True


CASES = [
    pytest.param(f"{op}.{step}", process, id=f"{op}.{step}-kill-{process}")
    for op, steps in FAILPOINTS.items()
    for step in steps
    for process in PROCESSES
    if meaningful(op, step, process)
]
CASES += [pytest.param(fp, "postgres", id=f"{fp}-kill-postgres") for fp in POSTGRES_CASES]


@dataclass(frozen=True)
class Shape:
    """How the case of an actor workflow drives a fresh actor (see `test_kill`)."""

    verb: str
    """The REST call under test, `POST .../actors/<name>/<verb>`."""
    warm: bool
    """Resume the actor and make one request first (it answers (1, 1))."""
    expected: tuple[int, int]
    """What the actor answers after the case (resumed, when it rests elsewhere)."""
    states: tuple[str, ...]
    """The states the actor may rest in after the case."""


SHAPES = {
    # Completed (RUNNING, counts (1, 1)) or rolled back (SUSPENDED; resumed again: (1, 1)).
    "ResumeActor": Shape("resume", warm=False, expected=(1, 1), states=("RUNNING", "SUSPENDED")),
    # SUSPENDED with a COMPLETED generation 1, or RUNNING again; the next request answers (2, 2).
    "SuspendActor": Shape("suspend", warm=True, expected=(2, 2), states=("RUNNING", "SUSPENDED")),
    # Back to the last COMPLETED snapshot: none was taken, so the golden one (counts start again).
    "RevertActor": Shape("revert", warm=True, expected=(1, 1), states=("SUSPENDED",)),
}


def _name(prefix: str, failpoint: str, process: str) -> str:
    op, step = failpoint.split(".")
    short = {"ResumeActor": "r", "SuspendActor": "s", "GoldenSnapshot": "g", "RevertActor": "v"}[op]
    return re.sub(r"[^a-z0-9-]", "-", f"{prefix}{short}-{step}-{process}".lower())[:63]


# ---- the matrix ------------------------------------------------------------------------------


def quarantine(stack: Stack, actor: str | None = None, template: str | None = None) -> None:
    """After a failed case: end its workflow, reset its rows, restart the atelet (the control plane's heartbeat answer stops strays)."""
    stack.disarm_all()
    for part in stack.parts.values():
        if part.process is not None and part.process.poll() is not None:
            part.start()
            part.wait_ready()
    if stack.postgres.server is not None and not stack.postgres.server.running():
        stack.postgres.start()
    if actor:
        stack.terminate_workflow(f"actor/{ATESPACE}/{actor}")
        stack.sql("DELETE FROM placements WHERE holder = $1", f"actor/{ATESPACE}/{actor}")
        stack.sql(
            "UPDATE actors SET state = 'SUSPENDED', worker_id = NULL, operation = NULL, operation_id = NULL, "
            "in_progress_snapshot_id = NULL WHERE atespace = $1 AND name = $2",
            ATESPACE,
            actor,
        )
    if template:
        stack.terminate_workflow(f"template/{ATESPACE}/{template}")
        stack.sql("DELETE FROM placements WHERE holder = $1", f"template/{ATESPACE}/{template}")
        stack.sql("UPDATE actor_templates SET phase = 'Failed' WHERE atespace = $1 AND name = $2", ATESPACE, template)
    stack.kill_and_restart("atelet")


def park_kill_restart(stack: Stack, failpoint: str, process: str, request: Request) -> None:
    """Wait for the operation to park at `failpoint`, SIGKILL `process`, restart it, disarm."""
    stack.wait_reached(failpoint)
    stack.kill_and_restart(process)
    stack.disarm(failpoint)
    if process == "api-server":
        request.join(SETTLE_SECONDS)  # the re-sent request attaches to the operation
    else:
        request.join(5)


@pytest.mark.parametrize(("failpoint", "process"), CASES)
def test_kill(stack: Stack, template: str, failpoint: str, process: str) -> None:
    """Park `failpoint`, SIGKILL `process`, restart it, disarm; the operation settles consistently.

    An actor workflow runs on a fresh actor, resumed and asked once first unless it is a resume,
    and settles as its `SHAPES` entry says (states, counts). GoldenSnapshot (fresh template):
    Ready with a verified golden snapshot from which a new actor answers (1, 1), or Failed with
    its place and PENDING snapshot released. In every case no place, sandbox or namespace is left
    over.
    """
    if process == "postgres" and stack.postgres.server is None:
        pytest.skip("Postgres is external (ATE_DATABASE_URL): this harness cannot kill it")
    if failpoint.startswith("GoldenSnapshot."):
        _golden_case(stack, failpoint, process)
    else:
        _actor_case(stack, template, failpoint, process)


def _create_actor(stack: Stack, template: str, name: str) -> None:
    created = stack.rest("POST", f"/v1/atespaces/{ATESPACE}/actors", json={"name": name, "template": template})
    assert created.status_code == 201, created.text


def _actor_case(stack: Stack, template: str, failpoint: str, process: str) -> None:
    shape = SHAPES[failpoint.split(".")[0]]
    name = _name("", failpoint, process)
    _create_actor(stack, template, name)
    try:
        if shape.warm:
            resumed = stack.rest("POST", f"{actor_path(name)}/resume", timeout=90, json={"timeout_seconds": 60})
            assert resumed.status_code == 200, resumed.text
            assert count(stack, name) == (1, 1)
        stack.arm(failpoint)
        request = stack.in_background("POST", f"{actor_path(name)}/{shape.verb}", {"timeout_seconds": 120}, resend=True)
        park_kill_restart(stack, failpoint, process, request)
        settle_actor(stack, name)
        check_actor(stack, name, expected=shape.expected, states=shape.states)
    except BaseException:
        quarantine(stack, actor=name)
        raise


def _golden_case(stack: Stack, failpoint: str, process: str) -> None:
    name = _name("t", failpoint, process)
    actor = f"a-{name}"[:63]
    try:
        stack.arm(failpoint)
        spec = load_template_spec(REPO / "examples/counter/template.yaml")
        request = stack.in_background(
            "POST", f"/v1/atespaces/{ATESPACE}/templates?wait=true", {"name": name, "spec": spec}, resend=False
        )
        park_kill_restart(stack, failpoint, process, request)
        phase = settle_template(stack, name)
        check_global(stack)
        owner = f"template/{ATESPACE}/{name}"
        row = stack.sql(
            "SELECT phase, reason, golden_snapshot_id FROM actor_templates WHERE atespace = $1 AND name = $2",
            ATESPACE,
            name,
        )[0]
        if phase == "Failed":
            left = stack.sql("SELECT generation FROM snapshots WHERE owner = $1 AND state = 'PENDING'", owner)
            assert not left, f"Failed template keeps PENDING snapshots {left}"
            warnings.warn(f"template {name} Failed after the kill (an allowed outcome): {row['reason']}", stacklevel=1)
            return
        assert row["golden_snapshot_id"] is not None, row
        check_snapshots(stack, owner, row["golden_snapshot_id"])
        _create_actor(stack, name, actor)
        check_actor(stack, actor, expected=(1, 1))
    except BaseException:
        exists = stack.sql("SELECT 1 FROM actors WHERE atespace = $1 AND name = $2", ATESPACE, actor)
        quarantine(stack, actor=actor if exists else None, template=name)
        raise
