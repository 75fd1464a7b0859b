"""The local endpoint: what an actor can ask of ate from inside its sandbox (issue 27).

Every sandbox reaches `http://169.254.100.1` (`ADDRESS`, port `PORT`), answered by the atelet of
its node (`atelet.local_endpoint`), with no token: the atelet knows the caller from the network
it calls from (its worker's veth, and the worker's address as source), forwards the call to the
API server with the node's own credentials (`/v1/nodes/<node>/workers/<worker>/actors/...`), and
the API acts only when that worker holds that actor. The actor can:

- ask to be suspended or paused once `linger_seconds` have passed and its current answers are
  sent (`SelfSuspend`; the reference system's demo calls its own SuspendActor for this),
- set or clear its own idle policy (`domain.idle`),
- ask to be woken at a time or after a delay with `GET <path>` through the router (an `AskedWake`:
  a WakeActor workflow started with a delay, a durable Temporal timer that outlives the actor's
  suspend, restarts of the control plane and the loss of its node).

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from domain.names import check_label_name, shown
from domain.refs import ActorRef

ADDRESS = "169.254.100.1"
"""The link-local address every sandbox reaches its node's local endpoint at (redirected by the
atelet's rules to the worker's own gateway; nothing is routed to it)."""
PORT = 80
URL = f"http://{ADDRESS}"
"""What a sandbox's environment gets as `ATE_LOCAL_ENDPOINT`."""
ENVIRONMENT_VARIABLE = "ATE_LOCAL_ENDPOINT"

PROXY_PORT = 3128
"""The port of the node's egress proxy at `ADDRESS` (issue 28, `atelet.egress`): the sandbox's
`HTTP_PROXY` and `HTTPS_PROXY` point there, and the atelet's rules take it to the proxy of the
worker's own node, so an actor restored on another worker or node keeps a proxy that answers."""
PROXY_URL = f"http://{ADDRESS}:{PROXY_PORT}"

MAX_LINGER_SECONDS = 3600.0
MAX_WAKE_DELAY_SECONDS = 366 * 24 * 3600
MAX_WAKES_PER_ACTOR = 64
"""Pending wakes an actor may hold at once (each is a workflow in Temporal)."""
SELF_SUSPEND_REASON = "asked by the actor"
WAKE_REASON_PREFIX = "asked by the actor"


class LocalEndpointError(ValueError):
    """A request to the local endpoint is wrong: `field` names it, the message says what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def self_suspend_reason(linger_seconds: float) -> str:
    """The reason an actor's own suspend or pause carries in its history and the Temporal UI."""
    return SELF_SUSPEND_REASON + (f" (linger {linger_seconds:g} s)" if linger_seconds else "")


@dataclass(frozen=True)
class AskedWake:
    """A wake an actor asked for: `GET path` through the router at `at` (UTC).

    Attributes:
        actor: the actor woken.
        name: a DNS-1123 label, unique among the actor's pending wakes.
        at: when (UTC, aware).
        path: the request's path (and query), starting with `/`.
    """

    actor: ActorRef
    name: str
    at: datetime
    path: str = "/"

    @property
    def workflow_id(self) -> str:
        """The WakeActor workflow's ID: `asked-wake/<atespace>/<actor>/<name>`."""
        return f"{asked_wake_prefix(self.actor)}{self.name}"

    @property
    def reason(self) -> str:
        """The reason the wake's request carries: `asked by the actor (wake <name>)`."""
        return f"{WAKE_REASON_PREFIX} (wake {self.name})"


def asked_wake_prefix(actor: ActorRef) -> str:
    """The workflow ID prefix of every wake `actor` asked for."""
    return f"asked-wake/{actor.atespace}/{actor.name}/"


def check_wake(
    actor: ActorRef,
    name: object,
    *,
    path: object = "/",
    after_seconds: object = None,
    at: object = None,
    now: datetime,
) -> AskedWake:
    """Validates a wake: exactly one of `after_seconds` (seconds from `now`) and `at` (an ISO 8601
    time with a zone, later than `now`), at most MAX_WAKE_DELAY_SECONDS ahead.

    Raises:
        LocalEndpointError: naming the field (`name`, `path`, `after_seconds`, `at`) and what is allowed.
    """
    try:
        label = check_label_name(name, "wake name")
    except ValueError as error:
        raise LocalEndpointError("name", str(error)) from None
    if not isinstance(path, str) or not path.startswith("/") or any(c in path for c in "\r\n\0 ") or len(path) > 2048:
        raise LocalEndpointError(
            "path", f"{shown(path)} is not a request path: start with '/', no spaces, at most 2048"
        )
    if (after_seconds is None) == (at is None):
        raise LocalEndpointError("after_seconds", "give exactly one of after_seconds (a delay) and at (a time)")
    if after_seconds is not None:
        if (
            isinstance(after_seconds, bool)
            or not isinstance(after_seconds, int | float)
            or not 0 < after_seconds <= MAX_WAKE_DELAY_SECONDS
        ):
            raise LocalEndpointError(
                "after_seconds", f"{shown(after_seconds)} is not a number of seconds above 0 and at most "
                f"{MAX_WAKE_DELAY_SECONDS} (366 days)",
            )  # fmt: skip
        when = now + timedelta(seconds=float(after_seconds))
    else:
        when = _time(at)
        if when <= now:
            raise LocalEndpointError("at", f"{shown(at)} is not in the future (now is {now.isoformat()})")
        if when - now > timedelta(seconds=MAX_WAKE_DELAY_SECONDS):
            raise LocalEndpointError("at", f"{shown(at)} is more than 366 days ahead")
    return AskedWake(actor=actor, name=label, at=when.astimezone(UTC), path=path)


def _time(value: object) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    raise LocalEndpointError("at", f"{shown(value)} is not an ISO 8601 time with a zone, e.g. 2026-12-24T18:00:00Z")
