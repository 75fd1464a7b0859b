"""`ate suspend actor`."""

from enum import StrEnum
from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("suspend", "Checkpoint a running actor and free its worker.")


class SuspendMode(StrEnum):
    """`sync`: the snapshot is in the storage location before the command returns. (The
    architecture's `async` mode, upload in the background, is not built yet; `ate pause` keeps
    the checkpoint on the node instead.)"""

    sync = "sync"


@app.command("actor")
def suspend_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for SUSPENDED.", min=1)] = 60.0,
    mode: Annotated[SuspendMode, typer.Option("--mode", help="sync: upload before returning (the only mode so far).")] = SuspendMode.sync,
    output: OutputOpt = None,
) -> None:
    """Suspend an actor; returns at once when it is already SUSPENDED.

    Example: ate suspend actor c1 -a demo
    """
    actor = client(ctx).suspend_actor(atespace, name, timeout, mode.value)
    if output is not None:
        print_actors(actor, output)
        return
    typer.echo(f"actor/{name} suspended: {actor.get('state')}")
