"""`ate revert actor`."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("revert", "Revert an actor to its last completed snapshot.")


@app.command("actor")
def revert_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for SUSPENDED.", min=1)] = 60.0,
    output: OutputOpt = None,
) -> None:
    """Revert an actor (RUNNING, PAUSED, CRASHED, or stuck RESUMING/SUSPENDING) to SUSPENDED with
    its last completed snapshot. An operation stuck on the actor is stopped first; a sandbox on a
    dead node is fenced and the revert finishes anyway.

    Example: ate revert actor c1 -a demo
    """
    actor = client(ctx).revert_actor(atespace, name, timeout)
    if output is not None:
        print_actors(actor, output)
        return
    snapshot = actor.get("latest_snapshot") or {}
    back_to = f" (back to generation {snapshot['generation']})" if snapshot.get("generation") else " (golden snapshot)"
    typer.echo(f"actor/{name} reverted: {actor.get('state')}{back_to}")
