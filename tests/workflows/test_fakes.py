"""The fakes themselves (fakes.py): one per real activity, with its name and types; loud when a
workflow calls something a test did not script."""

from __future__ import annotations

import pytest
from temporalio import activity

from activities.atelet import AteletActivities
from activities.db import DbActivities
from domain.activity_names import Activity
from domain.operations.resume import BeginResumeInput, ResumePlan
from domain.operations.suspend import BeginSuspendInput, SuspendActorInput
from tests.workflows.fakes import REAL_ACTIVITIES, Fakes
from tests.workflows.harness import Ate
from tests.workflows.samples import C1
from workflows.suspend_actor import SuspendActorWorkflow


def test_there_is_a_fake_for_every_activity_the_worker_registers_with_its_types() -> None:
    fakes = {activity._Definition.must_from_callable(fn).name: fn for fn in Fakes().activities()}
    assert set(fakes) == set(REAL_ACTIVITIES)
    assert len(REAL_ACTIVITIES) == 43
    real = activity._Definition.must_from_callable(DbActivities.begin_resume)
    fake = activity._Definition.must_from_callable(fakes["begin_resume"])
    assert (fake.arg_types, fake.ret_type) == (real.arg_types, real.ret_type) == ([BeginResumeInput], ResumePlan)
    assert activity._Definition.must_from_callable(AteletActivities.start).name == "atelet_start"


def test_every_activity_name_is_registered_once_and_nothing_else() -> None:
    # domain.activity_names.Activity is the one spelling of the names the workflows run and the
    # worker registers: each member is a real activity, and each real activity is a member.
    assert sorted(REAL_ACTIVITIES) == sorted(member.value for member in Activity)


def test_only_real_activities_can_be_scripted() -> None:
    with pytest.raises(KeyError, match="resume_begin is not an activity"):
        Fakes().script("resume_begin", None)


async def test_a_call_nobody_scripted_fails_the_workflow_naming_it(ate: Ate) -> None:
    failure = await ate.failure(SuspendActorWorkflow.run, SuspendActorInput(actor=C1), id=C1.workflow_id)
    assert failure.type == "Unscripted"
    assert failure.message.startswith("unscripted call of activity begin_suspend: BeginSuspendInput(")
    assert [(call.name, call.input, call.attempt) for call in ate.fakes.calls] == [
        ("begin_suspend", BeginSuspendInput(actor=C1, operation_id=ate.run_id), 1)
    ]
