"""The idle policy as the CLI takes it: repeatable `--idle AFTER:ACTION` (`--idle 20:Freeze --idle
600:Suspend`), or `--idle off`; checked with `domain.idle`'s rules before anything is sent."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from domain.idle import PolicyError, parse_idle_policy

IdleOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--idle",
        help="Idle policy step AFTER_SECONDS:ACTION (Freeze, Pause or Suspend), repeatable in increasing time, "
        "e.g. --idle 20:Freeze --idle 600:Suspend; 'off' turns idleness off for this actor.",
    ),
]


def parse_idle_option(values: list[str] | None) -> list[dict[str, Any]] | None:
    """The `--idle` values as the API's policy (a list of `{afterSeconds, action}`; [] for `off`),
    or None when none were given.

    Raises:
        typer.BadParameter: a value is not AFTER_SECONDS:ACTION, or the policy breaks a rule
            (the message names the step).
    """
    if not values:
        return None
    if values == ["off"]:
        return []
    steps: list[dict[str, Any]] = []
    for value in values:
        after, sep, action = value.partition(":")
        try:
            seconds: float = float(after.strip().removesuffix("s"))
        except ValueError:
            seconds = float("nan")
        if not sep or seconds != seconds:
            raise typer.BadParameter(
                f"{value!r} is not AFTER_SECONDS:ACTION (e.g. 300:Suspend), or 'off'", param_hint="'--idle'"
            )
        steps.append({"afterSeconds": int(seconds) if seconds.is_integer() else seconds, "action": action.strip()})
    try:
        return parse_idle_policy(steps).document()
    except PolicyError as error:
        raise typer.BadParameter(str(error), param_hint="'--idle'") from None
