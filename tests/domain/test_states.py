"""The actor state table of ARCHITECTURE.md ("Actor states"), as domain.states holds it."""

from __future__ import annotations

from domain.states import TRANSITIONS, ActorState, Operation


def test_each_operation_starts_from_the_states_of_the_architecture() -> None:
    starts = {op: {s.value for s in t.sources} for op, t in TRANSITIONS.items()}
    assert starts[Operation.RESUME] == {"SUSPENDED", "PAUSED", "FROZEN"}  # FROZEN --request--> RUNNING (a thaw)
    assert starts[Operation.SUSPEND] == {"RUNNING", "PAUSED", "FROZEN"}
    assert starts[Operation.PAUSE] == {"RUNNING", "FROZEN"}
    assert starts[Operation.FREEZE] == {"RUNNING"}
    # RUNNING|PAUSED|CRASHED|UNREACHABLE|stuck transitional --Revert-->; a revert that died is taken over
    assert starts[Operation.REVERT] == {
        "RUNNING", "FROZEN", "UNREACHABLE", "PAUSED", "CRASHED", "RESUMING", "SUSPENDING", "PAUSING", "REVERTING",
    }  # fmt: skip
    ends = {op: (t.via.value, t.target.value) for op, t in TRANSITIONS.items()}
    assert ends == {
        Operation.RESUME: ("RESUMING", "RUNNING"),
        Operation.SUSPEND: ("SUSPENDING", "SUSPENDED"),
        Operation.PAUSE: ("PAUSING", "PAUSED"),
        Operation.REVERT: ("REVERTING", "SUSPENDED"),
        Operation.FREEZE: ("FROZEN", "FROZEN"),  # no transitional state: FROZEN is written first
    }


def test_a_refusal_names_the_state_found_and_the_states_wanted() -> None:
    resume = TRANSITIONS[Operation.RESUME]
    assert not resume.allows(ActorState.SUSPENDING)
    assert resume.refusal("demo/c1", "SUSPENDING") == (
        "actor demo/c1 cannot be resumed from state SUSPENDING (ResumeActor wants SUSPENDED, FROZEN or PAUSED)"
    )
    assert TRANSITIONS[Operation.PAUSE].refusal("demo/c1", "PAUSING") == (
        "actor demo/c1 cannot be paused from state PAUSING (PauseActor wants RUNNING or FROZEN)"
    )


def test_an_unreachable_actor_is_refused_with_the_ways_out() -> None:
    # ARCHITECTURE.md: UNREACHABLE --node back--> RUNNING, --Revert--> REVERTING; nothing else starts from it
    assert [op for op, t in TRANSITIONS.items() if t.allows(ActorState.UNREACHABLE)] == [Operation.REVERT]
    assert TRANSITIONS[Operation.SUSPEND].refusal("demo/c1", "UNREACHABLE") == (
        "actor demo/c1 cannot be suspended from state UNREACHABLE (SuspendActor wants RUNNING, FROZEN or PAUSED); "
        "its node stopped answering: wait for the node to return (the actor is RUNNING again, its memory intact) "
        "or go back to its last completed snapshot with 'ate revert actor c1 -a demo'"
    )
