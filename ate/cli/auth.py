"""`ate auth whoami` and `ate config get-contexts|use-context|current-context`: who the CLI acts
as, and which context of the ate config (ate.cli.config) it uses."""

import typer

from ate.cli.common import client, new_typer
from ate.cli.config import AteConfig, ConfigError, config_path
from ate.cli.output import format_table

auth_app = new_typer("auth", "Who you are to the API.")
config_app = new_typer("config", "The contexts of the ate config (server and token per context).")


@auth_app.command("whoami")
def whoami(ctx: typer.Context) -> None:
    """Print the name and grants the API sees for your token.

    Example: ate auth whoami
    """
    me = client(ctx).whoami()
    typer.echo(format_table(("NAME", "GRANTS"), [[me["name"], ",".join(me["grants"]) or "<none>"]]))


@config_app.command("get-contexts")
def get_contexts() -> None:
    """List the contexts (`*` marks the current one).

    Example: ate config get-contexts
    """
    path = config_path()
    config = AteConfig.load(path)
    if not config.contexts:
        typer.echo(f"No contexts in {path} (`ate dev` writes one).", err=True)
        return
    rows = [
        [
            "*" if name == config.current_context else "",
            name,
            c.server,
            c.token_file or ("inline" if c.token else "<none>"),
        ]
        for name, c in sorted(config.contexts.items())
    ]
    typer.echo(format_table(("CURRENT", "NAME", "SERVER", "TOKEN"), rows))


@config_app.command("use-context")
def use_context(name: str) -> None:
    """Make NAME the current context.

    Example: ate config use-context ate-dev
    """
    path = config_path()
    config = AteConfig.load(path)
    if name not in config.contexts:
        known = ", ".join(sorted(config.contexts)) or "none"
        raise ConfigError(f"context {name} is not in {path} (contexts: {known})")
    config.current_context = name
    config.save(path)
    typer.echo(f"Switched to context {name}.")


@config_app.command("current-context")
def current_context() -> None:
    """Print the current context.

    Example: ate config current-context
    """
    path = config_path()
    current = AteConfig.load(path).current_context
    if current is None:
        raise ConfigError(f"no current-context in {path}")
    typer.echo(current)
