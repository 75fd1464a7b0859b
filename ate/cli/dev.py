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
    microvm_workers: Annotated[
        int,
        typer.Option(
            "--microvm-workers",
            min=0,
            help="Workers of sandbox class microvm (QEMU VMs) beside the gVisor ones; needs qemu-system-x86 and"
            " the guest kernel (scripts/install.sh installs both).",
        ),
    ] = 0,
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
    object_store: Annotated[
        bool,
        typer.Option(
            "--object-store/--no-object-store",
            help="Keep snapshots in a local S3 server (SeaweedFS, data in DATA_DIR/object-store) instead of"
            " DATA_DIR/snapshots: the default location becomes s3://ate/snapshots.",
        ),
    ] = False,
    object_store_port: Annotated[
        int, typer.Option("--object-store-port", help="S3 port of that server (it also opens the next 4 ports).")
    ] = 8333,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="Node name; names the workers' network namespaces."
            " (default: <hostname>-<first 4 hex digits of sha256 of the absolute data dir>)",
            show_default=False,
        ),
    ] = None,
    subnet: Annotated[
        str | None,
        typer.Option(
            "--subnet",
            help="IPv4 network for worker addresses; must differ per stack on one machine."
            " (default: 10.<88 + those 4 hex digits mod 100>.0.0/16)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the whole stack on this machine until Ctrl-C.

    Starts PostgreSQL (embedded, unless ATE_DATABASE_URL is set), the Temporal dev server (unless
    ATE_TEMPORAL_ADDRESS is set), the api-server, the worker, an atelet and the router, and prints
    one line per part, then `ate: ready`. Logs go to DATA_DIR/logs. Ctrl-C suspends running actors
    and stops everything; state survives a restart. When an actor cannot be suspended (the
    api-server, the worker or Temporal is down), the atelet is killed rather than stopped, so its
    sandboxes keep running and the next ate dev adopts them with their memory.

    A part that exits after it was ready is restarted after 1 s, 2 s, 4 s... (at most 30 s);
    5 crashes of one part within 60 s stop everything. A restarted atelet adopts the sandboxes
    its previous run left still running (their actors keep their memory) and removes the rest
    with their network namespaces; if it is not running when ate dev stops, ate dev lists what is
    left with the commands that remove it.

    If ate dev itself is killed (even with kill -9), the atelet is killed with it, so that its
    sandboxes keep running and the next start adopts them with their memory, and every other part
    but PostgreSQL gets SIGTERM. PostgreSQL keeps running; the next ate dev with the same
    --data-dir adopts it.

    Two stacks on one machine need different --data-dir and ports: the node name and the worker
    subnet default to values derived from the data dir.

    Example: ate dev --workers 4 (with 1 microvm worker beside them: --microvm-workers 1)
    """
    if microvm_workers and pool is not None:
        raise typer.BadParameter(
            "--microvm-workers adds a pool beside the default gVisor one and cannot be used with --pool: "
            "put a pool of sandboxClass microvm in the pool file instead",
            param_hint="'--microvm-workers' / '--pool'",
        )
    from ate.dev.config import DevConfig
    from ate.dev.stack import DevStack

    config = DevConfig(
        data_dir=data_dir,
        workers=workers,
        pool=pool,
        microvm_workers=microvm_workers,
        example=example,
        api_port=api_port,
        router_port=router_port,
        atelet_port=atelet_port,
        temporal_port=temporal_port,
        ui_port=ui_port,
        metrics_port_base=metrics_port_base,
        object_store=object_store,
        object_store_port=object_store_port,
        node=node or "",
        subnet=subnet or "",
    )
    raise typer.Exit(DevStack(config).run())
