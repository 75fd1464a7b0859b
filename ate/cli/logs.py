"""`ate logs actor NAME -a ATESPACE [-f] [--tail N] [--since 10m] [--timestamps]`."""

from datetime import datetime
from typing import Annotated, Any

import typer

from ate.cli.common import AtespaceOpt, client, new_typer
from domain.logs import MAX_TAIL_LINES, parse_since

app = new_typer("logs", "Print an actor's output.")
FOLLOW_HELP = "Keep printing what comes, across suspends and resumes, until Ctrl-C."


def _local(time: str) -> str:
    """An RFC 3339 time as this machine's local time, to the millisecond."""
    try:
        return datetime.fromisoformat(time).astimezone().isoformat(timespec="milliseconds")
    except ValueError:
        return time


def render(record: dict[str, Any], *, timestamps: bool) -> str:
    """One output line as `ate logs` prints it: the line itself, or `[ate] <event>` for a lifecycle
    event; `timestamps` puts the local time first."""
    text = record.get("line", "") if record.get("type") == "line" else f"[ate] {record.get('event', '')}"
    return f"{_local(str(record.get('time', '')))} {text}" if timestamps else text


@app.command("actor")
def logs_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    follow: Annotated[bool, typer.Option("--follow", "-f", help=FOLLOW_HELP)] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the newest N lines.", min=0, max=MAX_TAIL_LINES)] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only lines of the last duration: 30s, 10m, 2h, 1d.")] = None,
    timestamps: Annotated[bool, typer.Option("--timestamps", help="Print each line's time first.")] = False,
) -> None:
    """Print the actor's output (its sandbox's stdout and stderr) across its whole life: every
    suspend, resume on another worker or node and atelet restart, oldest first, with what happened
    to it between the lines (`[ate] resumed on default/w-1`, `[ate] suspended: idle for 300 s`).
    ate keeps each actor's newest 1 MiB of output (ATE_LOG_BYTES_PER_ACTOR) until it is deleted.
    Any role that may read the actor may read its logs: they hold whatever the workload printed.

    Example: ate logs actor c1 -a demo -f --tail 20
    """
    if since is not None:
        try:
            parse_since(since)
        except ValueError as error:
            raise typer.BadParameter(str(error).removeprefix("since: "), param_hint="--since") from None
    try:
        for record in client(ctx).actor_logs(atespace, name, follow=follow, tail=tail, since=since):
            typer.echo(render(record, timestamps=timestamps))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
