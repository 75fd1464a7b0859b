"""When a part of `ate dev` that exited after it was ready is started again.

`RestartPolicy` says how long to wait (1 s, 2 s, 4 s... at most 30 s) and when to give up (5
crashes within 60 s); `CrashCounter` applies it to one part. The supervisor keeps one per child,
the embedded PostgreSQL's watch one of its own.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    """When a child that exited after being ready is started again.

    Attributes:
        first_delay: Seconds before the first restart; each further crash doubles it.
        max_delay: The longest delay.
        max_crashes: This many crashes within `window` seconds give up.
        window: Seconds over which crashes are counted; a child that stayed up this long
            starts again at `first_delay`.
    """

    first_delay: float = 1.0
    max_delay: float = 30.0
    max_crashes: int = 5
    window: float = 60.0


class CrashCounter:
    """Counts one part's crashes and answers how long to wait before its restart.

    Args:
        policy: The restart policy.
    """

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._crashes: list[float] = []
        self._streak = 0

    def crashed(self, now: float, up_for: float) -> float | None:
        """Record a crash at `now` after `up_for` seconds of running.

        Returns:
            The seconds to wait before the restart, or None to give up (`max_crashes`
            crashes within `window` seconds).
        """
        policy = self.policy
        self._crashes = [t for t in self._crashes if now - t < policy.window] + [now]
        if len(self._crashes) >= policy.max_crashes:
            return None
        self._streak = 1 if up_for >= policy.window else self._streak + 1
        return min(policy.first_delay * float(2 ** (self._streak - 1)), policy.max_delay)

    @property
    def recent(self) -> int:
        """Crashes within the current window."""
        return len(self._crashes)
