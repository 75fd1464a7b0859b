"""`ate tag actor NAME TAG`."""

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.output import print_tags

app = new_typer("tag", "Tag an actor's latest completed snapshot.")


@app.command("actor")
def tag_actor(ctx: typer.Context, name: str, tag: str, atespace: AtespaceOpt, output: OutputOpt = None) -> None:
    """Record TAG for the actor's latest completed snapshot; create actors from it with
    `ate create actor NEW -a ATESPACE --from-tag ATESPACE/TAG`.

    Example: ate tag actor c1 v1 -a demo
    """
    created = client(ctx).tag_actor(atespace, name, tag)
    if output is not None:
        print_tags(created, output)
        return
    typer.echo(f"tag/{atespace}/{tag} created: actor {name}, generation {created.get('generation')}")
