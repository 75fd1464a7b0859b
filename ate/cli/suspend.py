"""`ate suspend actor`."""

from enum import StrEnum
from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("suspend", "Checkpoint a running actor and free its worker.")


class SuspendMode(StrEnum):
    """`sync`: the snapshot is in the storage location before the command returns. `async`: the
    checkpoint stays on the actor's node and is uploaded in the background (the actor is pinned
    to that node until then)."""

    sync = "sync"
    async_ = "async"


@app.command("actor")
def suspend_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for SUSPENDED.", min=1)] = 60.0,
    mode: Annotated[
        SuspendMode, typer.Option("--mode", help="sync: upload before returning; async: upload in the background.")
    ] = SuspendMode.sync,
    output: OutputOpt = None,
) -> None:
    """Suspend an actor; returns at once when it is already SUSPENDED.

    Example: ate suspend actor c1 -a demo
    """
    actor = client(ctx).suspend_actor(atespace, name, timeout, mode.value)
    if output is not None:
        print_actors(actor, output)
        return
    if actor.get("upload_pending"):
        typer.echo(
            f"actor/{name} suspended: {actor.get('state')} (uploading in the background from node "
            f"{actor.get('pinned_node')})"
        )
        return
    typer.echo(f"actor/{name} suspended: {actor.get('state')}")
