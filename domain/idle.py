"""Idle policies and pressure: what happens to an actor that gets no traffic, and which actors ate
may move off their worker to make room (ARCHITECTURE.md, "Actors on their own").

An idle policy is a list of steps in increasing time, each an action taken once the actor has been
idle (no request in flight and no byte moved through any router replica) for `after_seconds`:

    idle: {afterSeconds: 300, action: Suspend}
    idle: [{afterSeconds: 20, action: Freeze}, {afterSeconds: 600, action: Suspend}]

`Freeze` stops the sandbox in place (it keeps its worker and memory and thaws in milliseconds);
`Pause` checkpoints it to its node and frees the worker (it comes back on that node); `Suspend`
stores its snapshot in the template's storage location (from RUNNING or FROZEN a checkpoint that
frees the worker; from PAUSED the upload of the node's snapshot, which unpins it). Actions come in
that order, each at most once, so `[Freeze, Pause, Suspend]` takes an actor down one tier at a
time. Idle time counts from the last traffic, whatever the steps between. The policy starts again
at the actor's next resume. Off when absent; an actor may override its template's policy (an
empty list: off for that actor).

A template opts its actors into pressure suspends with `suspendUnderPressure: true`, or
`suspendUnderPressure: {action: Pause, minimumRunSeconds: 60}`: when a resume finds no room, ate
suspends (or pauses) such actors, frozen ones first, then the longest idle, never one with a
request in flight nor one that has run for less than `minimumRunSeconds`.

Peers: E2B pauses on a timeout and resumes on traffic, Fly suspends machines its proxy finds idle,
Daytona auto-stops after 15 minutes; the reference system leaves it to "the layer above"
(REFERENCE.md). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from domain.names import shown

MAX_IDLE_STEPS = 3
"""At most one step per action, in the order Freeze, Pause, Suspend."""

IDLE_CHECK_SECONDS = 1.0
"""How often the api-server looks for idle actors, in seconds: with the router replicas'
heartbeat (2 s), which reports their traffic, the resolution of `afterSeconds`."""

MAX_AFTER_SECONDS = 366 * 24 * 3600
"""The longest idle time a step may wait for (a year and a day)."""


class IdleAction(StrEnum):
    """What an idle step (or a pressure suspend) does to the actor."""

    FREEZE = "Freeze"
    PAUSE = "Pause"
    SUSPEND = "Suspend"

    @property
    def rank(self) -> int:
        """The action's place in a policy: Freeze 0, Pause 1, Suspend 2 (each step goes further)."""
        return _RANKS[self]


class PolicyError(ValueError):
    """A policy field is wrong: `field` names it in the document (e.g. `idle`), `path` where below
    it (`[1].afterSeconds`, `action`, or empty), `problem` what is wrong and what is allowed."""

    def __init__(self, field: str, path: str, problem: str) -> None:
        self.field = field
        self.path = path
        self.problem = problem
        below = path if not path or path.startswith("[") else "." + path
        super().__init__(f"{field}{below}: {problem}")


_DONE_IN: dict[str, IdleAction | None] = {"RUNNING": None, "FROZEN": IdleAction.FREEZE, "PAUSED": IdleAction.PAUSE}
"""The resting states an idle policy acts on (ActorState values), and how far down the tiers each is."""

_RANKS = {IdleAction.FREEZE: 0, IdleAction.PAUSE: 1, IdleAction.SUSPEND: 2}
_ACTIONS = ", ".join(a.value for a in IdleAction)


@dataclass(frozen=True)
class IdleStep:
    """One step: `action` once the actor has been idle for `after_seconds` (seconds, > 0)."""

    after_seconds: float
    action: IdleAction

    def document(self) -> dict[str, Any]:
        """`{afterSeconds, action}` as the template is written (whole seconds as integers)."""
        after: float | int = int(self.after_seconds) if self.after_seconds.is_integer() else self.after_seconds
        return {"afterSeconds": after, "action": self.action.value}


@dataclass(frozen=True)
class IdlePolicy:
    """The steps of an idle policy, in increasing `after_seconds`; no steps: off."""

    steps: tuple[IdleStep, ...] = ()

    @property
    def off(self) -> bool:
        """True when the policy has no step."""
        return not self.steps

    def next_step(self, done: IdleAction | None) -> IdleStep | None:
        """The step due next.

        Args:
            done: how far the actor already went: None for a RUNNING actor, FREEZE for a FROZEN
                one, PAUSE for a PAUSED one.

        Returns:
            The first step beyond `done`, or None when nothing is left to do.
        """
        for step in self.steps:
            if done is None or step.action.rank > done.rank:
                return step
        return None

    def next_step_in(self, state: str) -> IdleStep | None:
        """The step due next for an actor resting in `state` (an ActorState value): a RUNNING
        one's first, a FROZEN one's first beyond Freeze, a PAUSED one's Suspend (the only action
        beyond Pause); None in any other state, or when nothing is left to do."""
        if state not in _DONE_IN:
            return None
        return self.next_step(_DONE_IN[state])

    def document(self) -> list[dict[str, Any]]:
        """The policy as a list of `{afterSeconds, action}` (empty when off)."""
        return [step.document() for step in self.steps]


def parse_idle_policy(value: Any, field: str = "idle") -> IdlePolicy:
    """Read an idle policy as a user writes it.

    Args:
        value: None (off), one step `{afterSeconds, action}`, or a list of steps in increasing
            time; `afterSeconds` a number of seconds > 0 (at most a year), `action` one of Freeze,
            Pause, Suspend, in that order, each at most once.
        field: the field's name in the document, for error messages (e.g. `idle`).

    Returns:
        The policy (off for None or an empty list).

    Raises:
        PolicyError: a ValueError naming the field (e.g. `idle[1].afterSeconds`) and the allowed values.
    """
    if value is None:
        return IdlePolicy()
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise PolicyError(field, "", f"expected a step {{afterSeconds, action}} or a list of steps, got {shown(value)}")
    if len(items) > MAX_IDLE_STEPS:
        raise PolicyError(field, "", f"at most {MAX_IDLE_STEPS} steps (one per action), got {len(items)}")
    steps: list[IdleStep] = []
    for index, item in enumerate(items):
        steps.append(_step(item, field, f"[{index}]" if isinstance(value, list) else ""))
    for index in range(1, len(steps)):
        before, step = steps[index - 1], steps[index]
        if step.after_seconds <= before.after_seconds:
            raise PolicyError(
                field, f"[{index}].afterSeconds",
                f"steps must be in increasing time, got {_seconds(step.after_seconds)} after "
                f"{_seconds(before.after_seconds)}",
            )  # fmt: skip
        if step.action.rank <= before.action.rank:
            raise PolicyError(
                field, f"[{index}].action",
                f"{step.action.value} cannot follow {before.action.value}: actions come in the order {_ACTIONS}, "
                "each at most once",
            )  # fmt: skip
    return IdlePolicy(tuple(steps))


def _below(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _step(item: Any, field: str, where: str) -> IdleStep:
    if not isinstance(item, dict):
        raise PolicyError(field, where, f"expected {{afterSeconds: <seconds>, action: {_ACTIONS}}}, got {shown(item)}")
    unknown = sorted(set(item) - {"afterSeconds", "action"})
    if unknown:
        raise PolicyError(field, where, f"unknown field {unknown[0]!r} (allowed: afterSeconds, action)")
    if "afterSeconds" not in item:
        raise PolicyError(field, _below(where, "afterSeconds"), "required (seconds of idleness before the action, > 0)")
    if "action" not in item:
        raise PolicyError(field, _below(where, "action"), f"required, one of {_ACTIONS}")
    after = item["afterSeconds"]
    if not _is_seconds(after) or not 0 < after <= MAX_AFTER_SECONDS:
        raise PolicyError(
            field, _below(where, "afterSeconds"),
            f"must be a number of seconds > 0 and at most {MAX_AFTER_SECONDS}, got {shown(after)}",
        )  # fmt: skip
    action = item["action"]
    if action not in tuple(a.value for a in IdleAction):
        raise PolicyError(field, _below(where, "action"), f"must be one of {_ACTIONS}, got {shown(action)}")
    return IdleStep(float(after), IdleAction(action))


def _is_seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _seconds(value: float) -> str:
    return f"{int(value)} s" if value.is_integer() else f"{value} s"


def idle_reason(idle_seconds: float) -> str:
    """The reason an idle action carries in its history and the Temporal UI, e.g. `idle for 300 s`."""
    return f"idle for {round(idle_seconds)} s"


@dataclass(frozen=True)
class PressurePolicy:
    """Whether ate may move a template's actors off their worker to make room for a parked resume.

    Attributes:
        enabled: the template opted in (`suspendUnderPressure`).
        action: Suspend (default) or Pause.
        minimum_run_seconds: an actor that has been RUNNING for less is not chosen (seconds, >= 0).
    """

    enabled: bool = False
    action: IdleAction = IdleAction.SUSPEND
    minimum_run_seconds: float = 0.0

    def document(self) -> bool | dict[str, Any]:
        """`false`, `true`, or `{action, minimumRunSeconds}` when either differs from the default."""
        if not self.enabled:
            return False
        if self.action is IdleAction.SUSPEND and self.minimum_run_seconds == 0:
            return True
        run: float | int = (
            int(self.minimum_run_seconds) if self.minimum_run_seconds.is_integer() else self.minimum_run_seconds
        )
        return {"action": self.action.value, "minimumRunSeconds": run}


def parse_pressure_policy(value: Any, field: str = "suspendUnderPressure") -> PressurePolicy:
    """Read `suspendUnderPressure` as a user writes it.

    Args:
        value: None or false (off), true, or `{action: Suspend|Pause, minimumRunSeconds: <seconds >= 0>}`
            (present means on).
        field: the field's name, for error messages.

    Raises:
        PolicyError: a ValueError naming the field and the allowed values.
    """
    if value is None or value is False:
        return PressurePolicy()
    if value is True:
        return PressurePolicy(enabled=True)
    if not isinstance(value, dict):
        raise PolicyError(
            field, "", f"expected true, false or {{action: Suspend|Pause, minimumRunSeconds: <seconds>}}, got {shown(value)}"
        )
    unknown = sorted(set(value) - {"action", "minimumRunSeconds"})
    if unknown:
        raise PolicyError(field, "", f"unknown field {unknown[0]!r} (allowed: action, minimumRunSeconds)")
    action = value.get("action", IdleAction.SUSPEND.value)
    if action not in (IdleAction.SUSPEND.value, IdleAction.PAUSE.value):
        raise PolicyError(field, "action", f"must be Suspend or Pause, got {shown(action)}")
    run = value.get("minimumRunSeconds", 0)
    if not _is_seconds(run) or not 0 <= run <= MAX_AFTER_SECONDS:
        raise PolicyError(
            field, "minimumRunSeconds", f"must be a number of seconds >= 0 and at most {MAX_AFTER_SECONDS}, got {shown(run)}"
        )
    return PressurePolicy(enabled=True, action=IdleAction(action), minimum_run_seconds=float(run))
