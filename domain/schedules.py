"""Schedules: an actor woken at set times with an HTTP request (issue 27; ARCHITECTURE.md "schedule").

A schedule is a Temporal Schedule (visible in the Temporal UI, pausable there, surviving restarts)
whose action starts a `WakeActor` workflow: it sends `GET <path>` to the actor through the router,
which resumes the actor as for any request; the actor's idle policy then takes it down again.

It fires by a cron expression (five fields: minute, hour, day of month, month, day of week, in
`time_zone`) or every `every_seconds`. A time missed while the control plane was down follows the
schedule's `catchup`: `Skip` (missed times are dropped), `One` (one wake for all of them), `All`
(one wake per missed time, one after another), within `CATCHUP_WINDOW_SECONDS`.

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from domain.names import check_label_name, shown
from domain.refs import ActorRef

MIN_EVERY_SECONDS = 1
MAX_EVERY_SECONDS = 366 * 24 * 3600
CATCHUP_WINDOW_SECONDS = 365 * 24 * 3600
"""How far back missed times are caught up (`One`, `All`); `Skip` uses Temporal's shortest window."""

_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


class Catchup(StrEnum):
    """What a schedule does with times it missed while the control plane was down."""

    SKIP = "Skip"
    ONE = "One"
    ALL = "All"


class ScheduleError(ValueError):
    """A schedule field is wrong: `field` names it, the message says what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class ActorSchedule:
    """A schedule of one actor, validated (`check_schedule`).

    Attributes:
        actor: the actor it wakes.
        name: a DNS-1123 label, unique per actor.
        path: the request's path (and query), starting with `/`.
        cron: a five-field cron expression, or None.
        every_seconds: an interval in seconds, or None (exactly one of `cron` and `every_seconds`).
        time_zone: an IANA time zone name the cron expression is read in.
        catchup: what missed times become.
    """

    actor: ActorRef
    name: str
    path: str = "/"
    cron: str | None = None
    every_seconds: int | None = None
    time_zone: str = "UTC"
    catchup: Catchup = Catchup.SKIP

    @property
    def schedule_id(self) -> str:
        """The Temporal Schedule's ID: `schedule/<atespace>/<actor>/<name>`."""
        return f"{schedule_prefix(self.actor)}{self.name}"

    @property
    def workflow_id(self) -> str:
        """The ID of the WakeActor runs it starts (Temporal adds the time of each)."""
        return f"wake/{self.actor.atespace}/{self.actor.name}/{self.name}"


def schedule_prefix(actor: ActorRef) -> str:
    """The ID prefix of every schedule of `actor`."""
    return f"schedule/{actor.atespace}/{actor.name}/"


def check_schedule(
    actor: ActorRef,
    name: object,
    *,
    path: object = "/",
    cron: object = None,
    every_seconds: object = None,
    time_zone: object = "UTC",
    catchup: object = "Skip",
) -> ActorSchedule:
    """Validate a schedule as a user writes it.

    Raises:
        ScheduleError: naming the field (`name`, `cron`, `every_seconds`, `time_zone`, `path`,
            `catchup`) and the allowed values.
    """
    try:
        label = check_label_name(name, "schedule name")
    except ValueError as error:
        raise ScheduleError("name", str(error)) from None
    if (cron is None) == (every_seconds is None):
        raise ScheduleError("cron", "give exactly one of cron (e.g. '*/5 * * * *') and every_seconds")
    if cron is not None:
        if not isinstance(cron, str) or len(cron.split()) != 5 or not all(_CRON_FIELD.match(f) for f in cron.split()):
            raise ScheduleError(
                "cron", f"must be five fields (minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'; got {shown(cron)}"
            )
    if every_seconds is not None and (
        isinstance(every_seconds, bool)
        or not isinstance(every_seconds, int)
        or not MIN_EVERY_SECONDS <= every_seconds <= MAX_EVERY_SECONDS
    ):
        raise ScheduleError(
            "every_seconds", f"must be a whole number of seconds from {MIN_EVERY_SECONDS} to {MAX_EVERY_SECONDS}, got {shown(every_seconds)}"
        )
    if not isinstance(time_zone, str) or not _known_zone(time_zone):
        raise ScheduleError("time_zone", f"must be an IANA time zone such as 'UTC' or 'Europe/Paris', got {shown(time_zone)}")
    if not isinstance(path, str) or not path.startswith("/") or any(c.isspace() or not c.isprintable() for c in path):
        raise ScheduleError("path", f"must start with '/' and hold no spaces or control characters, got {shown(path)}")
    if catchup not in tuple(c.value for c in Catchup):
        raise ScheduleError("catchup", f"must be one of {', '.join(c.value for c in Catchup)}, got {shown(catchup)}")
    return ActorSchedule(
        actor=actor, name=label, path=path, cron=cron if isinstance(cron, str) else None,
        every_seconds=every_seconds if isinstance(every_seconds, int) else None, time_zone=time_zone,
        catchup=Catchup(catchup),
    )  # fmt: skip


def _known_zone(name: str) -> bool:
    if name == "UTC":
        return True
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


@dataclass
class WakeActorInput:
    """Input of the WakeActor workflow: the actor, the path of the request, and the schedule (or
    other reason) that asked for it, for the request's header and the history."""

    actor: ActorRef
    path: str = "/"
    reason: str = ""


@dataclass
class WakeActorResult:
    """What the wake's request got: the router's status code and the first bytes of its body."""

    status: int
    body: str = ""
