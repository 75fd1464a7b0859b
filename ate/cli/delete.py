"""`ate delete actor|atespace|template|token|schedule`."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, client, new_typer

app = new_typer("delete", "Delete an actor, a template, an atespace, a token or a schedule.")


@app.command("actor")
def delete_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    force: Annotated[
        bool, typer.Option("--force", help="Delete from any state: stop its operation, terminate its sandbox first.")
    ] = False,
) -> None:
    """Delete a SUSPENDED actor (any state with --force).

    Example: ate delete actor c1 -a demo --force
    """
    client(ctx).delete_actor(atespace, name, force=force)
    typer.echo(f"actor/{name} deleted")


@app.command("template")
def delete_template(ctx: typer.Context, name: str, atespace: AtespaceOpt) -> None:
    """Delete a template no actor uses.

    Example: ate delete template counter -a demo
    """
    client(ctx).delete_template(atespace, name)
    typer.echo(f"template/{name} deleted")


@app.command("schedule")
def delete_schedule(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    actor: Annotated[str, typer.Option("--actor", help="The actor the schedule wakes.")],
) -> None:
    """Delete an actor's schedule (a wake already started runs to its end).

    Example: ate delete schedule hourly -a demo --actor c1
    """
    client(ctx).delete_schedule(atespace, actor, name)
    typer.echo(f"schedule/{name} deleted")


@app.command("atespace")
def delete_atespace(ctx: typer.Context, name: str) -> None:
    """Delete an empty atespace.

    Example: ate delete atespace demo
    """
    client(ctx).delete_atespace(name)
    typer.echo(f"atespace/{name} deleted")


@app.command("token")
def delete_token(ctx: typer.Context, token_id: Annotated[str, typer.Argument(help="The token's ID (ate get tokens).")]) -> None:
    """Revoke a token: requests with it are refused from now on.

    Example: ate delete token 3f9a1c0b7d2e
    """
    client(ctx).delete_token(token_id)
    typer.echo(f"token/{token_id} deleted")


@app.command("secret")
def delete_secret(ctx: typer.Context, name: str, atespace: AtespaceOpt) -> None:
    """Delete a secret at once.

    Example: ate delete secret model-key -a demo
    """
    client(ctx).delete_secret(atespace, name)
    typer.echo(f"secret/{name} deleted")
