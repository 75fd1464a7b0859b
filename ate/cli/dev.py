"""`ate dev`: PostgreSQL, Temporal and every ate process on this machine, in the foreground."""

from pathlib import Path
from typing import Annotated

import typer


def dev(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where all state and logs live.")] = Path(".ate"),
    workers: Annotated[int, typer.Option("--workers", min=1, help="Workers the atelet starts (without --pool).")] = 2,
    pool: Annotated[
        Path | None,
        typer.Option("--pool", exists=True, dir_okay=False, help="Worker-pool YAML file for the atelet."),
    ] = None,
    example: Annotated[
        bool, typer.Option("--example/--no-example", help="Create atespace demo, template counter and actor c1.")
    ] = False,
    api_port: Annotated[int, typer.Option("--api-port", help="REST API port.")] = 8080,
    router_port: Annotated[int, typer.Option("--router-port", help="Router port for actor traffic.")] = 8000,
    atelet_port: Annotated[int, typer.Option("--atelet-port", help="atelet gRPC port.")] = 8085,
    temporal_port: Annotated[int, typer.Option("--temporal-port", help="Temporal gRPC port.")] = 7233,
    ui_port: Annotated[int, typer.Option("--ui-port", help="Temporal Web UI port.")] = 8233,
    metrics_port_base: Annotated[
        int, typer.Option("--metrics-port-base", help="Prometheus ports: router here, worker +1, atelet +85.")
    ] = 9000,
    node: Annotated[
        str | None, typer.Option("--node", help="Node name (default: the host name); names the network namespaces.")
    ] = None,
    subnet: Annotated[
        str, typer.Option("--subnet", help="IPv4 network for worker addresses; differ per stack on one machine.")
    ] = "10.88.0.0/16",
) -> None:
    """Run the whole stack on this machine until Ctrl-C.

    Starts PostgreSQL (embedded, unless ATE_DATABASE_URL is set), the Temporal dev server (unless
    ATE_TEMPORAL_ADDRESS is set), the api-server, the worker, an atelet and the router, and prints
    one line per part, then `ate: ready`. Logs go to DATA_DIR/logs. Ctrl-C suspends running actors
    and stops everything; state survives a restart.

    Example: ate dev --workers 4
    """
    from ate.dev.stack import DevConfig, DevStack

    config = DevConfig(
        data_dir=data_dir,
        workers=workers,
        pool=pool,
        example=example,
        api_port=api_port,
        router_port=router_port,
        atelet_port=atelet_port,
        temporal_port=temporal_port,
        ui_port=ui_port,
        metrics_port_base=metrics_port_base,
        subnet=subnet,
    )
    if node:
        config.node = node
    raise typer.Exit(DevStack(config).run())
