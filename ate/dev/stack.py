"""The order of `ate dev`: PostgreSQL, Temporal, api-server, worker, atelet, router.

Start: each part in turn, each waited for (60 s) before the next; then `ate: ready`.
Run: watch the parts; a part (PostgreSQL and Temporal too) that exits after it was ready is
restarted after 1 s, 2 s, 4 s... (at most 30 s), printing `<part>: exited (<code>), restarting`
and its ready line again; 5 crashes of one part within 60 s stop everything. Stop (Ctrl-C or
SIGTERM): the router, then suspend every RUNNING actor through the API so its state survives a
restart, then the atelet, worker, api-server, Temporal and PostgreSQL. When the atelet is not
running then, nothing is started: leftover sandboxes and network namespaces are listed with
the commands that remove them. A second Ctrl-C kills everything at once.

If `ate dev` itself is killed, every part but PostgreSQL gets SIGTERM from the kernel
(`PR_SET_PDEATHSIG`); PostgreSQL keeps running and the next start adopts it.
"""

import hashlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ate.cli.client import ApiClient, ApiError
from ate.dev.child import Child, ChildFailed, Interrupted, http_ok, log_line, read_tail
from ate.dev.leftovers import find_leftovers
from ate.dev.postgres import EmbeddedPostgres, redact_dsn
from ate.dev.restart import CrashCounter, RestartPolicy
from ate.dev.supervisor import Supervisor
from ate.dev.temporal import dev_server_child, port_open

SUSPEND_BUDGET = 30.0
"""Seconds `ate dev` spends suspending running actors when it stops."""
POSTGRES_CHECK_INTERVAL = 2.0
"""Seconds between two checks that the embedded PostgreSQL still runs."""


@dataclass
class DevConfig:
    """What `ate dev` runs and where.

    Attributes:
        data_dir: Holds postgres/, temporal.db, snapshots/, atelet/ and logs/.
        workers: Workers the atelet starts when no pool file is given.
        pool: A worker-pool YAML file for the atelet.
        example: Create atespace demo, template counter and actor c1 once ready.
        host: Address every part listens on.
        api_port: REST API port.
        router_port: Router port for actor traffic.
        atelet_port: atelet gRPC port.
        temporal_port: Temporal frontend port.
        ui_port: Temporal Web UI port.
        metrics_port_base: Prometheus ports: router at base, worker base+1, atelet base+85.
        image_root: Directory images are found under (the current directory).
        node: This node's name (also names the workers' network namespaces: two stacks on one
            machine need different nodes and subnets). Empty: `default_node(data_dir)`.
        subnet: IPv4 network the workers' addresses are cut from. Empty: `default_subnet(data_dir)`.
        ready_timeout: Seconds each part gets to become ready.
        restart: When a part that exited after being ready is started again.
    """

    data_dir: Path
    workers: int = 2
    pool: Path | None = None
    example: bool = False
    host: str = "127.0.0.1"
    api_port: int = 8080
    router_port: int = 8000
    atelet_port: int = 8085
    temporal_port: int = 7233
    ui_port: int = 8233
    metrics_port_base: int = 9000
    image_root: Path = field(default_factory=Path.cwd)
    node: str = ""
    subnet: str = ""
    ready_timeout: float = 60.0
    restart: RestartPolicy = field(default_factory=RestartPolicy)

    @property
    def api_url(self) -> str:
        """The REST API's URL."""
        return f"http://{self.host}:{self.api_port}"

    @property
    def logs(self) -> Path:
        """Directory of the parts' logs."""
        return self.data_dir / "logs"


def data_dir_hash(data_dir: Path) -> str:
    """4 hex digits of the SHA-256 of the absolute data dir: tells stacks on one machine apart."""
    absolute = str(data_dir.expanduser().resolve())
    return hashlib.sha256(absolute.encode()).hexdigest()[:4]


def default_node(data_dir: Path) -> str:
    """The node name of a stack by default: `<hostname>-<data_dir_hash>`."""
    return f"{socket.gethostname()}-{data_dir_hash(data_dir)}"


def default_subnet(data_dir: Path) -> str:
    """The worker subnet of a stack by default: `10.<88 + data_dir_hash mod 100>.0.0/16`."""
    return f"10.{88 + int(data_dir_hash(data_dir), 16) % 100}.0.0/16"


def tour(config: DevConfig) -> str:
    """The next commands of the 5-minute tour."""
    server = "" if config.api_port == 8080 and config.host == "127.0.0.1" else f" --server {config.api_url}"
    return "\n".join([
        "",
        "Try it (the 5-minute tour):",
        f"  ate{server} create atespace demo",
        f"  ate{server} create template counter -a demo -f examples/counter/template.yaml",
        f"  ate{server} create actor c1 -a demo --template counter",
        f"  curl -H 'ate-target-actor: demo/c1' http://{config.host}:{config.router_port}/",
        f"  ate{server} get actors -a demo",
        f"  ate{server} suspend actor c1 -a demo",
        f"Temporal UI: http://{config.host}:{config.ui_port}   logs: {config.logs}",
        "Stop with Ctrl-C.",
    ])  # fmt: skip


class DevStack:
    """Runs the whole stack in the foreground until stopped.

    Args:
        config: What to run.
        out: Prints one line (defaults to stdout, flushed).
    """

    def __init__(self, config: DevConfig, out: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.config.data_dir = config.data_dir.expanduser().resolve()
        self.config.node = config.node or default_node(self.config.data_dir)
        self.config.subnet = config.subnet or default_subnet(self.config.data_dir)
        self.out = out or (lambda line: print(line, flush=True))
        self._stop_requested = False
        self._stopping = False
        self.supervisor = Supervisor(
            lambda: self._stop_requested, ready_timeout=config.ready_timeout, policy=config.restart
        )
        self.postgres: EmbeddedPostgres | None = None
        self._pg_crashes = CrashCounter(config.restart)
        self._pg_up_since = 0.0
        self._pg_restart_at: float | None = None
        self._pg_checked = 0.0
        self.database_url = ""
        self.temporal_address = ""

    # Signals

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """First signal: stop in order. Second: kill everything now and exit."""
        if not self._stop_requested:
            self._stop_requested = True
            name = signal.Signals(signum).name
            self.out(f"ate: {name}: stopping (press Ctrl-C again to kill everything now)")
            return
        self.out("ate: killing everything")
        self.supervisor.kill_all()
        if self.postgres is not None:
            self.postgres.kill()
        os._exit(130)

    def _install_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    # Run

    def run(self) -> int:
        """Start everything, wait for a stop or a failure, stop everything.

        Returns:
            The exit status: 0 after a requested stop, 1 after a failure, 130 when
            interrupted during start-up.
        """
        self._install_signals()
        status = 0
        try:
            self._check_ports()
            self._start()
            self.out("ate: ready")
            if self.config.example:
                self._create_example()
            else:
                self.out(tour(self.config))
            status = self._watch()
        except ChildFailed as failure:
            self._report(failure)
            status = 1
        except Interrupted:
            status = 130
        finally:
            self._shutdown()
        return status

    def _check_ports(self) -> None:
        """Fail early when a port we need is taken (another `ate dev`, most likely)."""
        ports = {
            "api-server": self.config.api_port,
            "router": self.config.router_port,
            "atelet": self.config.atelet_port,
            "router metrics": self.config.metrics_port_base,
            "worker metrics": self.config.metrics_port_base + 1,
            "atelet metrics": self.config.metrics_port_base + 85,
        }
        if not os.environ.get("ATE_TEMPORAL_ADDRESS"):
            ports |= {"temporal": self.config.temporal_port, "temporal UI": self.config.ui_port}
        for part, port in ports.items():
            if port_open(self.config.host, port, timeout=0.3):
                raise ChildFailed(
                    part,
                    f"port {self.config.host}:{port} is already in use: is another 'ate dev' running? (ports can be moved: see 'ate dev --help')",
                    None,
                    [],
                )

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The project root (where ate/, api/, temporal_worker/, atelet/, router/ live) stays importable
        # from any working directory, whether or not the project is installed.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
        env.update({
            "ATE_DATABASE_URL": self.database_url,
            "ATE_TEMPORAL_ADDRESS": self.temporal_address,
            "PYTHONUNBUFFERED": "1",
        })  # fmt: skip
        return env

    def _ate(self, name: str, args: list[str], ready: Callable[[Child], bool], ready_message: str) -> Child:
        """A child running `python -m ate <name> <args>`."""
        argv = [sys.executable, "-m", "ate", name, *args]
        return Child(
            name,
            argv,
            self.config.logs / f"{name}.log",
            ready=ready,
            env=self._child_env(),
            cwd=self.config.image_root,
            ready_message=ready_message,
        )

    def _start_child(self, child: Child) -> None:
        """Start one part, wait until it is ready and print its ready line."""
        self.supervisor.start(child)
        self.out(child.ready_message)

    def _start(self) -> None:
        cfg = self.config
        data = cfg.data_dir
        for sub in ("logs", "snapshots", "atelet"):
            (data / sub).mkdir(parents=True, exist_ok=True)
        self._start_postgres()
        self._start_temporal()
        if self._stop_requested:
            raise Interrupted("start")

        snapshots = f"file://{data / 'snapshots'}"
        api = self._ate(
            "api-server",
            ["--host", cfg.host, "--port", str(cfg.api_port), "--snapshot-location", snapshots],
            http_ok(f"{cfg.api_url}/healthz"),
            f"api-server: ready on {cfg.api_url}",
        )
        self._start_child(api)

        metrics = cfg.metrics_port_base
        worker_args = ["--metrics-listen", f"{cfg.host}:{metrics + 1}"]
        self._start_child(
            self._ate("worker", worker_args, log_line("worker: ready"), "worker: ready (task queue ate-control)")
        )

        atelet_args = [
            "--node", cfg.node,
            "--listen", f"{cfg.host}:{cfg.atelet_port}",
            "--state-dir", str(data / "atelet"),
            "--snapshot-root", str(data / "snapshots"),
            "--image-root", str(cfg.image_root),
            "--api-server", cfg.api_url,
            "--metrics-listen", f"{cfg.host}:{metrics + 85}",
            "--subnet", cfg.subnet,
        ]  # fmt: skip
        atelet_args += ["--pool", str(cfg.pool.resolve())] if cfg.pool else ["--workers", str(cfg.workers)]
        what = f"pool {cfg.pool}" if cfg.pool else f"{cfg.workers} workers"
        ready = f"atelet: ready on {cfg.host}:{cfg.atelet_port} (node {cfg.node}, subnet {cfg.subnet}, {what})"
        self._start_child(self._ate("atelet", atelet_args, log_line("atelet: ready"), ready))

        router_args = [
            "--listen", f"{cfg.host}:{cfg.router_port}",
            "--api-server", cfg.api_url,
            "--metrics-listen", f"{cfg.host}:{metrics}",
        ]  # fmt: skip
        ready = f"router: ready on http://{cfg.host}:{cfg.router_port}"
        self._start_child(self._ate("router", router_args, log_line("router: ready"), ready))

    def _start_postgres(self) -> None:
        external = os.environ.get("ATE_DATABASE_URL")
        if external:
            self.database_url = external
            self.out(f"postgres: using ATE_DATABASE_URL ({redact_dsn(external)})")
            return
        self.postgres = EmbeddedPostgres(self.config.data_dir / "postgres")
        try:
            self.database_url = self.postgres.start()
        except Exception as exc:  # the wheel raises several kinds
            raise ChildFailed(
                "postgres", f"did not start: {exc}", self.postgres.log_path, read_tail(self.postgres.log_path)
            ) from exc
        self._pg_up_since = self._pg_checked = time.monotonic()
        self.out(self._postgres_ready_line())

    def _postgres_ready_line(self) -> str:
        socket_dir = self.postgres.socket_dir if self.postgres else None
        return f"postgres: ready (database ate, socket in {socket_dir})"

    def _start_temporal(self) -> None:
        external = os.environ.get("ATE_TEMPORAL_ADDRESS")
        if external:
            self.temporal_address = external
            self.out(f"temporal: using ATE_TEMPORAL_ADDRESS ({external})")
            return
        cfg = self.config
        child = dev_server_child(
            cfg.data_dir, cfg.logs / "temporal.log", ip=cfg.host, port=cfg.temporal_port, ui_port=cfg.ui_port
        )
        self.temporal_address = f"{cfg.host}:{cfg.temporal_port}"
        child.ready_message = f"temporal: ready on {self.temporal_address}, UI http://{cfg.host}:{cfg.ui_port}"
        self._start_child(child)

    def _watch(self) -> int:
        """Restart parts that exit until a stop is requested (0).

        Raises:
            ChildFailed: A part crashed too often (RestartPolicy.max_crashes within its window).
        """
        while not self._stop_requested:
            self.supervisor.tend(self.out)
            self._tend_postgres()
            time.sleep(0.3)
        return 0

    def _tend_postgres(self, now: float | None = None) -> None:
        """Restart the embedded PostgreSQL, by the same policy as the other parts, if it died.

        Raises:
            ChildFailed: It crashed too often.
        """
        pg = self.postgres
        if pg is None or self._stop_requested:
            return
        current = time.monotonic() if now is None else now
        if self._pg_restart_at is not None:
            if current < self._pg_restart_at:
                return
            self._pg_restart_at = None
            try:
                pg.restart()
            except Exception as exc:  # the wheel raises several kinds
                self.out(f"postgres: did not start: {exc}")
                self._postgres_crashed(current, 0.0)
                return
            self._pg_up_since = self._pg_checked = time.monotonic() if now is None else now
            self.out(self._postgres_ready_line())
            return
        if current - self._pg_checked < POSTGRES_CHECK_INTERVAL:
            return
        self._pg_checked = current
        if not pg.running():
            self._postgres_crashed(current, current - self._pg_up_since)

    def _postgres_crashed(self, now: float, up_for: float) -> None:
        pg = self.postgres
        assert pg is not None
        delay = self._pg_crashes.crashed(now, up_for)
        if delay is None:
            window = self.config.restart.window
            reason = f"exited {self._pg_crashes.recent} times within {window:.0f} s, giving up"
            raise ChildFailed("postgres", reason, pg.log_path, read_tail(pg.log_path))
        self.out("postgres: exited (code unknown: not our child), restarting")
        self._pg_restart_at = now + delay

    def _report(self, failure: ChildFailed) -> None:
        self.out(f"{failure.name}: {failure.reason}")
        if failure.log_path is not None:
            self.out(f"--- last {len(failure.tail)} lines of {failure.log_path} ---")
            for line in failure.tail:
                self.out(line)
            self.out("---")

    # Example

    def _create_example(self) -> None:
        """Create atespace demo, template counter and actor c1 unless they exist."""
        from ate.cli.manifest import ManifestError, load_template_spec

        path = self.config.image_root / "examples" / "counter" / "template.yaml"
        try:
            with ApiClient(self.config.api_url, timeout=30) as api:
                if not _exists(lambda: api.get_atespace("demo")):
                    api.create_atespace("demo")
                    self.out("example: atespace demo created")
                if not _exists(lambda: api.get_template("demo", "counter")):
                    self.out(f"example: creating template counter from {path} (waiting for Ready)")
                    spec = load_template_spec(path, "counter")
                    template = api.create_template("demo", "counter", spec, wait=True)
                    reason = f": {template.get('reason')}" if template.get("phase") == "Failed" else ""
                    self.out(f"example: template counter {template.get('phase')}{reason}")
                if not _exists(lambda: api.get_actor("demo", "c1")):
                    api.create_actor("demo", "c1", "counter", {})
                    self.out("example: actor c1 created")
        except (ApiError, ManifestError) as exc:
            self.out(f"example: {exc}")
            return
        self.out(
            f"example: try  curl -H 'ate-target-actor: demo/c1' http://{self.config.host}:{self.config.router_port}/"
        )

    # Stop

    def _suspend_running_actors(self) -> None:
        """Suspend every RUNNING actor through the API, within SUSPEND_BUDGET seconds."""
        deadline = time.monotonic() + SUSPEND_BUDGET
        api = ApiClient(self.config.api_url, timeout=5)
        try:
            running = [a for a in api.list_actors() if a.get("state") == "RUNNING"]
        except ApiError as exc:
            self.out(f"ate: cannot list actors to suspend them: {exc.message}")
            api.close()
            return
        if not running:
            api.close()
            return
        self.out(f"ate: suspending {len(running)} running actor(s) so their state survives a restart")

        def suspend(actor: dict[str, Any]) -> str:
            ref = f"{actor.get('atespace')}/{actor.get('name')}"
            remaining = max(deadline - time.monotonic(), 1.0)
            try:
                api.suspend_actor(
                    actor["atespace"], actor["name"], timeout_seconds=max(remaining - 2, 1.0), request_timeout=remaining
                )
            except ApiError as exc:
                return f"ate: could not suspend {ref}: {exc.message}"
            return f"ate: suspended {ref}"

        pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="suspend")
        futures = [pool.submit(suspend, actor) for actor in running]
        done, not_done = wait(futures, timeout=max(deadline - time.monotonic(), 0) + 1)
        for future in done:
            self.out(future.result())
        if not_done:
            self.out(f"ate: gave up suspending {len(not_done)} actor(s) after {SUSPEND_BUDGET:.0f} s")
        pool.shutdown(wait=False, cancel_futures=True)
        api.close()

    def _shutdown(self) -> None:
        """Stop everything that was started, in reverse order."""
        self._stopping = True
        self._stop_requested = True
        by_name = {c.name: c for c in self.supervisor.children}
        report = self.out
        if "router" in by_name:
            self.supervisor.stop(by_name["router"], report)
        atelet, api = by_name.get("atelet"), by_name.get("api-server")
        if atelet and self.supervisor.is_up(atelet) and api and self.supervisor.is_up(api):
            self._suspend_running_actors()
        atelet_down = atelet is not None and not atelet.running()
        self.supervisor.stop_all(report)
        if atelet_down:
            self._report_leftovers()
        if self.postgres is not None and self.postgres.running():
            self.postgres.stop()
            self.out("postgres: stopped")
        self.out("ate: stopped")

    def _report_leftovers(self) -> None:
        """The atelet is not running, so nothing cleaned up: list what is left, with commands."""
        found = find_leftovers(self.config.node, self.config.data_dir / "atelet")
        if not found:
            self.out("ate: the atelet was not running; no leftover sandboxes or network namespaces found")
            return
        self.out(
            "ate: the atelet was not running, so its sandboxes and network namespaces are left over"
            " (its next start removes them); to remove them now, run as root:"
        )
        for command in found.commands():
            self.out(f"  {command}")


def _exists(get: Callable[[], object]) -> bool:
    """Whether a GET succeeds; False on NotFound, other errors propagate."""
    try:
        get()
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True
