"""The `ate` command: verbs as sub-commands (`ate get actors`), plus `ate dev` and the processes.

`--server` (env `ATE_SERVER`) and `--context` (env `ATE_CONTEXT`) select the API server and its
token for every client command (ate.cli.config).
"""

import typer

from ate.cli import (
    auth,
    create,
    delete,
    describe,
    dev,
    freeze,
    get,
    node,
    pause,
    processes,
    resume,
    revert,
    set_fields,
    suspend,
    tag,
)
from ate.cli import exec as exec_verb
from ate.cli import logs as logs_verb
from ate.cli.common import AteGroup, ContextOpt, ServerOpt

app = typer.Typer(
    name="ate",
    help="ate: many mostly idle sandboxed actors on a small pool of pre-started workers.",
    no_args_is_help=True,
    cls=AteGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    server: ServerOpt = None,
    context: ContextOpt = None,
) -> None:
    """ate: many mostly idle sandboxed actors on a small pool of pre-started workers."""
    ctx.obj = {"server": server, "context": context}


for verb in (create, get, describe, resume, suspend, pause, freeze, revert, tag, set_fields, delete, exec_verb, logs_verb):
    app.add_typer(verb.app, rich_help_panel="Resources")
app.add_typer(node.drain_app, rich_help_panel="Nodes")
app.add_typer(node.undrain_app, rich_help_panel="Nodes")
app.add_typer(auth.auth_app, rich_help_panel="Access")
app.add_typer(auth.config_app, rich_help_panel="Access")
app.command("dev", rich_help_panel="Local stack")(dev.dev)
processes.register(app)


if __name__ == "__main__":
    app(prog_name="ate")
