"""`ate api-server|worker|atelet|router|controller`: run one ate process in the foreground.

Every argument after the command is handed to that process's own `main(argv)`; the modules
are imported only when their command runs, so the CLI stays fast and works without them.
"""

import importlib
from typing import Any

import typer

PROCESSES: dict[str, tuple[str, str]] = {
    "api-server": ("api.main", "Run the REST API server (args go to api.main)."),
    "worker": (
        "temporal_worker.main",
        "Run the Temporal worker for all workflows and activities (args go to temporal_worker.main).",
    ),
    "atelet": ("atelet.main", "Run the node agent (args go to atelet.main)."),
    "router": ("router.main", "Run the HTTP router for actor traffic (args go to router.main)."),
    "controller": ("controller.main", "Run the Kubernetes controller: WorkerPools, worker pods (args go to controller.main)."),
}

CONTEXT_SETTINGS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}


def run_process(module: str, argv: list[str]) -> None:
    """Import `module` and call its `main(argv)`.

    Args:
        module: Dotted module name exposing `main(argv: list[str] | None) -> None`.
        argv: The arguments to pass on.
    """
    importlib.import_module(module).main(argv)


def _command(module: str) -> Any:
    """A Typer callback that runs `module` with the extra arguments."""

    def command(ctx: typer.Context) -> None:
        run_process(module, list(ctx.args))

    return command


def register(app: typer.Typer) -> None:
    """Add one command per process to `app`."""
    for name, (module, help_text) in PROCESSES.items():
        app.command(
            name,
            help=help_text,
            context_settings=CONTEXT_SETTINGS,
            add_help_option=False,
            rich_help_panel="Processes",
        )(_command(module))
