"""The pressure step of ResumeActor: the actors whose move would make room for a resume that found
none (`store.pressure`), and the input of the activity that lists them."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef

MAX_PRESSURE_MOVES = 3
"""How many actors one resume may try to move before it gives up (a move that gives way to a
request in flight, or fails, counts)."""

ROOM_SIGNAL = "room"
"""The signal a pressure move sends to the waiting resume it emptied a worker for (`PressureVictims.room_for`)."""

WAITER_LIVE_SECONDS = 3.0
"""A resume waiting for room that has not tried again for this long counts as gone (its callers
gave up): no worker is kept for it, and its place in the queue is lost."""

RESERVATION_SECONDS = 15.0
"""How long the worker a pressure move empties is kept for the resume that made the move (other
placements pass it by, other moves leave its actor alone): long enough for the victim's suspend
and the resume's next placement under load, short enough that a resume that never comes back
(its request gone) does not keep an empty worker from the others for long."""


@dataclass
class PressureInput:
    """Input of pressure_victims: the actor a resume found no room for, and the actors it already
    tried to move (not offered again). With `operation_id` (the resume's run), the resume joins
    the room queue and the worker the move empties is kept for the oldest waiter it would take;
    without (runs recorded before the queue), for the resume itself."""

    actor: ActorRef
    tried: list[ActorRef] = field(default_factory=list)
    operation_id: str = ""


@dataclass
class PressureVictimRef:
    """One actor that may be moved: how (`Suspend` or `Pause`) and the pool of the worker it frees."""

    actor: ActorRef
    action: str
    pool: str


@dataclass
class PressureVictims:
    """The actor to move, its worker kept (`RESERVATION_SECONDS`) for the resume that asked or,
    when `room_for` names one, for an older waiting resume (run `room_for_operation`, told by
    `ROOM_SIGNAL`); empty when none may be moved. (A list: runs recorded before the queue received
    several, best first, and moved the first.)"""

    victims: list[PressureVictimRef] = field(default_factory=list)
    room_for: ActorRef | None = None
    room_for_operation: str = ""


@dataclass
class ReleaseRoomInput:
    """Input of release_room: the actors whose moves gave way or failed (their workers are kept
    for nobody again)."""

    victims: list[ActorRef] = field(default_factory=list)


@dataclass
class LeaveRoomQueueInput:
    """Input of leave_room_queue: the actor whose resume stopped waiting for room."""

    actor: ActorRef
