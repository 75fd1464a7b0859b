"""Entry point: ``python -m atelet`` (flags mirror ``AteletSettings``) or ``await serve(settings)``.

``serve`` creates the workers' namespaces, starts the egress proxy when it is on (``atelet.egress``),
serves gRPC over mutual TLS (``atelet.tls``), registers with the API server when one
is configured, prints ``atelet: ready on <listen> (<n> workers)``, and on SIGTERM/SIGINT or
cancellation stops cleanly: every sandbox it started is terminated and its namespaces deleted.
With ``drain_on_sigterm``, the first SIGTERM drains the node first (``atelet.drain``) while gRPC
keeps serving; a second SIGTERM (or SIGINT) stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import signal
import sys
from pathlib import Path

import grpc

from atelet import metrics
from atelet.drain import drain
from atelet.egress.proxy import EgressError, EgressProxy
from atelet.events import EventReporter
from atelet.image_prefetch import prefetch_loop
from atelet.local_endpoint import LocalEndpoint
from atelet.node import Node
from atelet.node_identity import NodeCredentials
from atelet.oplog import OperationLog
from atelet.output import OutputCollector
from atelet.pool import PoolError, default_pool, load_pools
from atelet.proto import atelet_pb2_grpc as pb_grpc
from atelet.pulls_api import ApiPullCredentials, ApiPullProgress
from atelet.registration import heartbeat_loop
from atelet.service import AteletService
from atelet.settings import AteletSettings
from atelet.snapshots.uris import SnapshotRootError
from atelet.tls import ControlPlaneOnly, NodeTlsFiles, TlsConfigError, server_credentials
from domain.pools import WorkerPoolSpec, parse_worker_pool

OUTPUT_FLUSH_SECONDS = 0.5
"""How long a checkpoint (and the atelet's stop) waits to ship the actor's last lines."""
PRUNE_SECONDS = 3600.0
"""How often the records of completed calls older than ``operation_record_seconds`` are removed."""


async def prune_loop(ops: OperationLog, older_than_seconds: float, interval: float = PRUNE_SECONDS) -> None:
    """``OperationLog.prune`` now and every ``interval`` seconds until cancelled; never raises."""
    while True:
        try:
            removed = await asyncio.to_thread(ops.prune, older_than_seconds)
            if removed:
                log.info("removed %d records of calls completed more than %.0f s ago", removed, older_than_seconds)
        except OSError as error:
            log.warning("the records of completed calls could not be pruned: %s", error)
        await asyncio.sleep(interval)


log = logging.getLogger("atelet")


def pools_of(settings: AteletSettings) -> list[WorkerPoolSpec]:
    """The worker pools of this atelet: the pool document, the pool file, or the default pool.

    Raises:
        PoolError: the document or file is malformed, or `advertise_worker_ip` is set for more
            than one worker.
    """
    if settings.pool_document:
        try:
            document = json.loads(settings.pool_document)
        except ValueError as error:
            raise PoolError(f"pool document: not JSON: {error}") from None
        pools = [parse_worker_pool(document, "pool document")]
    elif settings.pool_file:
        pools = load_pools(settings.pool_file)
    else:
        pools = [default_pool(settings.workers)]
    if settings.microvm_workers:
        if settings.pool_document or settings.pool_file:
            raise PoolError("--microvm-workers adds a pool beside the default one: put a pool of sandboxClass "
                            "microvm in the pool file instead")
        pools.append(WorkerPoolSpec(name="microvm", replicas=settings.microvm_workers, sandbox_class="microvm"))
    if settings.advertise_worker_ip and sum(p.replicas for p in pools) != 1:
        raise PoolError("advertise_worker_ip needs exactly one worker (a worker pod hosts one)")
    return pools


async def serve(settings: AteletSettings, ready: asyncio.Event | None = None) -> None:
    """Runs the atelet until SIGTERM/SIGINT or cancellation; ``ready`` is set once serving."""
    if settings.egress == "on" and (missing := settings.egress_missing()) is not None:
        raise EgressError(f"egress is on, but {missing}")
    node = Node(settings, pools_of(settings))
    tls = NodeTlsFiles.of(settings.tls_cert, settings.tls_key, settings.tls_ca)
    credentials = server_credentials(tls)
    identity = NodeCredentials(settings.node, tls.cert, tls.key)
    if settings.api_server:
        identity.token()  # a node key that cannot sign fails the start, not every heartbeat
    server = grpc.aio.server(interceptors=[ControlPlaneOnly(settings.node, settings.tls_allowed_clients)])
    pb_grpc.add_AteletServicer_to_server(AteletService(node), server)  # type: ignore[no-untyped-call]
    if server.add_secure_port(settings.listen, credentials) == 0:
        raise OSError(f"cannot listen on {settings.listen}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    async def drain_then_stop() -> None:
        try:
            await drain(node, settings, identity)
        finally:
            stop.set()

    def on_sigterm() -> None:
        if settings.drain_on_sigterm and not draining and not stop.is_set():
            draining.append(asyncio.create_task(drain_then_stop()))
        else:
            if draining:
                log.info("atelet: second SIGTERM, stopping now")
            stop.set()

    installed = []
    for sig, handler in ((signal.SIGTERM, on_sigterm), (signal.SIGINT, stop.set)):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
    heartbeat: asyncio.Task[None] | None = None
    prefetch: asyncio.Task[None] | None = None
    pruning = asyncio.create_task(prune_loop(node.ops, settings.operation_record_seconds))
    endpoint: LocalEndpoint | None = None
    egress: EgressProxy | None = None
    reporter = EventReporter(settings.api_server, settings.node, identity)
    node.on_exit = reporter.exited
    deliver = asyncio.create_task(reporter.run()) if settings.api_server else None
    output = OutputCollector(node.workers, node.layout, settings.node, settings.api_server, identity,
                             stdout=sys.stdout if settings.output_to_stdout else None)  # fmt: skip
    node.runner.before_launch = output.begin
    node.checkpoint_ops.flush_output = functools.partial(output.flush, timeout=OUTPUT_FLUSH_SECONDS)
    collecting = asyncio.create_task(output.run()) if not settings.hollow else None
    try:
        await node.start()
        if settings.local_endpoint_on and settings.api_server:
            endpoint = LocalEndpoint(settings.node, node.workers, settings.api_server, identity,
                                     settings.local_endpoint_port)  # fmt: skip
            await endpoint.start()
        if settings.egress_on:
            egress = EgressProxy(settings, node.workers, identity, node.state_dir)
            node.on_placed = egress.placed
            node.egress_active = egress.active_workers
            node.checkpoint_ops.egress_drain = egress.drain
            await egress.start()
        elif settings.egress != "off":
            log.info("egress proxy off: %s (actors have no egress)", settings.egress_missing())
        metrics.serve(settings.metrics_listen)
        await server.start()
        if settings.api_server:
            node.images.registry.credentials = ApiPullCredentials(settings.api_server, settings.node, identity)
            node.images.registry.progress = ApiPullProgress(settings.api_server, settings.node, identity)
            heartbeat = asyncio.create_task(heartbeat_loop(node, identity))
            if settings.image_prefetch_seconds > 0 and not settings.hollow:
                prefetch = asyncio.create_task(prefetch_loop(settings.api_server, settings.node, identity, node.images,
                                                             settings.image_prefetch_seconds))  # fmt: skip
        print(f"atelet: ready on {settings.listen} ({len(node.workers)} workers)", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("atelet: stopping")
    finally:
        for task in draining:
            task.cancel()
        if heartbeat is not None:
            heartbeat.cancel()
        if collecting is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(output.look(), OUTPUT_FLUSH_SECONDS)  # the last lines, once
            collecting.cancel()
        if prefetch is not None:
            prefetch.cancel()
        pruning.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        if endpoint is not None:
            await endpoint.stop()
        if egress is not None:
            node.on_placed = None
            node.egress_active = None
            node.checkpoint_ops.egress_drain = None
            await asyncio.shield(egress.stop())
        await asyncio.shield(_shutdown(server, node, reporter, deliver))


async def _shutdown(server: grpc.aio.Server, node: Node, reporter: EventReporter,
                    deliver: asyncio.Task[None] | None) -> None:
    await server.stop(grace=2)
    await node.stop()
    if deliver is not None:
        await reporter.flush(2.0)
        deliver.cancel()


def parse_args(argv: list[str] | None = None) -> AteletSettings:
    """Settings from the environment overridden by command-line flags."""
    parser = argparse.ArgumentParser(prog="atelet", description="ate node agent")
    parser.add_argument("--node")
    parser.add_argument("--listen")
    parser.add_argument("--advertise-address")
    parser.add_argument("--metrics-listen")
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--snapshot-root", type=Path, action="append", dest="snapshot_roots")
    parser.add_argument("--local-snapshot-root", type=Path,
                        help="where LOCAL (local:///) snapshots live (default: <state-dir>/local-snapshots)")
    parser.add_argument("--object-store-location", action="append", dest="object_store_locations",
                        help="an s3://, gs:// or az:// location snapshots may live in (repeatable; "
                             "credentials from the environment)")
    parser.add_argument("--object-store-retry-seconds", type=float)
    parser.add_argument("--snapshot-cache-dir", type=Path)
    parser.add_argument("--snapshot-cache-bytes", type=int,
                        help="bound of the cache of snapshots from object storage (default 10 GiB)")
    parser.add_argument("--image-root", type=Path, action="append", dest="image_roots")
    parser.add_argument("--pool", type=Path, dest="pool_file")
    parser.add_argument("--pool-document", help="one WorkerPool as JSON (instead of --pool)")
    parser.add_argument("--advertise-worker-ip", help="a worker pod's IP, forwarded into its one worker's namespace")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--microvm-workers", type=int,
                        help="workers of sandbox class microvm (pool microvm, QEMU VMs) beside the default pool")
    parser.add_argument("--microvm-kernel-dir", type=Path,
                        help="the guest kernel's dir (vmlinuz, lib/modules; default: scripts/guest-kernel.sh's)")
    parser.add_argument("--microvm-accelerator", choices=("auto", "kvm", "tcg"),
                        help="auto (the default: KVM when it runs guests here, else TCG), kvm or tcg")
    parser.add_argument("--microvm-durable-dir-mib", type=int, help="size of each durable dir's disk in a VM")
    parser.add_argument("--api-server")
    parser.add_argument("--heartbeat-seconds", type=float,
                        help="interval of the heartbeats to the API server (default 1; keep it well under "
                             "the api-server's --node-lease-seconds, default 4)")
    parser.add_argument("--subnet")
    parser.add_argument("--local-endpoint-port", type=int,
                        help="TCP port of the actors' local endpoint on each worker's gateway (default 8086; "
                             "sandboxes call it as http://169.254.100.1; 0 turns it off)")
    parser.add_argument("--egress", choices=("auto", "on", "off"),
                        help="the egress proxy (Squid): auto (the default: on when squid, an api-server and the "
                             "egress CA are there), on (required), off (actors have no egress)")
    parser.add_argument("--egress-squid", help="the Squid binary (default squid; Debian package squid-openssl)")
    parser.add_argument("--egress-proxy-port", type=int, help="Squid's explicit proxy port on each worker gateway (8087)")
    parser.add_argument("--egress-http-port", type=int, help="Squid's port for intercepted HTTP on each gateway (8088)")
    parser.add_argument("--egress-https-port", type=int, help="Squid's port for intercepted TLS on each gateway (8089)")
    parser.add_argument("--egress-ca-cert-file", type=Path,
                        help="PEM: the CA of the certificates Squid shows where it puts a credential in (the "
                             "actors trust it; the same on every node)")
    parser.add_argument("--egress-ca-key-file", type=Path, help="PEM: that CA's private key")
    parser.add_argument("--egress-upstream-ca-file", type=Path,
                        help="PEM: the CAs Squid trusts for its own TLS to upstreams (default: the system's)")
    parser.add_argument("--egress-system-roots-file", type=Path,
                        help="PEM: the roots the sandboxes' CA bundle starts from (default: the system's)")
    parser.add_argument("--egress-hosts-file", type=Path, help="a hosts file Squid resolves names with first")
    parser.add_argument("--egress-dns-nameserver", action="append", dest="egress_dns_nameservers",
                        help="a DNS server Squid asks (repeatable; default: /etc/resolv.conf's)")
    parser.add_argument("--egress-protected-network", action="append", dest="egress_protected_networks",
                        help="a network no actor reaches whatever its policy (repeatable; the node, its workers, "
                             "the API server, loopback, link-local and metadata addresses are always protected)")
    parser.add_argument("--egress-allowed-exception", action="append", dest="egress_allowed_exceptions",
                        help="a protected network policies may reach all the same (repeatable)")
    parser.add_argument("--egress-run-dir", type=Path,
                        help="the dir of Squid's own files (default /run/ate-egress/<node>)")
    parser.add_argument("--egress-policy-seconds", type=float,
                        help="how long a fetched policy is used (default 1: a change applies within a second)")
    parser.add_argument("--egress-drain-seconds", type=float,
                        help="how long a checkpoint waits for the actor's outbound connections to close before "
                             "cutting them (default 10)")
    parser.add_argument("--insecure-registry", action="append", dest="insecure_registries",
                        help="a registry (host[:port]) images may come from over plain HTTP or unverified TLS "
                             "(repeatable; those on loopback always may)")
    parser.add_argument("--image-cache-bytes", type=int,
                        help="the size the images pulled from registries may take on the node (default 20 GiB; "
                             "0: no bound); the least recently used go first")
    parser.add_argument("--image-prefetch-seconds", type=float,
                        help="how often the node pulls the registry images of the templates it can run, before "
                             "a resume needs them (default 60; 0: off)")
    parser.add_argument("--operation-record-seconds", type=float,
                        help="how long the record of a completed call (what a retry is answered) is kept "
                             "(default 7 days, at least 1 hour); pruned at start and hourly")
    parser.add_argument("--checkpoint-compression", choices=("auto", "none", "flate-best-speed"),
                        help="compress checkpoints' memory: auto (the default: not on disk, yes for object "
                             "storage), none, or flate-best-speed (runsc's own default)")
    parser.add_argument("--hollow", action="store_true", default=None)
    parser.add_argument("--drain-on-sigterm", action="store_true", default=None,
                        help="on SIGTERM, drain the node through the API server before stopping")
    parser.add_argument("--drain-deadline-seconds", type=float)
    parser.add_argument("--tls-cert", type=Path, help="PEM: the node's certificate chain (CN = the node name)")
    parser.add_argument("--tls-key", type=Path, help="PEM: its private key")
    parser.add_argument("--tls-ca", type=Path, help="PEM: the CA of the control plane's client certificate")
    parser.add_argument("--tls-allowed-client", action="append", dest="tls_allowed_clients",
                        help="a client certificate CN whose calls are served (repeatable; default ate-control-plane)")
    parser.add_argument("--log-level", default="INFO")
    args = vars(parser.parse_args(argv))
    logging.basicConfig(level=args.pop("log_level").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return AteletSettings(**{k: v for k, v in args.items() if v is not None})


def main(argv: list[str] | None = None) -> None:
    """``python -m atelet``."""
    try:
        settings = parse_args(argv)
        asyncio.run(serve(settings))
    except (PoolError, SnapshotRootError, TlsConfigError, EgressError) as exc:
        print(f"atelet: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass
