"""`ate describe actor` (everything about one actor, with its last operations) and `ate describe snapshot`."""

from typing import Any

import typer

from ate.cli.common import AtespaceOpt, client, new_typer
from ate.cli.egress import egress_lines
from ate.cli.output import format_table, human_age, human_bytes, one_line

app = new_typer("describe", "Show one resource in detail, with its history.")

OPERATION_COLUMNS = ("OPERATION", "OUTCOME", "WORKER", "DURATION", "AGE", "REASON", "ERROR")


def operation_row(operation: dict[str, Any]) -> list[str]:
    """One row of OPERATION_COLUMNS; a running operation has OUTCOME `running`."""
    duration = operation.get("duration_seconds")
    return [
        str(operation.get("operation")),
        str(operation.get("outcome") or "running"),
        str(operation.get("worker") or "<none>"),
        f"{duration:.2f}s" if isinstance(duration, int | float) else "-",
        human_age(operation.get("started_at")),
        str(operation.get("reason") or "-"),
        one_line(str(operation.get("error") or ""), 60),
    ]


def idle_lines(actor: dict[str, Any]) -> list[str]:
    """The `Idle policy:` lines of `ate describe actor`: the steps and where they come from, how
    long the actor has been idle, and its next step with when."""
    idle = actor.get("idle")
    if not idle:
        return ["Idle policy:      <none> (it keeps its worker until suspended)"]
    steps = ", ".join(f"{s.get('action')} after {s.get('afterSeconds'):g} s" for s in idle.get("policy") or [])
    lines = [f"Idle policy:      {steps or 'off'} (from the {idle.get('source')})"]
    if idle.get("idle_seconds") is not None:
        lines.append(f"Idle for:         {idle['idle_seconds']:.0f} s (no traffic through any router)")
    if idle.get("next_action"):
        due = idle.get("next_action_in_seconds") or 0
        lines.append(f"Next:             {idle['next_action']} " + (f"in {due:.0f} s" if due > 0 else "now"))
    return lines


@app.command("snapshot")
def describe_snapshot(ctx: typer.Context, snapshot_id: int, atespace: AtespaceOpt) -> None:
    """Show a snapshot: whose, which generation, where it is, what keeps it, and its files with
    their sizes (`ate get snapshots -a A` lists the IDs).

    Example: ate describe snapshot 12 -a demo
    """
    snapshot = client(ctx).get_snapshot(atespace, snapshot_id)
    kept = ", ".join(snapshot.get("kept_by") or []) or "nothing (the collector deletes it)"
    where = f"node {snapshot.get('node')}" if snapshot.get("storage") == "LOCAL" else "the storage location"
    lines = [
        f"ID:               {snapshot.get('id')}",
        f"Owner:            {snapshot.get('owner_kind')}/{snapshot.get('owner')}",
        f"Generation:       {snapshot.get('generation')}",
        f"Scope:            {snapshot.get('scope')} ({snapshot.get('sandbox_class')})",
        f"State:            {snapshot.get('state')}",
        f"Size:             {human_bytes(snapshot.get('size_bytes'))} ({snapshot.get('size_bytes')} bytes)",
        f"Where:            {where}: {snapshot.get('location')}",
        f"Kept by:          {kept}",
        f"Created:          {snapshot.get('created_at')}",
        f"Completed:        {snapshot.get('completed_at') or '-'}",
        "Files:",
        *[f"  {human_bytes(f.get('size_bytes')):>8}  {f.get('path')}" for f in snapshot.get("files") or []],
    ]
    typer.echo("\n".join(lines))


@app.command("actor")
def describe_actor(ctx: typer.Context, name: str, atespace: AtespaceOpt) -> None:
    """Show an actor: state, worker, latest snapshot, last error, and its last operations.

    Example: ate describe actor c1 -a demo
    """
    api = client(ctx)
    actor = api.get_actor(atespace, name)
    history = api.actor_operations(atespace, name, limit=10)
    template = None if actor.get("egress") is not None else api.get_template(atespace, str(actor.get("template")))
    worker = actor.get("worker") or {}
    snapshot = actor.get("latest_snapshot") or {}
    lines = [
        f"Name:             {actor.get('name')}",
        f"Atespace:         {actor.get('atespace')}",
        f"Template:         {actor.get('template')}",
        f"State:            {actor.get('state')}",
        f"Version:          {actor.get('version')}",
        f"Worker:           {worker.get('pool')}/{worker.get('name')} on {worker.get('node')} ({worker.get('ip')})"
        if worker
        else "Worker:           <none>",
        f"Latest snapshot:  generation {snapshot.get('generation')} {snapshot.get('scope')} {snapshot.get('state')}"
        if snapshot
        else "Latest snapshot:  <none> (the first resume restores the template's golden snapshot)",
        *(
            [
                f"{'Upload pending' if actor.get('upload_pending') else 'Paused snapshot'}:"
                f"{' ' * (2 if actor.get('upload_pending') else 1)} generation {local.get('generation')} "
                f"{local.get('scope')} on node {actor.get('pinned_node')} (its next resume is pinned there)"
            ]
            if (local := actor.get("local_snapshot"))
            else []
        ),
        f"Worker selector:  {actor.get('worker_selector') or {}}",
        *idle_lines(actor),
        *egress_lines(actor, (template or {}).get("spec")),
        f"Last error:       {actor.get('last_error') or '<none>'}",
        f"Age:              {human_age(actor.get('created_at'))}",
        "",
        "Operations (newest first):",
    ]
    typer.echo("\n".join(lines))
    if history:
        typer.echo(format_table(OPERATION_COLUMNS, [operation_row(o) for o in history]))
    else:
        typer.echo("  <none>")
    if actor.get("state") == "CRASHED":
        typer.echo(f"\nThe actor crashed. Bring it back with: ate revert actor {name} -a {atespace}")
