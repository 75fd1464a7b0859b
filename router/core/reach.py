"""How a request reaches its actor's worker, shared by the HTTP and WebSocket paths: the RUNNING
cache or a parked resume, inside a drain flight (router.core.drain), with one fresh look-up when a
cached address refuses connections.

`reach_actor` is the loop; `wait_unless_gone` is the parked wait that a client's leaving ends at
once (its place in the parking lot freed) while the resume it started goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from domain.refs import ActorRef
from router.core.cache import ActorCache
from router.core.drain import DrainGate, Flight
from router.core.errors import RouteError
from router.core.upstream import Upstream

log = logging.getLogger(__name__)

T = TypeVar("T")


async def wait_unless_gone(
    waiting: Coroutine[Any, Any, T], leaving: Coroutine[Any, Any, object], gone: Callable[[], BaseException]
) -> T:
    """Run `waiting` (a wait for the actor to be RUNNING, or for the worker's answer) against
    `leaving` (returns when the client left); the first to end cancels the other.

    Returns:
        `waiting`'s result.

    Raises:
        What `waiting` raises (RouteError...), or `gone()` when the client left first.
    """
    waiter = asyncio.create_task(waiting)
    watcher = asyncio.create_task(leaving)
    try:
        await asyncio.wait({waiter, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, watcher):
            if not task.done():
                task.cancel()
        await asyncio.wait({waiter, watcher})
    if waiter.cancelled():  # the client left first
        raise gone()
    return waiter.result()


async def reach_actor(
    target: ActorRef,
    *,
    cache: ActorCache,
    drains: DrainGate,
    park: Callable[[], Awaitable[Upstream]],
    connect: Callable[[Upstream, Flight, bool], Awaitable[T]],
    refused: type[Exception],
    unreachable: Callable[[ActorRef, Upstream], RouteError],
    no_lease: Callable[[ActorRef], RouteError],
) -> T:
    """Find the actor's worker and `connect` to it inside a drain flight.

    The address comes from the cache, else from `park` (a resume); it is used only if no drain
    of the actor happened since it was looked up (else it is looked up again). A cached address
    whose worker refuses the connection (`refused` raised by `connect`) is dropped and looked up
    once more; a freshly resumed one that refuses is `unreachable`.

    Args:
        connect: (upstream, flight, parked) -> the path's connection; on success the flight is
            the caller's to `drains.leave` when the exchange ends; on failure it is left here.

    Raises:
        RouteError: from `park`, `unreachable`, or `no_lease` when this replica has no lease.
        Whatever `connect` raises other than `refused`.
    """
    key = target.key
    token = drains.token()
    upstream = cache.get(key)
    cached = upstream is not None
    parked = False
    while True:
        if upstream is None:
            token = drains.token()
            upstream = await park()
            parked = True
        flight = drains.enter(key, token, upstream)
        if flight is None:  # drained since it was looked up, or no lease: look it up again
            if not drains.leased():
                raise no_lease(target)
            upstream, cached = None, False
            continue
        try:
            return await connect(upstream, flight, parked)
        except refused as exc:
            drains.leave(flight)
            if not cached:
                raise unreachable(target, upstream) from exc
            log.info("cached actor %s unreachable at %s: resuming again", target, upstream)
        except BaseException:
            drains.leave(flight)
            raise
        cache.drop(key)
        upstream, cached = None, False
