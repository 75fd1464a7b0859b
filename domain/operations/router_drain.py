"""The drain of an actor's traffic on every router replica before its checkpoint: the input and
result of the `drain_routers` step of SuspendActor and PauseActor.

Before the atelet checkpoints a RUNNING actor, every live router replica is told to drain it:
it stops sending new requests to the actor's worker (they wait, as when parked, and are served
after the resume), lets its requests in flight finish within its `--drain-timeout`, closes the
connections still open, and acknowledges. A replica silent past its lease is not waited for (it
stops using its cache on its own once its lease runs out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.refs import ActorRef

ROUTER_LEASE_SECONDS = 10.0
"""How long a router replica counts as live after its last heartbeat (it sends one every
`ROUTER_HEARTBEAT_SECONDS`); a replica whose lease ran out is not waited for, and uses no cache
until it has a lease again."""

ROUTER_HEARTBEAT_SECONDS = 2.0
"""How often a router replica sends its heartbeat."""

DRAIN_ACK_MARGIN_SECONDS = 5.0
"""What the step waits beyond the longest `--drain-timeout` of the live replicas for their
acknowledgements (the cut of what is left and the acknowledgement's own round trip)."""

MAX_DRAIN_WAIT_SECONDS = 300.0
"""The step never waits longer than this, whatever the replicas' drain timeouts."""

MAX_ACTIVE_PER_HEARTBEAT = 2000
"""At most this many actor keys in one heartbeat's `active` list (a replica with more sends the
rest in extra heartbeat calls right after, so every key is reported within the same beat). Each
key is at most 127 characters: a full list is about 260 KB of JSON, under the API's 1 MiB body
limit (`api.limits.DEFAULT_MAX_REQUEST_BYTES`)."""


@dataclass
class RouterDrainInput:
    """Input of `drain_routers`: the actor, about to be checkpointed by operation `operation_id`
    (or to leave its worker, for a revert); `max_wait_seconds` bounds the wait for the replicas'
    acknowledgements below the usual bound (None: the usual one). `if_idle`: an idle action's
    (or a pressure suspend's) drain, which must not cut a request: a replica with a request in
    flight for the actor acknowledges it `busy` at once, draining nothing (False in runs
    recorded before the field, which replay unchanged)."""

    actor: ActorRef
    operation_id: str
    max_wait_seconds: float | None = None
    if_idle: bool = False
    """The operation is an idle action or a pressure suspend: a replica with a request in flight
    for the actor acknowledges at once as busy (nothing cut, nothing held) and the operation
    gives way."""


@dataclass
class RouterDrainResult:
    """What `drain_routers` saw: the drain's ID, the live replicas that acknowledged it, and
    those that did not within the bound (the checkpoint goes ahead without them). `busy`: for
    an `if_idle` drain, the replicas that refused it because a request of the actor was in
    flight there (among `acknowledged` too; the action is then abandoned: the request won).
    Empty for an ordinary drain and in results recorded before the field."""

    drain_id: int
    acknowledged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    waited_seconds: float = 0.0
    busy: list[str] = field(default_factory=list)
    """Replicas that had a request in flight for the actor when an `if_idle` drain reached them:
    the operation must give way (the actor keeps running)."""
