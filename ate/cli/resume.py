"""`ate resume actor`."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_actors

app = new_typer("resume", "Resume a suspended actor onto a worker.")


@app.command("actor")
def resume_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for RUNNING.", min=1)] = 30.0,
    output: OutputOpt = None,
) -> None:
    """Resume an actor; returns at once when it is already RUNNING.

    Example: ate resume actor c1 -a demo
    """
    actor = client(ctx).resume_actor(atespace, name, timeout)
    if output is not None:
        print_actors(actor, output)
        return
    worker = actor.get("worker") or {}
    where = f" on {worker.get('name')} ({worker.get('ip')})" if worker.get("name") else ""
    typer.echo(f"actor/{name} resumed: {actor.get('state')}{where}")
