"""`ate set actor`: change fields of an existing actor (its own idle policy, its worker selector)."""

from typing import Annotated, Any

import typer

from ate.cli.common import AtespaceOpt, OutputOpt, client, new_typer
from ate.cli.create import parse_selector
from ate.cli.egress import EgressFileOpt, read_egress_file
from ate.cli.idle import IdleOpt, parse_idle_option
from ate.cli.output import print_actors

app = new_typer("set", "Change fields of an existing resource.")


@app.command("actor")
def set_actor(
    ctx: typer.Context,
    name: str,
    atespace: AtespaceOpt,
    idle: IdleOpt = None,
    template_idle: Annotated[
        bool, typer.Option("--template-idle", help="Drop the actor's own idle policy: its template's applies again.")
    ] = False,
    selector: Annotated[
        list[str] | None,
        typer.Option("--selector", "-l", help="Replace the worker labels the actor needs, key=value (repeatable)."),
    ] = None,
    egress_file: EgressFileOpt = None,
    template_egress: Annotated[
        bool, typer.Option("--template-egress", help="Drop the actor's own egress policy: its template's applies again.")
    ] = False,
    output: OutputOpt = None,
) -> None:
    """Change an actor's own idle policy (at once), its own egress policy (from its next outbound
    connection) or its worker selector (at its next resume).

    Examples: ate set actor c1 -a demo --idle 20:Freeze --idle 600:Suspend
              ate set actor c1 -a demo --idle off
              ate set actor c1 -a demo --template-idle
              ate set actor c1 -a demo --egress-file narrow.yaml
    """
    if idle and template_idle:
        raise typer.BadParameter("give --idle or --template-idle, not both", param_hint="'--template-idle'")
    changes: dict[str, Any] = {}
    if idle:
        changes["idle"] = parse_idle_option(idle)
    if template_idle:
        changes["idle"] = None
    if egress_file is not None and template_egress:
        raise typer.BadParameter("give --egress-file or --template-egress, not both", param_hint="'--template-egress'")
    if egress_file is not None:
        changes["egress"] = read_egress_file(egress_file)
    if template_egress:
        changes["egress"] = None
    if selector is not None:
        changes["worker_selector"] = parse_selector(selector)
    if not changes:
        raise typer.BadParameter(
            "give --idle, --template-idle, --egress-file, --template-egress or --selector", param_hint="'--idle'"
        )
    actor = client(ctx).update_actor(atespace, name, changes)
    if output is not None:
        print_actors(actor, output)
        return
    typer.echo(f"actor/{name} updated")
