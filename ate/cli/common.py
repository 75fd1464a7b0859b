"""Pieces every verb shares: option types, the API client, the error-printing group.

The group turns API failures into `error: <message>` on stderr and exit status 1.
"""

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ate.cli.client import ApiClient, ApiError
from ate.cli.config import ConfigError, resolve
from ate.cli.output import OutputFormat
from domain.reasons import Reason

OutputOpt = Annotated[
    OutputFormat | None,
    typer.Option("--output", "-o", help="Output format: table, json or yaml.", case_sensitive=False),
]
GetOutputOpt = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", help="Output format: table, json or yaml.", case_sensitive=False),
]
AtespaceOpt = Annotated[
    str,
    typer.Option(
        "--atespace", "-a", envvar="ATE_ATESPACE", help="The atespace (env ATE_ATESPACE).", show_default=False
    ),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        "-s",
        envvar="ATE_SERVER",
        help="URL of the ate API server (env ATE_SERVER; default: the context's, else http://127.0.0.1:8080).",
        show_default=False,
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option(
        "--context",
        envvar="ATE_CONTEXT",
        help="The context of the ate config to use (env ATE_CONTEXT; default: its current-context).",
        show_default=False,
    ),
]


class AteGroup(TyperGroup):
    """A command group that prints API failures as `error: <message>` and exits 1."""

    def invoke(self, ctx: Any) -> Any:
        """Run the chosen command, translating `ApiError` into a one-line error.

        Args:
            ctx: The click context.

        Returns:
            Whatever the command returns.

        Raises:
            typer.Exit: With code 1 when the API call failed.
        """
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            typer.echo(f"error: {explained(exc)}", err=True)
            raise typer.Exit(1) from None
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None



def explained(error: ApiError) -> str:
    """The API's message, with what to do added where the API's text alone leaves it open: a
    409 OperationInProgress names the operation that holds the actor and how to follow it (the
    API's text is fixed by ARCHITECTURE.md; the operation is in its details)."""
    details = error.details or {}
    operation = details.get("operation")
    if error.reason != Reason.OPERATION_IN_PROGRESS or not isinstance(operation, str):
        return error.message
    actor = str(details.get("actor", "")).removeprefix("actor ")
    atespace, _, name = actor.partition("/")
    follow = f"; follow it with 'ate get operations -a {atespace} --actor {name}'" if atespace and name else ""
    return f"{error.message}: {operation} is running; try again once it has ended{follow}"

def new_typer(name: str, help_text: str) -> typer.Typer:
    """A verb's Typer: no-args shows help, errors print the API message."""
    return typer.Typer(name=name, help=help_text, no_args_is_help=True, cls=AteGroup, add_completion=False)


def client(ctx: typer.Context) -> ApiClient:
    """The API client for this invocation: the root `--server` / `--context` options and the ate
    config (ate.cli.config) say where and with which token.

    Raises:
        ConfigError: the config file is unusable (printed as `error: ...` by AteGroup).

    Args:
        ctx: Any context of the invocation.

    Returns:
        An `ApiClient`, closed when the invocation ends.
    """
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    existing = obj.get("client")
    if isinstance(existing, ApiClient):
        return existing
    target = resolve(obj.get("server"), obj.get("context"))
    api = ApiClient(target.server, token=target.token)
    obj["client"] = api
    root.obj = obj
    root.call_on_close(api.close)
    return api
