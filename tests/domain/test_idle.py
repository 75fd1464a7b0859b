"""Idle policies and pressure as a template writes them (issue 27): what is accepted, what each
step means, and the error that names the field for what is not."""

import pytest

from domain.idle import (
    IdleAction,
    IdlePolicy,
    IdleStep,
    PressurePolicy,
    idle_reason,
    parse_idle_policy,
    parse_pressure_policy,
)

FREEZE, PAUSE, SUSPEND = IdleAction.FREEZE, IdleAction.PAUSE, IdleAction.SUSPEND


def test_one_step_or_a_list() -> None:
    assert parse_idle_policy({"afterSeconds": 300, "action": "Suspend"}) == IdlePolicy((IdleStep(300, SUSPEND),))
    policy = parse_idle_policy([{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Suspend"}])
    assert policy.steps == (IdleStep(20, FREEZE), IdleStep(600, SUSPEND))
    assert policy.document() == [{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Suspend"}]
    assert parse_idle_policy(policy.document()) == policy


def test_absent_or_empty_is_off() -> None:
    assert parse_idle_policy(None).off
    assert parse_idle_policy([]).off
    assert IdlePolicy().next_step(None) is None


def test_the_next_step_goes_one_tier_further() -> None:
    policy = parse_idle_policy(
        [{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Pause"},
         {"afterSeconds": 86400, "action": "Suspend"}]
    )  # fmt: skip
    assert policy.next_step(None) == IdleStep(20, FREEZE)  # RUNNING
    assert policy.next_step(FREEZE) == IdleStep(600, PAUSE)  # FROZEN
    assert policy.next_step(PAUSE) == IdleStep(86400, SUSPEND)  # PAUSED
    assert policy.next_step(SUSPEND) is None
    assert parse_idle_policy({"afterSeconds": 5, "action": "Suspend"}).next_step(FREEZE) == IdleStep(5, SUSPEND)
    assert parse_idle_policy({"afterSeconds": 5, "action": "Freeze"}).next_step(FREEZE) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"afterSeconds": -1, "action": "Suspend"}, "idle.afterSeconds: must be a number of seconds > 0"),
        ({"afterSeconds": 0, "action": "Suspend"}, "idle.afterSeconds: must be a number of seconds > 0"),
        ({"afterSeconds": "300", "action": "Suspend"}, "idle.afterSeconds: must be a number of seconds > 0"),
        ({"afterSeconds": True, "action": "Suspend"}, "idle.afterSeconds: must be a number of seconds > 0"),
        ({"afterSeconds": float("nan"), "action": "Suspend"}, "idle.afterSeconds: must be a number"),
        ({"afterSeconds": 10**9, "action": "Suspend"}, "at most 31622400"),
        ({"afterSeconds": 30, "action": "Stop"}, "idle.action: must be one of Freeze, Pause, Suspend, got 'Stop'"),
        ({"afterSeconds": 30, "action": "suspend"}, "idle.action: must be one of Freeze, Pause, Suspend"),
        ({"afterSeconds": 30}, "idle.action: required, one of Freeze, Pause, Suspend"),
        ({"action": "Suspend"}, "idle.afterSeconds: required"),
        ({"afterSeconds": 30, "action": "Suspend", "when": 1}, "idle: unknown field 'when'"),
        ("300", "idle: expected a step {afterSeconds, action} or a list of steps"),
        ([{"afterSeconds": 600, "action": "Freeze"}, {"afterSeconds": 20, "action": "Suspend"}],
         "idle[1].afterSeconds: steps must be in increasing time, got 20 s after 600 s"),
        ([{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 20, "action": "Suspend"}],
         "idle[1].afterSeconds: steps must be in increasing time"),
        ([{"afterSeconds": 20, "action": "Suspend"}, {"afterSeconds": 600, "action": "Freeze"}],
         "idle[1].action: Freeze cannot follow Suspend"),
        ([{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Freeze"}],
         "idle[1].action: Freeze cannot follow Freeze"),
        ([{"afterSeconds": 1, "action": "Freeze"}] * 4, "idle: at most 3 steps"),
        ([{"afterSeconds": 20, "action": "Freeze"}, 7], "idle[1]: expected {afterSeconds"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_idle_policy(value)
    assert message in str(error.value)


def test_the_reason_in_the_history() -> None:
    assert idle_reason(300.4) == "idle for 300 s"


def test_pressure_opt_in() -> None:
    assert parse_pressure_policy(None) == PressurePolicy(enabled=False)
    assert parse_pressure_policy(False) == PressurePolicy(enabled=False)
    assert parse_pressure_policy(True) == PressurePolicy(enabled=True, action=SUSPEND, minimum_run_seconds=0)
    got = parse_pressure_policy({"action": "Pause", "minimumRunSeconds": 60})
    assert got == PressurePolicy(enabled=True, action=PAUSE, minimum_run_seconds=60)
    assert got.document() == {"action": "Pause", "minimumRunSeconds": 60}
    assert parse_pressure_policy(got.document()) == got
    assert PressurePolicy(enabled=True).document() is True
    assert PressurePolicy().document() is False


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yes", "suspendUnderPressure: expected true, false or {action: Suspend|Pause"),
        ({"action": "Freeze"}, "suspendUnderPressure.action: must be Suspend or Pause, got 'Freeze'"),
        ({"minimumRunSeconds": -5}, "suspendUnderPressure.minimumRunSeconds: must be a number of seconds >= 0"),
        ({"after": 5}, "suspendUnderPressure: unknown field 'after'"),
    ],
)
def test_a_bad_pressure_opt_in_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_pressure_policy(value)
    assert message in str(error.value)


def test_the_next_step_by_resting_state() -> None:
    policy = parse_idle_policy([{"afterSeconds": 20, "action": "Freeze"}, {"afterSeconds": 600, "action": "Pause"}])
    assert policy.next_step_in("RUNNING") == IdleStep(20, FREEZE)
    assert policy.next_step_in("FROZEN") == IdleStep(600, PAUSE)
    assert policy.next_step_in("PAUSED") is None  # no Suspend step: a paused actor stays paused
    assert policy.next_step_in("SUSPENDED") is None and policy.next_step_in("RESUMING") is None
