"""`ate get atespaces|actors|workers|templates|tags|operations|tokens|secrets|snapshots` (singular nouns take a NAME)."""

from typing import Annotated

import typer

from ate.cli.common import AtespaceOpt, GetOutputOpt, client, new_typer
from ate.cli.output import (
    OutputFormat,
    print_actors,
    print_atespaces,
    print_operations,
    print_schedules,
    print_secrets,
    print_snapshots,
    print_tags,
    print_templates,
    print_tokens,
    print_workers,
)

app = new_typer("get", "Show atespaces, actors, templates or workers.")

OptionalAtespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--atespace", "-a", envvar="ATE_ATESPACE", help="The atespace (env ATE_ATESPACE).", show_default=False
    ),
]
AllOpt = Annotated[bool, typer.Option("--all-atespaces", "-A", help="List across all atespaces.")]


@app.command("atespaces")
def get_atespaces(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Show only this atespace.")] = None,
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List atespaces.

    Example: ate get atespaces
    """
    api = client(ctx)
    print_atespaces(api.get_atespace(name) if name else api.list_atespaces(), output)


@app.command("atespace", hidden=True)
def get_atespace(ctx: typer.Context, name: str, output: GetOutputOpt = OutputFormat.table) -> None:
    """Show one atespace."""
    print_atespaces(client(ctx).get_atespace(name), output)


@app.command("actors")
def get_actors(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Show only this actor (needs -a).")] = None,
    atespace: OptionalAtespaceOpt = None,
    all_atespaces: AllOpt = False,
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List actors of one atespace (-a), or of all (-A, the default without -a).

    Example: ate get actors -a demo
    """
    if all_atespaces and atespace and getattr(ctx.get_parameter_source("atespace"), "name", None) == "COMMANDLINE":
        raise typer.BadParameter("-a and -A exclude each other", param_hint="'-A' / '--all-atespaces'")
    if all_atespaces:
        atespace = None
    api = client(ctx)
    if name:
        if not atespace:
            raise typer.BadParameter("an actor name needs its atespace", param_hint="'-a' / '--atespace'")
        print_actors(api.get_actor(atespace, name), output)
        return
    empty = f"No actors found in atespace {atespace}." if atespace else "No actors found."
    print_actors(api.list_actors(atespace), output, empty=empty)


@app.command("actor")
def get_actor(ctx: typer.Context, name: str, atespace: AtespaceOpt, output: GetOutputOpt = OutputFormat.table) -> None:
    """Show one actor.

    Example: ate get actor c1 -a demo -o yaml
    """
    print_actors(client(ctx).get_actor(atespace, name), output)


@app.command("workers")
def get_workers(ctx: typer.Context, output: GetOutputOpt = OutputFormat.table) -> None:
    """List workers of every node.

    Example: ate get workers
    """
    print_workers(client(ctx).list_workers(), output)


@app.command("worker", hidden=True)
def get_worker(ctx: typer.Context, output: GetOutputOpt = OutputFormat.table) -> None:
    """List workers (alias of `get workers`)."""
    print_workers(client(ctx).list_workers(), output)


@app.command("templates")
def get_templates(
    ctx: typer.Context,
    atespace: AtespaceOpt,
    name: Annotated[str | None, typer.Argument(help="Show only this template.")] = None,
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List the templates of an atespace.

    Example: ate get templates -a demo
    """
    api = client(ctx)
    if name:
        print_templates(api.get_template(atespace, name), output)
    else:
        print_templates(api.list_templates(atespace), output, empty=f"No templates found in atespace {atespace}.")


@app.command("template")
def get_template(
    ctx: typer.Context, name: str, atespace: AtespaceOpt, output: GetOutputOpt = OutputFormat.table
) -> None:
    """Show one template (with its failure reason when Failed).

    Example: ate get template counter -a demo
    """
    print_templates(client(ctx).get_template(atespace, name), output)


@app.command("tags")
def get_tags(ctx: typer.Context, atespace: AtespaceOpt, output: GetOutputOpt = OutputFormat.table) -> None:
    """List the tags of an atespace.

    Example: ate get tags -a demo
    """
    print_tags(client(ctx).list_tags(atespace), output)


@app.command("schedules")
def get_schedules(
    ctx: typer.Context,
    atespace: AtespaceOpt,
    actor: Annotated[str, typer.Option("--actor", help="The actor whose schedules to list.")],
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List an actor's schedules, with their next wake and how many wakes they started.

    Example: ate get schedules -a demo --actor c1
    """
    print_schedules(client(ctx).list_schedules(atespace, actor), output)


@app.command("operations")
def get_operations(
    ctx: typer.Context,
    atespace: Annotated[str | None, typer.Option("--atespace", "-a", help="Only this atespace.")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Only this actor.")] = None,
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List operations in flight (the running workflows, with their current step).

    Example: ate get operations -a demo --actor c1
    """
    print_operations(client(ctx).list_operations(atespace, actor), output)


@app.command("tokens")
def get_tokens(ctx: typer.Context, output: GetOutputOpt = OutputFormat.table) -> None:
    """List the tokens you may manage (never their secrets).

    Example: ate get tokens
    """
    print_tokens(client(ctx).list_tokens(), output)


@app.command("snapshots")
def get_snapshots(
    ctx: typer.Context,
    atespace: AtespaceOpt,
    actor: Annotated[str | None, typer.Option("--actor", help="Only this actor's snapshots.")] = None,
    output: GetOutputOpt = OutputFormat.table,
) -> None:
    """List an atespace's snapshots: generation, scope, state, size at rest, where (a node or the
    store) and what keeps each (latest, paused, golden, a tag; '-': the collector deletes it).

    Example: ate get snapshots -a demo --actor c1
    """
    print_snapshots(client(ctx).list_snapshots(atespace, actor), output)


@app.command("secrets")
def get_secrets(ctx: typer.Context, atespace: AtespaceOpt, output: GetOutputOpt = OutputFormat.table) -> None:
    """List an atespace's secrets: names, sizes and who made them (a value is never shown).

    Example: ate get secrets -a demo
    """
    print_secrets(client(ctx).list_secrets(atespace), output)
