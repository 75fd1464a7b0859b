"""The pressure step of ResumeActor: the actors whose move would make room for a resume that found
none (`store.pressure`), and the input of the activity that lists them."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef

MAX_PRESSURE_MOVES = 3
"""How many actors one resume may try to move before it gives up (a move that gives way to a
request in flight, or fails, counts)."""


@dataclass
class PressureInput:
    """Input of pressure_victims: the actor a resume found no room for, and the actors it already
    tried to move (not offered again)."""

    actor: ActorRef
    tried: list[ActorRef] = field(default_factory=list)


@dataclass
class PressureVictimRef:
    """One actor that may be moved: how (`Suspend` or `Pause`) and the pool of the worker it frees."""

    actor: ActorRef
    action: str
    pool: str


@dataclass
class PressureVictims:
    """The actors that may be moved for the resume, best first (frozen, then the longest idle)."""

    victims: list[PressureVictimRef] = field(default_factory=list)
