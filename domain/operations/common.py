"""Inputs shared by several workflows' activities."""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import ActorRef


@dataclass
class ActorOperation:
    """An actor and the operation (workflow run) acting on it."""

    actor: ActorRef
    operation_id: str


@dataclass
class FinishInput:
    """Input of the finalize/rollback activities: which operation's state to settle."""

    actor: ActorRef
    operation_id: str
    error: str | None = None
