"""The actor state table of ARCHITECTURE.md ("Actor states"), as domain.states holds it."""

from __future__ import annotations

from domain.states import TRANSITIONS, ActorState, Operation


def test_each_operation_starts_from_the_states_of_the_architecture() -> None:
    starts = {op: {s.value for s in t.sources} for op, t in TRANSITIONS.items()}
    assert starts[Operation.RESUME] == {"SUSPENDED", "PAUSED"}
    assert starts[Operation.SUSPEND] == {"RUNNING", "PAUSED"}
    assert starts[Operation.PAUSE] == {"RUNNING"}
    # RUNNING|PAUSED|CRASHED|stuck transitional --Revert-->; a revert that died is taken over
    assert starts[Operation.REVERT] == {"RUNNING", "PAUSED", "CRASHED", "RESUMING", "SUSPENDING", "PAUSING", "REVERTING"}
    ends = {op: (t.via.value, t.target.value) for op, t in TRANSITIONS.items()}
    assert ends == {
        Operation.RESUME: ("RESUMING", "RUNNING"),
        Operation.SUSPEND: ("SUSPENDING", "SUSPENDED"),
        Operation.PAUSE: ("PAUSING", "PAUSED"),
        Operation.REVERT: ("REVERTING", "SUSPENDED"),
    }


def test_a_refusal_names_the_state_found_and_the_states_wanted() -> None:
    resume = TRANSITIONS[Operation.RESUME]
    assert not resume.allows(ActorState.SUSPENDING)
    assert resume.refusal("demo/c1", "SUSPENDING") == (
        "actor demo/c1 cannot be resumed from state SUSPENDING (ResumeActor wants SUSPENDED or PAUSED)"
    )
    assert TRANSITIONS[Operation.PAUSE].refusal("demo/c1", "PAUSING") == (
        "actor demo/c1 cannot be paused from state PAUSING (PauseActor wants RUNNING)"
    )
