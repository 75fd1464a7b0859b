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
    to_generation: Annotated[
        int | None,
        typer.Option(
            "--to-generation",
            min=1,
            help="Go back to this kept generation (see `ate get snapshots -a ATESPACE --actor NAME`); "
            "also for a SUSPENDED actor.",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Revert an actor (RUNNING, PAUSED, CRASHED, or stuck RESUMING/SUSPENDING) to SUSPENDED with
    its last completed snapshot, or with any kept generation of its own (--to-generation). An
    operation stuck on the actor is stopped first; a sandbox on a dead node is fenced and the
    revert finishes anyway.

    Examples: ate revert actor c1 -a demo; ate revert actor c1 -a demo --to-generation 3
    """
    actor = client(ctx).revert_actor(atespace, name, timeout, to_generation)
    if output is not None:
        print_actors(actor, output)
        return
    snapshot = actor.get("latest_snapshot") or {}
    back_to = f" (back to generation {snapshot['generation']})" if snapshot.get("generation") else " (golden snapshot)"
    typer.echo(f"actor/{name} reverted: {actor.get('state')}{back_to}")
