"""`ate drain node` and `ate undrain node`."""

from typing import Annotated

import typer

from ate.cli.common import client, new_typer

drain_app = new_typer("drain", "Drain a node: suspend its actors, take no new ones.")
undrain_app = new_typer("undrain", "End a node's drain.")


@drain_app.command("node")
def drain_node(
    ctx: typer.Context,
    name: str,
    deadline: Annotated[
        float, typer.Option("--deadline", help="Seconds before actors not yet suspended are terminated.", min=1)
    ] = 1800.0,
) -> None:
    """Drain a node (what a pod eviction does): its workers take no new actors, its actors are
    suspended now, and any still there at the deadline are terminated and marked CRASHED (their
    last completed snapshot is kept; `ate revert actor` brings them back).

    Example: ate drain node vm-3d71 --deadline 600
    """
    started = client(ctx).drain_node(name, deadline)
    typer.echo(f"node/{name} draining (deadline {deadline:g} s; workflow {started.get('workflow_id')})")


@undrain_app.command("node")
def undrain_node(ctx: typer.Context, name: str) -> None:
    """Let a drained node take actors again.

    Example: ate undrain node vm-3d71
    """
    client(ctx).undrain_node(name)
    typer.echo(f"node/{name} active")
