"""The parts `ate dev` supervises, built from its config: command line, environment, readiness.

The Temporal dev server (its command line is `ate.dev.temporal`'s) and the four ate processes,
api-server, worker, atelet and router, each `python -m ate <name>` with its flags derived from
`DevConfig`, and the line `ate dev` prints each time the part becomes ready. The order they start
in is `ate.dev.stack`'s; PostgreSQL is not a child (`ate.dev.postgres_watch`).
"""

import os
import signal
import sys
from pathlib import Path

from ate.dev.certificates import LocalCertificates
from ate.dev.child import Child, ReadyCheck, http_ok, log_line
from ate.dev.config import DevConfig
from ate.dev.temporal import dev_server_child


def child_env(database_url: str, temporal_address: str) -> dict[str, str]:
    """The environment of the ate processes: ours, plus where PostgreSQL and Temporal are.

    Args:
        database_url: The DSN every part that uses PostgreSQL connects to.
        temporal_address: The Temporal frontend's `host:port`.

    Returns:
        The full environment of a child.
    """
    env = dict(os.environ)
    # The project root (where ate/, api/, temporal_worker/, atelet/, router/ live) stays importable
    # from any working directory, whether or not the project is installed.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    env.update({
        "ATE_DATABASE_URL": database_url,
        "ATE_TEMPORAL_ADDRESS": temporal_address,
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    return env


def temporal_server(config: DevConfig) -> Child:
    """The Temporal dev server on `config.host:config.temporal_port`, its state in the data dir.

    Args:
        config: The stack's config.

    Returns:
        The child, not started; ready once the server answers with ate's search attributes.
    """
    cfg = config
    child = dev_server_child(
        cfg.data_dir, cfg.logs / "temporal.log", ip=cfg.host, port=cfg.temporal_port, ui_port=cfg.ui_port
    )
    child.ready_message = f"temporal: ready on {cfg.host}:{cfg.temporal_port}, UI http://{cfg.host}:{cfg.ui_port}"
    return child


def _ate(
    config: DevConfig, env: dict[str, str], name: str, args: list[str], ready: ReadyCheck, ready_message: str
) -> Child:
    """A child running `python -m ate <name> <args>`."""
    argv = [sys.executable, "-m", "ate", name, *args]
    return Child(
        name,
        argv,
        config.logs / f"{name}.log",
        ready=ready,
        env=env,
        cwd=config.image_root,
        ready_message=ready_message,
    )


def api_server(config: DevConfig, env: dict[str, str]) -> Child:
    """The REST API, ready once `/healthz` answers 200; snapshots go to `config.snapshot_location`.

    Args:
        config: The stack's config.
        env: The environment from `child_env`.

    Returns:
        The child, not started.
    """
    cfg = config
    api_args = ["--host", cfg.host, "--port", str(cfg.api_port), "--snapshot-location", cfg.snapshot_location]
    if cfg.object_store:  # the data dir's own location stays open to templates that name it
        api_args += ["--other-snapshot-location", f"file://{cfg.data_dir / 'snapshots'}"]
    return _ate(
        cfg,
        env,
        "api-server",
        api_args,
        http_ok(f"{cfg.api_url}/healthz"),
        f"api-server: ready on {cfg.api_url}",
    )


def worker(config: DevConfig, env: dict[str, str]) -> Child:
    """The Temporal worker (task queue ate-control), its metrics on the metrics base port + 1, calling
    the atelet with the control plane's certificate from `config.tls_dir`.

    Args:
        config: The stack's config.
        env: The environment from `child_env`.

    Returns:
        The child, not started; ready once it logs `worker: ready`.
    """
    cfg = config
    tls = LocalCertificates(cfg.tls_dir).control_plane
    worker_args = [
        "--metrics-listen", f"{cfg.host}:{cfg.metrics_port_base + 1}",
        "--router-url", f"http://{cfg.host}:{cfg.router_port}",  # where schedules' wakes go
        "--atelet-client-tls-cert", str(tls.cert),
        "--atelet-client-tls-key", str(tls.key),
        "--atelet-client-tls-ca", str(tls.ca),
    ]  # fmt: skip
    return _ate(cfg, env, "worker", worker_args, log_line("worker: ready"), "worker: ready (task queue ate-control)")


def atelet(config: DevConfig, env: dict[str, str]) -> Child:
    """This node's atelet: its workers (`--pool`, or `--workers` and `--microvm-workers`), node
    name, subnet, state dirs, and the node's certificate from `config.tls_dir`.

    Args:
        config: The stack's config.
        env: The environment from `child_env`.

    Returns:
        The child, not started; ready once it logs `atelet: ready`.
    """
    cfg = config
    data = cfg.data_dir
    tls = LocalCertificates(cfg.tls_dir).node(cfg.node)
    atelet_args = [
        "--node", cfg.node,
        "--listen", f"{cfg.host}:{cfg.atelet_port}",
        "--state-dir", str(data / "atelet"),
        "--snapshot-root", str(data / "snapshots"),
        "--image-root", str(cfg.image_root),
        "--api-server", cfg.api_url,
        "--metrics-listen", f"{cfg.host}:{cfg.metrics_port_base + 85}",
        "--subnet", cfg.subnet,
        "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca),
    ]  # fmt: skip
    if cfg.object_store:
        atelet_args += ["--object-store-location", cfg.snapshot_location]
    atelet_args += ["--pool", str(cfg.pool.resolve())] if cfg.pool else ["--workers", str(cfg.workers)]
    what = f"pool {cfg.pool}" if cfg.pool else f"{cfg.workers} workers"
    if cfg.microvm_workers:  # a pool `microvm` beside the default one (the atelet refuses it with --pool)
        atelet_args += ["--microvm-workers", str(cfg.microvm_workers)]
        what = f"{cfg.workers} gVisor workers and {cfg.microvm_workers} microvm workers (QEMU VMs)"
    ready = f"atelet: ready on {cfg.host}:{cfg.atelet_port} (node {cfg.node}, subnet {cfg.subnet}, {what})"
    child = _ate(cfg, env, "atelet", atelet_args, log_line("atelet: ready"), ready)
    # Killed with ate dev, not stopped: its clean stop ends every sandbox, and the actors RUNNING
    # there would lose their memory; killed, it leaves them for the next start to adopt.
    child.death_signal = signal.SIGKILL
    return child


def router(config: DevConfig, env: dict[str, str]) -> Child:
    """The router for actor traffic, its metrics on the metrics base port.

    Args:
        config: The stack's config.
        env: The environment from `child_env`.

    Returns:
        The child, not started; ready once it logs `router: ready`.
    """
    cfg = config
    router_args = [
        "--listen", f"{cfg.host}:{cfg.router_port}",
        "--api-server", cfg.api_url,
        "--metrics-listen", f"{cfg.host}:{cfg.metrics_port_base}",
    ]  # fmt: skip
    ready = f"router: ready on http://{cfg.host}:{cfg.router_port}"
    return _ate(cfg, env, "router", router_args, log_line("router: ready"), ready)
