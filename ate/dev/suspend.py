"""Suspending every RUNNING actor when `ate dev` stops, so that its state survives a restart.

The stack calls `suspend_running_actors` after it stopped the router and while the atelet and
the api-server still run; the suspends go through the REST API (normal SuspendActor workflows),
8 at a time, within `SUSPEND_BUDGET` seconds in all.
"""

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from ate.cli.client import ApiClient, ApiError

SUSPEND_BUDGET = 30.0
"""Seconds `ate dev` spends suspending running actors when it stops."""


def suspend_running_actors(api_url: str, out: Callable[[str], None], token: str | None) -> bool:
    """Suspend every RUNNING actor through the API, within SUSPEND_BUDGET seconds.

    Args:
        api_url: The REST API's URL.
        token: The local admin's token.
        out: Prints one line per actor, and what could not be done.

    Returns:
        True when no actor is left RUNNING (every one suspended, or none was running); False
        when some could not be suspended or the actors could not be listed.
    """
    deadline = time.monotonic() + SUSPEND_BUDGET
    api = ApiClient(api_url, timeout=5, token=token)
    try:
        running = [a for a in api.list_actors() if a.get("state") == "RUNNING"]
    except ApiError as exc:
        out(f"ate: cannot list actors to suspend them: {exc.message}")
        api.close()
        return False
    if not running:
        api.close()
        return True
    out(f"ate: suspending {len(running)} running actor(s) so their state survives a restart")

    def suspend(actor: dict[str, Any]) -> tuple[bool, str]:
        ref = f"{actor.get('atespace')}/{actor.get('name')}"
        remaining = max(deadline - time.monotonic(), 1.0)
        try:
            api.suspend_actor(
                actor["atespace"], actor["name"], timeout_seconds=max(remaining - 2, 1.0), request_timeout=remaining
            )
        except ApiError as exc:
            return False, f"ate: could not suspend {ref}: {exc.message}"
        return True, f"ate: suspended {ref}"

    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="suspend")
    futures = [pool.submit(suspend, actor) for actor in running]
    done, not_done = wait(futures, timeout=max(deadline - time.monotonic(), 0) + 1)
    suspended = 0
    for future in done:
        ok, line = future.result()
        suspended += ok
        out(line)
    if not_done:
        out(f"ate: gave up suspending {len(not_done)} actor(s) after {SUSPEND_BUDGET:.0f} s")
    pool.shutdown(wait=False, cancel_futures=True)
    api.close()
    return suspended == len(running)
