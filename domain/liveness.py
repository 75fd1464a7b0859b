"""How the control plane tells a silent node from a dead one (ARCHITECTURE.md, "Actor states"):
the atelet's heartbeat interval, the node lease and the grace of an UNREACHABLE actor, with the
defaults every process shares.

- Every `HEARTBEAT_SECONDS` an atelet sends `PUT /v1/nodes/{node}` (atelet `--heartbeat-seconds`).
- A node without a heartbeat for `NODE_LEASE_SECONDS` is lost (api-server `--node-lease-seconds`):
  its workers are UNAVAILABLE (out of placement) and its RUNNING actors UNREACHABLE. The
  api-server checks every `LIVENESS_CHECK_SECONDS`, so a silent node is out of placement within
  lease + check = 4.5 s of its last heartbeat.
- An UNREACHABLE actor waits `UNREACHABLE_GRACE_SECONDS` for its node (api-server
  `--unreachable-grace-seconds`): a node that answers again within it and still runs the sandbox
  gets the actor back RUNNING, memory intact; past it the actor is CRASHED.
"""

from __future__ import annotations

HEARTBEAT_SECONDS = 1.0
"""Default interval of an atelet's heartbeats, in seconds."""

NODE_LEASE_SECONDS = 4.0
"""Default lease of a node, in seconds: silent this long, it is lost (four missed heartbeats)."""

LIVENESS_CHECK_SECONDS = 0.5
"""How often the api-server looks for silent nodes and expired graces, in seconds."""

UNREACHABLE_GRACE_SECONDS = 60.0
"""Default grace of an UNREACHABLE actor, in seconds: how long its node may stay silent before
the actor is CRASHED."""

NODE_LOST = "NodeLost"
"""The `operation` of the history record (`ate describe actor`) of the time an actor spent
UNREACHABLE: outcome `waiting` while it lasts, then `returned`, `crashed` or `reverted`."""


def unreachable_message(actor: str, node: str, silent_seconds: float, remaining_seconds: float) -> str:
    """What a caller is told about an UNREACHABLE actor (the router's 503, a refused operation).

    Args:
        actor: `<atespace>/<name>`.
        node: the node that stopped answering.
        silent_seconds: seconds since its last heartbeat.
        remaining_seconds: seconds of the grace left (<= 0: it is about to be CRASHED).

    Returns:
        e.g. `actor demo/c1 is UNREACHABLE: node n1 stopped answering 12 s ago; waiting up to
        48 s more for it to return (then the actor is CRASHED)`.
    """
    said = f"actor {actor} is UNREACHABLE: node {node} stopped answering {silent_seconds:.0f} s ago"
    if remaining_seconds <= 0:
        return f"{said}; its grace has run out and it is being marked CRASHED"
    return f"{said}; waiting up to {remaining_seconds:.0f} s more for it to return (then the actor is CRASHED)"


def unreachable_refusal(actor: str, participle: str, node: str, silent_seconds: float, remaining_seconds: float) -> str:
    """Why an operation that needs the actor's node (suspend, pause) is refused while the actor
    is UNREACHABLE, and the two ways out.

    Args:
        actor: `<atespace>/<name>`.
        participle: the operation's, e.g. `suspended`.
        node, silent_seconds, remaining_seconds: as in `unreachable_message`.

    Returns:
        e.g. `actor demo/c1 cannot be suspended while UNREACHABLE: node n1 stopped answering 12 s
        ago; wait for it to return (within 48 s the actor is RUNNING again, its memory intact;
        after that it is CRASHED) or go back to its last completed snapshot with 'ate revert
        actor c1 -a demo'`.
    """
    atespace, _, name = actor.partition("/")
    return (
        f"actor {actor} cannot be {participle} while UNREACHABLE: node {node} stopped answering "
        f"{silent_seconds:.0f} s ago; wait for it to return (within {max(remaining_seconds, 0):.0f} s the actor "
        "is RUNNING again, its memory intact; after that it is CRASHED) or go back to its last completed "
        f"snapshot with 'ate revert actor {name} -a {atespace}'"
    )
