"""The node's egress proxy as one part: Squid, the decision socket, the policies, the guard.

``EgressProxy.start`` (once the workers' networks exist: Squid listens on their gateways)
computes the protected networks, makes Squid's run dir, opens the decision socket, installs the
guard on Squid's own connections and starts Squid; ``stop`` undoes it. ``decide`` is the policy
point: the worker whose address the connection comes from, the actor running there now, its
policy (``PolicySource``, at most ``egress_policy_seconds`` old), ``decision.decide``.

Credential headers: Squid adds a header only under a name its configuration lists
(``HeaderSlots``). ``placed`` (called when a Run or Restore starts on a worker) fetches the
actor's policy at once, so a header name new to the node is in Squid's configuration, and
Squid reconfigured, before the actor's first request. Should a request still come first (the
prefetch failed, or the policy gained a credential since), the helper that asks serves a
configuration without that name: the request is refused with "the egress proxy is loading
header ..., retry in a second", the name is added and Squid reconfigured, and the helpers it
then starts (which announce the new slot count) let the next attempt through with the header.
No request ever goes out without the header its host's credential asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from atelet import isolation, metrics
from atelet.egress import networks, rules
from atelet.egress.access_log import AccessLog
from atelet.egress.decision import Ask, Protection, Verdict, decide, refuse
from atelet.egress.decision_socket import DecisionSocket
from atelet.egress.header_slots import HeaderSlots
from atelet.egress.in_flight import cut, peers_in_flight
from atelet.egress.policies import FetchedPolicy, PolicySource, Refusal
from atelet.egress.squid import CERTGEN, Squid, prepare_run_dir, squid_ids
from atelet.egress.squid_config import SquidPlan, collapsed
from atelet.settings import AteletSettings
from atelet.workers import Worker
from domain.egress import ALWAYS_PROTECTED

log = logging.getLogger(__name__)


class EgressError(Exception):
    """The egress proxy cannot run as configured (``egress`` is ``on``): the message says why."""


def default_run_dir(node: str) -> Path:
    """``/run/ate-egress/<node>`` (the node name made path-safe)."""
    return Path("/run/ate-egress") / re.sub(r"[^A-Za-z0-9_.-]", "-", node)[:100]


class EgressProxy:
    """The egress proxy of one node.

    Args:
        settings: the atelet's settings (``egress_*``, ``api_server``, ``node``, ``subnet``).
        workers: the node's workers by name (their networks fixed; what runs on them read at each lookup).
        auth: the node's credentials towards the API server.
        state_dir: the atelet's state dir (``egress/``: squid.conf, the header names).

    Raises:
        EgressError: ``egress`` is ``on`` and something it needs is missing.
    """

    def __init__(self, settings: AteletSettings, workers: dict[str, Worker], auth: httpx.Auth,
                 state_dir: Path) -> None:  # fmt: skip
        missing = settings.egress_missing()
        if missing is not None:
            raise EgressError(f"egress proxy: {missing}")
        assert settings.api_server and settings.egress_ca_cert_file and settings.egress_ca_key_file
        self.settings = settings
        self.workers = workers
        self.by_address = {w.net.worker_ip: w for w in workers.values()}
        # the addresses of the sandboxes with allowed traffic since the last ``active_workers``
        self._marked: set[str] = set()
        self.dir = state_dir / "egress"
        self.run_dir = (settings.egress_run_dir or default_run_dir(settings.node)).resolve()
        self.slots = HeaderSlots(self.dir / "header-names.json")
        self.policies = PolicySource(settings.node, settings.api_server, auth, settings.egress_policy_seconds)
        self.protection = Protection()
        self.access = AccessLog(self.actor_of, self._marked.add)
        self.uid, self.gid = squid_ids()
        self.socket = DecisionSocket(self.run_dir / "decide.sock", self.decide, self.access.consume,
                                     {0, self.uid}, self.gid)  # fmt: skip
        self.squid = Squid(settings.egress_squid, self.dir / "squid.conf", self.plan)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconfigure: asyncio.Task[None] | None = None

    def plan(self) -> SquidPlan:
        """Squid's configuration as things are now (the header names known so far)."""
        s = self.settings
        assert s.egress_ca_cert_file is not None and s.egress_ca_key_file is not None
        return SquidPlan(
            node=s.node, gateways=tuple(w.net.host_ip for w in self.workers.values()),
            proxy_port=s.egress_proxy_port, http_port=s.egress_http_port, https_port=s.egress_https_port,
            run_dir=self.run_dir, ca_cert=s.egress_ca_cert_file.resolve(), ca_key=s.egress_ca_key_file.resolve(),
            upstream_ca=s.egress_upstream_ca_file.resolve(), relay=self.run_dir / "relay", socket=self.socket.path,
            certgen=CERTGEN, header_names=tuple(self.slots.names), protected=self.protection.protected,
            exceptions=self.protection.exceptions, dns_nameservers=tuple(s.egress_dns_nameservers),
        )  # fmt: skip

    async def start(self) -> None:
        """Starts the proxy (module doc).

        Raises:
            AteletError: INTERNAL when Squid or a rule cannot be started (named).
            OSError: the run dir or state dir cannot be written.
        """
        self.protection = await networks.protection(self.settings)
        self.dir.mkdir(parents=True, exist_ok=True)
        # Squid looks up the name of every client address, and of its own listening addresses at
        # start: the hosts file answers all of them, so that none is a DNS query to the network.
        clients = {w.net.worker_ip: f"ate-worker-{w.name}" for w in self.workers.values()}
        clients |= {w.net.host_ip: f"ate-gateway-{w.name}" for w in self.workers.values()}
        await asyncio.to_thread(prepare_run_dir, self.plan(), self.settings.egress_hosts_file, clients)
        await self.socket.start()
        guarded = collapsed([*ALWAYS_PROTECTED, *self.protection.protected])
        await rules.install_guard(self.settings.node, self.uid, self.protection.exceptions, isolation.families(),
                                  guarded)  # fmt: skip
        await rules.remove_drain_rules(self.settings.node)
        await self.squid.start()

    async def stop(self) -> None:
        """Stops Squid, the socket and the guard; removes the run dir."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.squid.stop()
        await self.socket.stop()
        await self.policies.close()
        await rules.remove_guard(self.settings.node, self.uid, isolation.families())
        await asyncio.to_thread(shutil.rmtree, self.run_dir, True)  # regenerated at each start

    def actor_of(self, address: str) -> str:
        """``atespace/name`` of the actor on the worker with ``address``, or ``-``."""
        worker = self.by_address.get(address)
        return f"{worker.actor[0]}/{worker.actor[1]}" if worker is not None and worker.actor else "-"

    async def active_workers(self) -> set[str]:
        """The workers whose sandbox had outbound traffic since the last call (a transaction
        Squid logged as allowed) or has some in flight now (``atelet.egress.in_flight``): the
        heartbeat reports their actors as active, so an idle policy does not act on an actor
        waiting for an upstream's answer."""
        addresses = self._marked | await peers_in_flight(self.ports)
        self._marked = set()
        return {self.by_address[a].name for a in addresses if a in self.by_address}

    @property
    def ports(self) -> tuple[int, int, int]:
        """Squid's (explicit proxy, intercepted HTTP, intercepted TLS) ports."""
        s = self.settings
        return s.egress_proxy_port, s.egress_http_port, s.egress_https_port

    @contextlib.asynccontextmanager
    async def drain(self, worker: str) -> AsyncIterator[tuple[float, int]]:
        """Around a checkpoint of ``worker``'s sandbox: refuses its new connections to Squid
        (``rules.block_new``), waits until it holds none (its outbound requests answered), up to
        ``egress_drain_seconds``, then cuts what is left (``in_flight.cut``), so no snapshot holds
        a connection half done; yields (seconds waited, connections cut) for the checkpoint to
        run, and lets new connections through again after it."""
        address = self.workers[worker].net.worker_ip
        started = time.monotonic()
        deadline = started + self.settings.egress_drain_seconds
        await rules.block_new(self.settings.node, address, self.ports)
        try:
            count = 0
            while address in await peers_in_flight(self.ports):
                if time.monotonic() >= deadline:
                    count = await cut(self.ports, address)
                    log.warning("egress: %d outbound connection(s) of worker %s still open after %.1f s: cut for its "
                                "checkpoint", count, worker, time.monotonic() - started)  # fmt: skip
                    metrics.observe_egress_cut(self.actor_of(address), count)
                    break
                await asyncio.sleep(0.05)
            yield time.monotonic() - started, count
        finally:
            await rules.unblock_new(self.settings.node, address, self.ports)

    def placed(self, worker: str, actor: tuple[str, str]) -> None:
        """``actor`` is being started on ``worker``: fetch its policy now (module doc)."""
        task = asyncio.create_task(self._prefetch(worker, actor))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prefetch(self, worker: str, actor: tuple[str, str]) -> None:
        fetched = await self.policies.get(worker, actor)
        if isinstance(fetched, FetchedPolicy):
            self._learn(fetched)

    def _learn(self, fetched: FetchedPolicy) -> None:
        """Adds the policy's header names; reconfigures Squid (once at a time) when one is new."""
        if self.slots.add([c.header for c in fetched.policy.credentials]):
            if self._reconfigure is None or self._reconfigure.done():
                self._reconfigure = asyncio.create_task(self.squid.reconfigure())
            else:  # one in flight already read the older names: another after it
                previous = self._reconfigure

                async def again() -> None:
                    with contextlib.suppress(Exception):
                        await previous
                    await self.squid.reconfigure()

                self._reconfigure = asyncio.create_task(again())

    async def decide(self, ask: Ask, slots: int) -> Verdict:
        """The verdict on one lookup of a helper serving a configuration of ``slots`` header slots."""
        destination = f"{ask.sni or ask.host or '?'}:{ask.port}"
        worker = self.by_address.get(ask.client)
        if worker is None:
            return refuse("-", destination, "not a sandbox", f"{ask.client} is not a worker of node {self.settings.node}")
        if worker.actor is None or worker.state != "running":
            return refuse("-", destination, "no actor", f"no actor runs on worker {worker.name} now")
        actor = f"{worker.actor[0]}/{worker.actor[1]}"
        fetched = await self.policies.get(worker.name, worker.actor)
        if isinstance(fetched, Refusal):
            return refuse(actor, destination, fetched.rule, fetched.message)
        self._learn(fetched)
        return decide(ask, actor, fetched.policy, self.protection, fetched.values, self.slots.slots(slots))
