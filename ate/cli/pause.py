"""`ate pause actor`."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("pause", "Checkpoint a running actor onto its node and free its worker.")


@app.command("actor")
def pause_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for PAUSED.", min=1)] = 60.0,
    output: OutputOpt = None,
) -> None:
    """Pause an actor: its checkpoint stays on its node, its next resume restores it there.
    Returns at once when it is already PAUSED. `ate suspend` uploads a paused actor's snapshot;
    `ate revert` drops it.

    Example: ate pause actor c1 -a demo
    """
    actor = client(ctx).pause_actor(atespace, name, timeout)
    if output is not None:
        print_actors(actor, output)
        return
    typer.echo(f"actor/{name} paused: {actor.get('state')} on node {actor.get('pinned_node')}")
