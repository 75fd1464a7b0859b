"""`wait_unless_gone`: a wait (for the actor to be RUNNING, or for a worker's answer) that the
client's leaving ends at once, freeing its place in the parking lot while the resume it started
goes on. Used by the core's parking (router.core.routing) and the Python data path's proxy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

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
