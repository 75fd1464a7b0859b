"""`ate freeze actor`."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("freeze", "Stop a running actor's sandbox in place (the hot tier).")


@app.command("actor")
def freeze_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for FROZEN.", min=1)] = 60.0,
    output: OutputOpt = None,
) -> None:
    """Freeze an actor: its sandbox stops in place, keeping its worker and its memory and using
    no CPU; its next request (or `ate resume actor`) thaws it in milliseconds. Returns at once
    when it is already FROZEN. An idle policy's Freeze step does the same by itself.

    Example: ate freeze actor c1 -a demo
    """
    actor = client(ctx).freeze_actor(atespace, name, timeout)
    if output is not None:
        print_actors(actor, output)
        return
    worker = actor.get("worker") or {}
    typer.echo(f"actor/{name} frozen: {actor.get('state')} on {worker.get('name')} ({worker.get('ip')})")
