"""The PostgreSQL NOTIFY channels of ate and the shape of their payloads, in one place.

The store's triggers and queries send them (store/migrations, store/queries.sql); the api-server,
the router and the store's worker view LISTEN (through `store.listen`). Each payload is plain
text, because a NOTIFY carries at most 8000 bytes and is read by SQL triggers as well as Python:

- `ate_actor_changes`: `<atespace>/<name> <STATE>` at the commit of every change of an actor
  row (`DELETED` when the row goes);
- `ate_router_drains`: `<drain id> <atespace>/<name>` when an operation asks the router replicas
  to drain an actor's traffic before its checkpoint;
- `ate_worker_changes`: a worker id, `place <worker id> <holder>`, `node <name>` or
  `sync <token>` (the worker view's own barrier), read only by `store.worker_view`.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.refs import ActorRef

ACTOR_CHANGES_CHANNEL = "ate_actor_changes"
"""Actor rows: payload `<atespace>/<name> <STATE>` (see `parse_actor_change`)."""

ROUTER_DRAINS_CHANNEL = "ate_router_drains"
"""Drain requests to the router replicas: payload `<drain id> <atespace>/<name>`."""

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


def format_drain(drain_id: int, actor: ActorRef) -> str:
    """The `ate_router_drains` payload for drain `drain_id` of `actor`."""
    return f"{drain_id} {actor.key}"


def parse_drain(payload: str) -> tuple[int, ActorRef] | None:
    """Read an `ate_router_drains` payload `<drain id> <atespace>/<name>`.

    Returns:
        (drain id, actor), or None when the payload is not of that shape.
    """
    drain_id, _, key = payload.strip().partition(" ")
    atespace, slash, name = key.partition("/")
    if not drain_id.isdigit() or not slash or not atespace or not name:
        return None
    return int(drain_id), ActorRef(atespace, name)
