"""The order of `ate dev`: PostgreSQL, Temporal, api-server, worker, atelet, router.

Start: the local CA and certificates of the atelet's mutual TLS (`ate.dev.certificates`, in
`<data dir>/tls`, kept while still good), then each part in turn, each waited for (60 s) before
the next; then `ate: ready`.
Run: watch the parts; a part (PostgreSQL and Temporal too) that exits after it was ready is
restarted after 1 s, 2 s, 4 s... (at most 30 s), printing `<part>: exited (<code>), restarting`
and its ready line again; 5 crashes of one part within 60 s stop everything. Stop (Ctrl-C or
SIGTERM): the router, then suspend every RUNNING actor through the API so its state survives a
restart, then the atelet, worker, api-server, Temporal and PostgreSQL. When an actor stays RUNNING
(a part a suspend needs is down, or a suspend failed) the atelet is killed (SIGKILL), not stopped:
its clean stop ends every sandbox, and the next start adopts them instead. When the atelet is not
running then, nothing is started: leftover sandboxes and network namespaces are listed with
the commands that remove them. A second Ctrl-C kills everything at once.

If `ate dev` itself is killed, the kernel kills the atelet (SIGKILL: its sandboxes keep running
for the next start to adopt, memory included) and sends every other part but PostgreSQL SIGTERM
(`PR_SET_PDEATHSIG`); PostgreSQL keeps running and the next start adopts it.

This module owns that order and the signals. What each part runs is `ate.dev.parts`; the
embedded PostgreSQL's restarts are `ate.dev.postgres_watch`'s, the other parts'
`ate.dev.supervisor`'s; the stop's suspends are `ate.dev.suspend`'s.
"""

import fcntl
import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import TextIO

from ate.cli.client import ApiError
from ate.dev import parts
from ate.dev.certificates import ensure_local_certificates
from ate.dev.child import Child, ChildFailed, Interrupted
from ate.dev.config import DevConfig
from ate.dev.credentials import CONTEXT, DevCredentials
from ate.dev.example import create_example, tour
from ate.dev.leftovers import report_leftovers
from ate.dev.object_store import LocalObjectStore
from ate.dev.postgres import redact_dsn
from ate.dev.postgres_watch import PostgresWatch
from ate.dev.supervisor import Supervisor
from ate.dev.suspend import suspend_running_actors
from ate.dev.temporal import port_open


class DevStack:
    """Runs the whole stack in the foreground until stopped.

    Args:
        config: What to run; its data dir is made absolute, its node and subnet filled in.
        out: Prints one line (defaults to stdout, flushed).
    """

    def __init__(self, config: DevConfig, out: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.config.resolve()
        self.out = out or (lambda line: print(line, flush=True))
        self._stop_requested = False
        self._stopping = False
        self.supervisor = Supervisor(
            lambda: self._stop_requested, ready_timeout=config.ready_timeout, policy=config.restart
        )
        self.postgres = PostgresWatch(
            self.config.data_dir / "postgres", config.restart, self.out, lambda: self._stop_requested
        )
        self.credentials = DevCredentials(self.config.data_dir)
        self._lock: TextIO | None = None  # <data dir>/ate-dev.lock, held while this runs
        self.database_url = ""
        self.temporal_address = ""
        self.object_store = (
            LocalObjectStore(self.config.data_dir / "object-store", config.object_store_port)
            if config.object_store
            else None
        )

    # Signals

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """First signal: stop in order. Second: kill everything now and exit."""
        if not self._stop_requested:
            self._stop_requested = True
            name = signal.Signals(signum).name
            self.out(f"ate: {name}: stopping (press Ctrl-C again to kill everything now)")
            return
        self.out("ate: killing everything; the sandboxes of running actors keep running, and the next 'ate dev' "
                 "adopts them with their memory")
        self.supervisor.kill_all()
        if self.object_store is not None:
            self.object_store.kill()
        self.postgres.kill()
        os._exit(130)

    def _install_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    # Run

    def run(self) -> int:
        """Start everything, wait for a stop or a failure, stop everything.

        Returns:
            The exit status: 0 after a requested stop, 1 after a failure (or another `ate dev`
            on the same data dir: nothing is started or stopped then), 130 when interrupted
            during start-up.
        """
        holder = self._lock_data_dir()
        if holder is not None:
            self.out(
                f"ate: another 'ate dev' (pid {holder}) runs on the data dir {self.config.data_dir}: stop it first, "
                "or give this one another --data-dir (and other ports: see 'ate dev --help')"
            )
            return 1
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

    def _lock_data_dir(self) -> str | None:
        """Hold `<data dir>/ate-dev.lock` (an exclusive flock, released when this process ends,
        however it ends) so that a second `ate dev` cannot share the data dir: it would adopt
        this one's PostgreSQL and sandboxes, run a second Temporal on its database, and stop them
        when it stops. Returns None once held, else the pid of the holder as it wrote it."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.config.data_dir / "ate-dev.lock"
        self._lock = open(path, "a+")  # held for the life of the process
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            return self._lock.read().strip() or "unknown"
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()
        return None

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

    def _start_child(self, child: Child) -> None:
        """Start one part, wait until it is ready and print its ready line."""
        self.supervisor.start(child)
        self.out(child.ready_message)

    def _start(self) -> None:
        for sub in ("logs", "snapshots", "atelet"):
            (self.config.data_dir / sub).mkdir(parents=True, exist_ok=True)
        self._ensure_certificates()
        self._start_postgres()
        self._start_temporal()
        store_env = self._start_object_store()
        if self._stop_requested:
            raise Interrupted("start")
        env = parts.child_env(self.database_url, self.temporal_address) | store_env
        env["ATE_BOOTSTRAP_TOKEN_FILE"] = str(self.credentials.ensure_bootstrap())
        env["ATE_NODE_CA_FILE"] = str(self.config.tls_dir / "ca.crt")
        # The key ring of secrets is the api-server's alone.
        keys = {"ATE_SECRET_KEYS_FILE": str(self.credentials.ensure_secret_keys())}
        self._start_child(parts.api_server(self.config, env | keys))
        self._start_credentials()
        env["ATE_ROUTER_API_TOKEN_FILE"] = str(self.credentials.token_file("router"))
        # The egress CA is the atelet's alone (its proxy signs with it; the sandboxes trust it).
        egress_cert, egress_key = self.credentials.ensure_egress_ca()
        egress = {"ATE_ATELET_EGRESS_CA_CERT_FILE": str(egress_cert), "ATE_ATELET_EGRESS_CA_KEY_FILE": str(egress_key)}
        self._start_child(parts.worker(self.config, env))
        self._start_child(parts.atelet(self.config, env | egress))
        self._start_child(parts.router(self.config, env))

    def _start_credentials(self) -> None:
        """The local user's admin token and the router's token; the ate config's context."""
        try:
            self.credentials.ensure_tokens(self.config.api_url)
        except ApiError as error:
            raise ChildFailed("credentials", f"cannot create the local tokens: {error.message}", None, []) from None
        path = self.credentials.write_config(self.config.api_url)
        self.out(
            f"credentials: admin token in {self.credentials.admin_file}; `ate` uses it "
            f"(context {CONTEXT} in {path})"
        )

    def _ensure_certificates(self) -> None:
        """The local CA, the control plane's and this node's certificates (kept while still good)."""
        try:
            ensure_local_certificates(self.config.tls_dir, [self.config.node])
        except (OSError, ValueError) as error:
            raise ChildFailed("tls", f"cannot make the atelet's certificates in {self.config.tls_dir}: {error}", None, []) from None
        self.out(f"tls: atelet mutual TLS with the local CA in {self.config.tls_dir}")

    def _start_postgres(self) -> None:
        external = os.environ.get("ATE_DATABASE_URL")
        if external:
            self.database_url = external
            self.out(f"postgres: using ATE_DATABASE_URL ({redact_dsn(external)})")
            return
        self.database_url = self.postgres.start()

    def _start_object_store(self) -> dict[str, str]:
        """Start the local S3 server when asked; returns the AWS_* variables that point the
        atelet at it (its default credential chain reads them)."""
        if self.object_store is None:
            return {}
        try:
            endpoint = self.object_store.start()
        except RuntimeError as error:
            raise ChildFailed("object-store", str(error), self.object_store.data_dir / "weed.log", []) from None
        self.out(f"object-store: ready on {endpoint.url} (SeaweedFS; snapshots in {self.config.snapshot_location})")
        return endpoint.environment()

    def _start_temporal(self) -> None:
        external = os.environ.get("ATE_TEMPORAL_ADDRESS")
        if external:
            self.temporal_address = external
            self.out(f"temporal: using ATE_TEMPORAL_ADDRESS ({external})")
            return
        child = parts.temporal_server(self.config)
        self.temporal_address = f"{self.config.host}:{self.config.temporal_port}"
        self._start_child(child)

    def _watch(self) -> int:
        """Restart parts that exit until a stop is requested (0).

        Raises:
            ChildFailed: A part crashed too often (RestartPolicy.max_crashes within its window).
        """
        while not self._stop_requested:
            self.supervisor.tend(self.out)
            self.postgres.tend()
            time.sleep(0.3)
        return 0

    def _report(self, failure: ChildFailed) -> None:
        self.out(f"{failure.name}: {failure.reason}")
        if failure.log_path is not None:
            self.out(f"--- last {len(failure.tail)} lines of {failure.log_path} ---")
            for line in failure.tail:
                self.out(line)
            self.out("---")

    def _create_example(self) -> None:
        """Create atespace demo, template counter and actor c1 unless they exist."""
        create_example(self.config, self.out)

    # Stop

    def _suspend_all(self, by_name: dict[str, Child]) -> bool:
        """Suspend the RUNNING actors when the parts a suspend needs are up; True when none is
        left RUNNING. A suspend is a workflow: without the api-server, the worker or Temporal it
        cannot run, and trying would only spend the whole suspend budget."""
        down = [name for name in ("api-server", "worker", "temporal")
                if name in by_name and not self.supervisor.is_up(by_name[name])]
        if down:
            self.out(f"ate: not suspending the running actors: {' and '.join(down)} "
                     f"{'is' if len(down) == 1 else 'are'} down")
            return False
        return suspend_running_actors(self.config.api_url, self.out, self.credentials.admin_token())

    def _shutdown(self) -> None:
        """Stop everything that was started, in reverse order."""
        self._stopping = True
        self._stop_requested = True
        by_name = {c.name: c for c in self.supervisor.children}
        report = self.out
        if "router" in by_name:
            self.supervisor.stop(by_name["router"], report)
        atelet = by_name.get("atelet")
        atelet_down = atelet is not None and not atelet.running()
        if atelet is not None and self.supervisor.is_up(atelet) and not self._suspend_all(by_name):
            # A clean stop of the atelet ends every sandbox, and with them the memory of the
            # actors still RUNNING: SIGKILL leaves the sandboxes for the next start to adopt.
            atelet_down = not atelet.running()  # it may have died during the suspends
            if not atelet_down:
                self.supervisor.kill(atelet)
                self.out("atelet: killed, leaving the sandboxes of the actors still RUNNING; the next `ate dev` "
                         "adopts them with their memory")
        self.supervisor.stop_all(report)
        if atelet_down:
            report_leftovers(self.config.node, self.config.data_dir / "atelet", self.out)
        if self.object_store is not None and self.object_store.process is not None:
            self.object_store.stop()
            self.out("object-store: stopped")
        self.postgres.stop()
        self.out("ate: stopped")
