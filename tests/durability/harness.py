"""A stack whose parts are separate processes, each killable with SIGKILL and restartable.

Parts: PostgreSQL (embedded, or the server in ATE_DATABASE_URL with a database of our own),
the Temporal dev server (state in `--db-filename`, so it survives a restart), `python -m ate
api-server`, `python -m ate worker` and `python -m ate atelet` (real runsc, 2 workers, node `dur`,
subnet 10.91.0.0/16). Ports stay clear of `ate dev` (8xxx/9xxx/7233) and tests/e2e (2xxxx).
Every process gets `ATE_FAILPOINTS_DIR`, so a test can park an operation at a named step.

A Stack may run more than one atelet (`Stack(base, atelets=(...))`, see `AteletSpec`): each has
its own node name, ports, state dir and subnet, and shares the snapshot root and the image root.
Without `atelets`, the one atelet `DEFAULT_ATELET` (node `dur`, `--workers 2`), as before.

The processes themselves are `tests.durability.processes`; what the checks see of the node
without asking the product (snapshot files hashed, `runsc list`, `ip netns list`) is
`tests.durability.probes`. The Stack gives the rest of the independent view: Postgres rows read
with SQL, the atelet's Health over gRPC, Temporal's own record of each workflow. The atelets
serve mutual TLS with certificates of a CA in `<base>/tls` (`ate.dev.certificates`, as `ate dev`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from activities.atelet_tls import AteletClientTls
from ate.dev.certificates import ensure_local_certificates
from ate.dev.temporal import dev_server_argv, server_ready, temporal_binary
from atelet.proto import atelet_pb2 as pb
from atelet.proto import atelet_pb2_grpc as pb_grpc
from tests.credentials import BOOTSTRAP_ENV, BOOTSTRAP_HEADERS, BOOTSTRAP_TOKEN
from tests.durability.processes import REPO, Part, Postgres, fetch, http_ok, log_line

HOST = "127.0.0.1"
PORTS = {
    "api": 25080,
    "temporal": 25233,
    "ui": 26233,
    "atelet": 25085,
    "worker_metrics": 26001,
    "atelet_metrics": 26085,
    "router": 25000,
    "router_metrics": 26002,
}
"""Fixed ports, below the kernel's ephemeral range (32768-60999) so no outgoing connection holds one."""
NODE = "dur"
SUBNET = "10.91.0.0/16"
WORKERS = 2
NETNS_PREFIX = f"ate-{NODE}-"
TRANSITIONAL = {"RESUMING", "SUSPENDING", "REVERTING", "PAUSING"}


@dataclass(frozen=True)
class AteletSpec:
    """One atelet of a Stack: its node, ports, state dir (under the stack's base), subnet, pool.

    `labels` None: `--workers N` (the atelet's own pool `default`, unlabelled). Otherwise a
    WorkerPool file (`--pool`, atelet/pool.py) of one pool `default` with the same `workers`
    replicas and the default capacity (1 place, 2 CPU, 2Gi, gvisor) as `--workers`, plus `labels`.
    """

    part: str
    node: str
    port: int
    metrics_port: int
    state_dir: str
    subnet: str
    workers: int = WORKERS
    labels: dict[str, str] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def netns_prefix(self) -> str:
        return f"ate-{self.node}-"

    def pool_yaml(self) -> str:
        """The WorkerPool document for `labels` (JSON is YAML)."""
        return json.dumps({
            "apiVersion": "ate.dev/v1alpha1",
            "kind": "WorkerPool",
            "metadata": {"name": "default", "labels": self.labels or {}},
            "spec": {
                "replicas": self.workers,
                "sandboxClass": "gvisor",
                "capacity": {"places": 1, "cpu": "2", "memory": "2Gi"},
            },
        }, indent=1)  # fmt: skip


DEFAULT_ATELET = AteletSpec(
    part="atelet",
    node=NODE,
    port=PORTS["atelet"],
    metrics_port=PORTS["atelet_metrics"],
    state_dir="atelet",
    subnet=SUBNET,
)
"""The kill matrix's atelet: node `dur`, `--workers 2`, subnet 10.91.0.0/16."""

SECOND_ATELET = AteletSpec(
    part="atelet-dur2",
    node="dur2",
    port=25086,
    metrics_port=26086,
    state_dir="atelet-dur2",
    subnet="10.92.0.0/16",
)
"""A second node for multi-node cases (clear of 10.88-10.91/16 used by the other tests)."""


def labelled(spec: AteletSpec, **labels: str) -> AteletSpec:
    """`spec` with its workers in a pool file carrying `labels` (same workers and capacity)."""
    return replace(spec, labels=dict(labels))


class Stack:
    """The running parts plus the probes the durability checks use."""

    def __init__(
        self,
        base: Path,
        atelets: tuple[AteletSpec, ...] = (DEFAULT_ATELET,),
        api_args: tuple[str, ...] = (),
        router_args: tuple[str, ...] | None = None,
    ) -> None:
        """`api_args`: more flags of the api-server (e.g. `--unreachable-grace-seconds 30`);
        `router_args` not None: a router (`ate router`, port 25000) runs too, with these flags."""
        assert atelets, "a stack needs at least one atelet"
        self.base = base
        self.api_args = api_args
        self.router_args = router_args
        self.failpoints = base / "failpoints"
        self.snapshots = base / "snapshots"
        self.atelets = {spec.node: spec for spec in atelets}
        assert len(self.atelets) == len(atelets), "atelet node names must differ"
        self.primary = atelets[0]
        self.atelet_state = base / self.primary.state_dir
        self.logs = base / "logs"
        for d in (self.failpoints, self.snapshots, self.logs, *(self.state_dir(n) for n in self.atelets)):
            d.mkdir(parents=True, exist_ok=True)
        self.tls = ensure_local_certificates(base / "tls", list(self.atelets))
        control_plane = self.tls.control_plane
        self.client_tls = AteletClientTls(control_plane.cert, control_plane.key, control_plane.ca)
        self.postgres = Postgres(base / "postgres")
        self.api = f"http://{HOST}:{PORTS['api']}"
        self.temporal_address = f"{HOST}:{PORTS['temporal']}"
        self.router = f"http://{HOST}:{PORTS['router']}"
        self.parts: dict[str, Part] = {}

    # ---- processes ---------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "ATE_DATABASE_URL": self.postgres.dsn,
            "ATE_TEMPORAL_ADDRESS": self.temporal_address,
            "ATE_FAILPOINTS_DIR": str(self.failpoints),
            **BOOTSTRAP_ENV,
            "ATE_NODE_CA_FILE": str(self.tls.ca),
            "PYTHONPATH": os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO)) if p),
            "PYTHONUNBUFFERED": "1",
        })  # fmt: skip
        return env

    def start(self) -> None:
        self.postgres.start()
        env = self._env()
        ate = [sys.executable, "-m", "ate"]
        temporal = dev_server_argv(
            temporal_binary(),
            db_filename=self.base / "temporal.db",
            ip=HOST,
            port=PORTS["temporal"],
            ui_port=PORTS["ui"],
        )
        address = self.temporal_address
        specs = [
            ("temporal", temporal, lambda _p: server_ready(address)),
            (
                "api-server",
                [*ate, "api-server", "--host", HOST, "--port", str(PORTS["api"]),
                 "--snapshot-location", f"file://{self.snapshots}", *self.api_args],
                http_ok(f"{self.api}/healthz"),
            ),
            (
                "worker",
                [*ate, "worker", "--metrics-listen", f"{HOST}:{PORTS['worker_metrics']}",
                 "--atelet-client-tls-cert", str(self.tls.control_plane.cert),
                 "--atelet-client-tls-key", str(self.tls.control_plane.key),
                 "--atelet-client-tls-ca", str(self.tls.control_plane.ca)],
                log_line("worker: ready"),
            ),
            *((spec.part, self._atelet_argv(spec), log_line("atelet: ready")) for spec in self.atelets.values()),
        ]  # fmt: skip
        if self.router_args is not None:
            token = self.base / "router.token"
            token.write_text(BOOTSTRAP_TOKEN)
            specs.append((
                "router",
                [*ate, "router", "--listen", f"{HOST}:{PORTS['router']}", "--api-server", self.api,
                 "--api-token-file", str(token), "--database-url", self.postgres.dsn,
                 "--metrics-listen", f"{HOST}:{PORTS['router_metrics']}", *self.router_args],
                http_ok(f"http://{HOST}:{PORTS['router_metrics']}/metrics"),
            ))  # fmt: skip
        for name, argv, ready in specs:
            part = Part(name, argv, self.logs / f"{name}.log", ready, env)
            self.parts[name] = part
            part.start()
            part.wait_ready()
        self.wait_workers_registered()

    def _atelet_argv(self, spec: AteletSpec) -> list[str]:
        if spec.labels is None:
            workers = ["--workers", str(spec.workers)]
        else:
            pool = self.base / f"pool-{spec.node}.yaml"
            pool.write_text(spec.pool_yaml())
            workers = ["--pool", str(pool)]
        tls = self.tls.node(spec.node)
        return [sys.executable, "-m", "ate", "atelet", "--node", spec.node, "--listen", spec.address,
                "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca),
                "--state-dir", str(self.state_dir(spec.node)), "--snapshot-root", str(self.snapshots),
                "--image-root", str(REPO), "--api-server", self.api,
                "--metrics-listen", f"{HOST}:{spec.metrics_port}", "--subnet", spec.subnet,
                *workers, "--heartbeat-seconds", "1"]  # fmt: skip

    def state_dir(self, node: str = NODE) -> Path:
        """The state dir of `node`'s atelet (runsc root, local-snapshots, ...)."""
        return self.base / self.atelets[node].state_dir

    def stop(self) -> None:
        atelets = [spec.part for spec in self.atelets.values()]
        for name in ("router", *atelets, "worker", "api-server", "temporal"):
            part = self.parts.get(name)
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()
        self.postgres.stop()

    def kill_and_restart(self, name: str) -> float:
        """SIGKILL part `name` and start it again; returns the seconds it took to be ready."""
        started = time.monotonic()
        if name == "postgres":
            self.postgres.sigkill()
            self.postgres.start()
        else:
            part = self.parts[name]
            part.sigkill()
            part.start()
            part.wait_ready()
            if name in {spec.part for spec in self.atelets.values()}:
                self.wait_workers_registered()
        return time.monotonic() - started

    def wait_workers_registered(self, timeout: float = 30.0) -> None:
        """Every atelet's workers are registered and ACTIVE."""
        expected = {node: spec.workers for node, spec in self.atelets.items()}
        seen: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                items = self.rest("GET", "/v1/workers", timeout=5).json()["items"]
                seen = {node: sum(w["node"] == node and w["state"] == "ACTIVE" for w in items) for node in expected}
                if seen == expected:
                    return
            time.sleep(0.2)
        raise AssertionError(f"the atelets' workers did not register as ACTIVE: {seen} of {expected} per node")

    # ---- failpoints --------------------------------------------------------------------------

    def arm(self, name: str) -> None:
        (self.failpoints / f"{name}.reached").unlink(missing_ok=True)
        (self.failpoints / name).write_text("armed")

    def disarm(self, name: str) -> None:
        (self.failpoints / name).unlink(missing_ok=True)

    def wait_reached(self, name: str, timeout: float = 60.0) -> None:
        reached = self.failpoints / f"{name}.reached"
        deadline = time.monotonic() + timeout
        while not reached.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"failpoint {name} not reached within {timeout} s")
            time.sleep(0.05)

    def disarm_all(self) -> None:
        for f in self.failpoints.iterdir():
            f.unlink(missing_ok=True)

    # ---- REST --------------------------------------------------------------------------------

    def rest(self, method: str, path: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.api}{path}", timeout=timeout, headers=BOOTSTRAP_HEADERS, **kwargs)

    def in_background(self, method: str, path: str, body: dict[str, Any] | None, resend: bool) -> Request:
        request = Request(self, method, path, body, resend)
        request.start()
        return request

    # ---- Temporal ------------------------------------------------------------------------------

    def workflow_open(self, workflow_id: str) -> bool:
        """Whether the latest run of `workflow_id` is still running (False when there is none)."""
        from temporalio.client import Client, WorkflowExecutionStatus
        from temporalio.service import RPCError

        async def ask() -> bool:
            client = await Client.connect(self.temporal_address)
            try:
                described = await client.get_workflow_handle(workflow_id).describe()
            except RPCError as error:
                if "not found" in str(error).lower():
                    return False
                raise
            return described.status == WorkflowExecutionStatus.RUNNING

        return asyncio.run(asyncio.wait_for(ask(), 10))

    def terminate_workflow(self, workflow_id: str) -> None:
        from temporalio.client import Client

        async def go() -> None:
            client = await Client.connect(self.temporal_address)
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(workflow_id).terminate("durability test quarantine")

        asyncio.run(asyncio.wait_for(go(), 10))

    # ---- Postgres ------------------------------------------------------------------------------

    def sql(self, query: str, *args: Any) -> list[dict[str, Any]]:
        return asyncio.run(fetch(self.postgres.dsn, query, *args))

    # ---- atelet --------------------------------------------------------------------------------

    def health(self, node: str = NODE) -> pb.HealthResponse:
        with self.client_tls.sync_channel(self.atelets[node].address, node) as channel:
            stub = pb_grpc.AteletStub(channel)  # type: ignore[no-untyped-call]
            response: pb.HealthResponse = stub.Health(pb.HealthRequest(), timeout=10)
            return response

    def terminate_sandbox(self, worker: str, atespace: str, name: str, node: str = NODE) -> None:
        with self.client_tls.sync_channel(self.atelets[node].address, node) as channel:
            stub = pb_grpc.AteletStub(channel)  # type: ignore[no-untyped-call]
            stub.Terminate(
                pb.TerminateRequest(
                    operation_id=f"durability-quarantine/{uuid.uuid4()}",
                    worker=worker,
                    actor=pb.ActorRef(atespace=atespace, name=name),
                ),
                timeout=60,
            )


class Request(threading.Thread):
    """One REST call in the background; re-sent (as a client would) when the connection died."""

    def __init__(self, stack: Stack, method: str, path: str, body: dict[str, Any] | None, resend: bool) -> None:
        super().__init__(daemon=True)
        self.stack, self.method, self.path, self.body, self.resend = stack, method, path, body, resend
        self.responses: list[str] = []
        self.stop_resending = threading.Event()

    def run(self) -> None:
        while True:
            try:
                response = self.stack.rest(self.method, self.path, timeout=180, json=self.body)
                self.responses.append(f"{response.status_code} {response.text[:300]}")
                return
            except httpx.HTTPError as error:
                self.responses.append(f"transport error: {error!r}")
                if not self.resend or self.stop_resending.is_set():
                    return
                time.sleep(0.3)
