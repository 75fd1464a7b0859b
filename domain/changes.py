"""The PostgreSQL NOTIFY channels of ate and the shape of their payloads, in one place.

The store's triggers and queries send them (store/migrations, store/queries.sql); the api-server,
the router and the store's worker view LISTEN (through `store.listen`). Each payload is plain
text, because a NOTIFY carries at most 8000 bytes and is read by SQL triggers as well as Python:

- `ate_actor_changes`: `<atespace>/<name> <STATE>` at the commit of every change of an actor
  row (`DELETED` when the row goes);
- `ate_router_drains`: `<drain id> <atespace>/<name>` when an operation asks the router replicas
  to drain an actor's traffic before its checkpoint; `<drain id>:idle <atespace>/<name>` for an
  idle action's drain, which a replica with a request in flight for the actor refuses (busy).
  The flag rides on the first word so that a replica from before it finds the payload
  unparsable and ignores it: it then gets the drain from its next heartbeat and carries it out
  as an ordinary drain, never as a drain of an actor named `c1 idle`;
- `ate_worker_changes`: a worker id, `place <worker id> <holder>`, `node <name>` or
  `sync <token>` (the worker view's own barrier), read only by `store.worker_view`.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import ActorRef

ACTOR_CHANGES_CHANNEL = "ate_actor_changes"
"""Actor rows: payload `<atespace>/<name> <STATE>` (see `parse_actor_change`)."""

ROUTER_DRAINS_CHANNEL = "ate_router_drains"
"""Drain requests to the router replicas: payload `<drain id>[:idle] <atespace>/<name>`."""

IF_IDLE_SUFFIX = ":idle"
"""The mark of an if-idle drain on its id in an `ate_router_drains` payload."""

WORKER_CHANGES_CHANNEL = "ate_worker_changes"
"""Workers, their places and nodes (read by `store.worker_view` only)."""

DELETED = "DELETED"
"""The state word of an `ate_actor_changes` payload whose row was deleted."""


@dataclass(frozen=True)
class ActorChange:
    """One `ate_actor_changes` notification: the actor and its committed state word (an
    `ActorState` value, or `DELETED`)."""

    actor: ActorRef
    state: str


def parse_actor_change(payload: str) -> ActorChange | None:
    """Read an `ate_actor_changes` payload.

    Args:
        payload: `<atespace>/<name> <STATE>`; surrounding blanks are ignored.

    Returns:
        The change, or None when the payload names no actor (a reader then forgets everything it
        cached, since it cannot know what changed).
    """
    key, _, state = payload.strip().partition(" ")
    atespace, slash, name = key.partition("/")
    if not slash or not atespace or not name:
        return None
    return ActorChange(ActorRef(atespace, name), state)


@dataclass(frozen=True)
class DrainNotice:
    """One `ate_router_drains` notification: the drain, its actor, and whether it is an idle
    action's (`if_idle`: a replica busy with the actor refuses it instead of draining)."""

    drain_id: int
    actor: ActorRef
    if_idle: bool = False


def format_drain(drain_id: int, actor: ActorRef, if_idle: bool = False) -> str:
    """The `ate_router_drains` payload for drain `drain_id` of `actor` (`<id>:idle ...` if idle)."""
    return f"{drain_id}{IF_IDLE_SUFFIX if if_idle else ''} {actor.key}"


def parse_drain_notice(payload: str) -> DrainNotice | None:
    """Read an `ate_router_drains` payload `<drain id>[:idle] <atespace>/<name>`.

    Returns:
        The notice, or None when the payload is not of that shape.
    """
    first, _, key = payload.strip().partition(" ")
    drain_id = first.removesuffix(IF_IDLE_SUFFIX)
    atespace, slash, name = key.partition("/")
    if not drain_id.isdigit() or not slash or not atespace or not name or " " in name:
        return None
    return DrainNotice(int(drain_id), ActorRef(atespace, name), drain_id != first)


def parse_drain(payload: str) -> tuple[int, ActorRef] | None:
    """Read an `ate_router_drains` payload (`parse_drain_notice` without the idle mark).

    Returns:
        (drain id, actor), or None when the payload is not of that shape.
    """
    notice = parse_drain_notice(payload)
    return None if notice is None else (notice.drain_id, notice.actor)
