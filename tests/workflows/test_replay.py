"""Replay every recorded history (tests/workflows/histories/*.json) with the real workflow classes,
in the worker's sandbox runner: a workflow change that would break the runs in flight when it is
deployed (non-determinism) fails here instead of in production.

When this fails:
- You did not mean to change what a workflow does (its activities, their order and arguments'
  types, timers, child workflows, signals, continue-as-new): the failure names the event and
  the command that no longer match; fix the code.
- You did mean to (an intended change of the workflow's shape): runs started by the old code
  may still be in flight when it is deployed, so guard the change with
  `workflow.patched("<change-id>")` (or start a new workflow type) unless no old run can be
  running then. Then re-record: `.venv/bin/python -m tests.workflows.record_histories`
  (or name the scenarios to re-record), and commit the changed files under histories/. Keep a
  copy of an old history under a name of its own (e.g. `<scenario>.before-<change-id>.json`)
  while old runs may still be replayed: it proves the patched code still replays them.
A new workflow needs a scenario in record_histories.py (`test_every_scenario_is_recorded_and_every_workflow_has_a_history`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from temporal_worker.main import WORKFLOWS, workflow_runner
from tests.workflows.record_histories import HISTORIES, SCENARIOS

RECORDED = sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay/{path.stem}", path.read_text())


@pytest.mark.parametrize("path", RECORDED, ids=[path.stem for path in RECORDED])
async def test_a_recorded_history_replays_deterministically(path: Path) -> None:
    replayer = Replayer(workflows=WORKFLOWS, workflow_runner=workflow_runner())
    # Raises (a NondeterminismError naming the mismatch, or the workflow's own error) if the
    # current code does not make the commands the history recorded.
    result = await replayer.replay_workflow(load(path))
    assert result.replay_failure is None


def test_every_scenario_is_recorded_and_every_workflow_has_a_history() -> None:
    assert {path.stem for path in RECORDED} >= set(SCENARIOS), "run python -m tests.workflows.record_histories"
    recorded_types = set()
    for path in RECORDED:
        first = load(path).events[0]
        assert first.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        recorded_types.add(first.workflow_execution_started_event_attributes.workflow_type.name)
    registered = {workflow._Definition.must_from_class(cls).name for cls in WORKFLOWS}
    assert recorded_types == registered
