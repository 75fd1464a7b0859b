"""Forks (issue 30): how many actors one fork request may create and what they are called."""

from __future__ import annotations

MAX_FORK_COUNT = 100
"""The most actors one fork request creates (`count`); E2B forks up to 100 sandboxes from one
snapshot."""


def fork_names(name: str, count: int | None) -> list[str]:
    """The names of the actors a fork creates: `name` itself when `count` is None, else
    `name-1` .. `name-<count>` (as `ate create actor NEW --count N` promises).

    Raises:
        ValueError: `count` is outside 1..MAX_FORK_COUNT (the message names the field).
    """
    if count is None:
        return [name]
    if not 1 <= count <= MAX_FORK_COUNT:
        raise ValueError(f"count: {count} is outside 1..{MAX_FORK_COUNT}")
    return [f"{name}-{i}" for i in range(1, count + 1)]
