"""`--idle AFTER_SECONDS:ACTION` as `ate create actor` and `ate set actor` take it: the policy the
API gets, and the refusal that names the step, before anything is sent."""

import pytest
import typer

from ate.cli.idle import parse_idle_option


def test_steps_become_the_api_policy() -> None:
    assert parse_idle_option(["20:Freeze", "600:Suspend"]) == [
        {"afterSeconds": 20, "action": "Freeze"},
        {"afterSeconds": 600, "action": "Suspend"},
    ]
    assert parse_idle_option(["1.5s:Pause"]) == [{"afterSeconds": 1.5, "action": "Pause"}]
    assert parse_idle_option(["off"]) == []
    assert parse_idle_option(None) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["Suspend"], "'Suspend' is not AFTER_SECONDS:ACTION"),
        (["soon:Suspend"], "'soon:Suspend' is not AFTER_SECONDS:ACTION"),
        (["600:Suspend", "20:Freeze"], "idle[1].afterSeconds: steps must be in increasing time"),
        (["20:Stop"], "idle[0].action: must be one of Freeze, Pause, Suspend, got 'Stop'"),
        (["-3:Suspend"], "idle[0].afterSeconds: must be a number of seconds > 0"),
    ],
)
def test_a_bad_step_is_refused_naming_it(values: list[str], message: str) -> None:
    with pytest.raises(typer.BadParameter) as error:
        parse_idle_option(values)
    assert message in str(error.value)
