"""Settings of the atelet, from environment variables ``ATE_ATELET_*`` or ``python -m atelet`` flags.

List settings (``snapshot_roots``, ``image_roots``, ``object_store_locations``) are JSON in the environment, e.g.
``ATE_ATELET_SNAPSHOT_ROOTS='["/var/lib/ate/snapshots"]'``.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain.liveness import HEARTBEAT_SECONDS

SYSTEM_ROOTS = Path("/etc/ssl/certs/ca-certificates.crt")
"""Debian's bundle of the system's trusted CAs (package ca-certificates)."""


class AteletSettings(BaseSettings):
    """Everything the atelet needs to start.

    - ``node``: node name (default: hostname), used in registration and namespace names.
    - ``listen`` / ``advertise_address``: gRPC ``host:port`` to bind / to tell the API server
      (default: ``listen``).
    - ``metrics_listen``: ``host:port`` of the Prometheus endpoint; empty disables it.
    - ``state_dir``: runsc root, image cache, bundles, actor dirs, logs and operation records.
    - ``snapshot_roots``: the only directories ``file://`` snapshot URIs may point into.
    - ``local_snapshot_root``: where LOCAL snapshots (``local:///<path>`` URIs, e.g. a paused
      actor's checkpoint) live on this node's own disk; default ``<state_dir>/local-snapshots``
      (``local_snapshot_dir``). ``file://`` URIs cannot reach into it unless it is also one of the
      ``snapshot_roots``; it must not contain a snapshot root.
    - ``object_store_locations``: the only object storage locations (``s3://bucket/prefix``,
      ``gs://...``, ``az://...``) snapshot URIs may point into; empty: object storage is off.
      Credentials and endpoints come from the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``),
      never from a URI. ``object_store_retry_seconds``: how long one call to a failing store
      is retried (exponential backoff) before it fails UNAVAILABLE.
    - ``snapshot_cache_dir`` / ``snapshot_cache_bytes``: the node's cache of snapshots from object
      storage (default ``<state_dir>/snapshot-cache``, 10 GiB; least recently used out first).
    - ``image_cache_bytes``: the size the layouts pulled from registries may take on the node
      (default 20 GiB; 0: no bound); the least recently used go first (``atelet.registry``).
    - ``image_prefetch_seconds``: how often the node asks the API for its templates' registry
      images and pulls those it lacks, so a first resume does not wait (``atelet.image_prefetch``;
      default 60; 0: off; needs ``api_server``).
    - ``operation_record_seconds``: how long the record of a completed call (``atelet.oplog``:
      what a retry of the same operation ID is answered) is kept (default 7 days: far beyond any
      retry of the control plane, whose atelet calls give up within 30 minutes); pruned at start
      and hourly, so the node's state dir does not grow with every resume and suspend.
    - ``insecure_registries``: registries (``host[:port]``) images may be pulled from over plain
      HTTP or unverified TLS, besides those on loopback (``atelet.registry``).
    - ``image_roots``: the only directories ``oci:<path>:<tag>`` image layouts may lie in;
      a relative image path is taken relative to each root in turn.
    - ``pool_file``: WorkerPool YAML; without it, one pool ``default`` of ``workers`` workers,
      and ``microvm_workers`` workers of a pool ``microvm`` (sandbox class microvm) after them.
    - ``microvm_kernel_dir``: the microvm guest kernel (``vmlinuz``, ``lib/modules/``); default
      where scripts/guest-kernel.sh puts it (``$XDG_CACHE_HOME`` or ``~/.cache``, ``ate/guest-kernel``).
    - ``microvm_accelerator``: ``auto`` (KVM when it runs guests here, else TCG), ``kvm`` or ``tcg``.
    - ``microvm_durable_dir_mib``: the size of the disk each durable dir of a VM gets (MiB).
    - ``pool_document``: one WorkerPool as JSON (what ate-controller gives a worker pod), instead
      of a file; its replicas are this atelet's workers.
    - ``advertise_worker_ip``: a worker pod's IP: registered as the worker's address and
      forwarded (every TCP port but the atelet's own) into the worker's network namespace
      (``atelet.forwarding``). Needs exactly one worker.
    - ``api_server``: URL of ate-api-server; when set, register and heartbeat every
      ``heartbeat_seconds`` (default 1 s; the api-server's node lease, default 4 s, must be a
      few of these: domain/liveness.py).
    - ``local_endpoint_port``: the TCP port of the node's local endpoint on each worker's gateway
      (``atelet.local_endpoint``; sandboxes call it as ``http://169.254.100.1``); served when
      ``api_server`` is set; 0 turns it off.
    - ``egress``: the node's egress proxy (``atelet.egress``: Squid, applying each actor's egress
      policy): ``auto`` (the default) runs it when the ``egress_squid`` binary is found, an
      ``api_server`` is set and the egress CA is given; ``on`` requires all three (the start fails
      naming what is missing); ``off``: actors have no egress, as without a policy.
    - ``egress_squid``: the Squid binary (Debian's squid-openssl: SslBump needs OpenSSL).
    - ``egress_proxy_port`` / ``egress_http_port`` / ``egress_https_port``: Squid's TCP ports on
      each worker's gateway: the explicit proxy (``http://169.254.100.1:3128`` is taken there), and
      the intercepted plain HTTP (port 80) and TLS (port 443) of sandboxes that ignore the proxy.
    - ``egress_ca_cert_file`` / ``egress_ca_key_file``: PEM, the CA whose certificates Squid shows an
      actor where it terminates its TLS to put a credential in (the actor trusts it: ``atelet.egress``).
      The same CA on every node of a cluster, so an actor restored on another node keeps trusting it.
    - ``egress_upstream_ca_file``: PEM bundle of the CAs Squid trusts for its own TLS to an upstream
      it terminated the actor's TLS for (default: the system's).
    - ``egress_system_roots_file``: PEM bundle the sandbox's CA bundle starts from (the egress CA is
      added); default the system's.
    - ``egress_hosts_file``: a hosts file Squid resolves names with before DNS (default /etc/hosts).
    - ``egress_dns_nameservers``: the DNS servers Squid asks (default: /etc/resolv.conf's).
    - ``egress_protected_networks``: networks no actor reaches whatever its policy says, beyond
      those always protected (loopback, link-local, metadata, this node's own addresses, the
      workers' subnet, the API server's addresses): e.g. the control plane's, other nodes'.
    - ``egress_allowed_exceptions``: networks an operator lets policies reach even if protected.
    - ``egress_run_dir``: the dir of what Squid's own user (proxy) reads and writes: its helpers'
      socket, its certificate cache, its logs (default ``/run/ate-egress/<node>``; every parent
      must be searchable by that user).
    - ``egress_policy_seconds``: how long a fetched policy is used before it is fetched again (a
      policy change applies to the connections made that long after it, at most).
    - ``egress_drain_seconds``: how long a checkpoint waits for the actor's outbound connections
      through the proxy to close (its requests answered) before it cuts them (the router's
      ``--drain-timeout`` for inbound requests; default 10).
    - ``subnet``: IPv4 network the workers' /30 links are cut from (worker i gets the i-th /30).
    - ``hollow``: benchmark mode — accept calls, run no sandbox. Never the default.
    - ``output_to_stdout``: write every line the actors print to the atelet's stdout as JSON with
      its labels (``atelet.output``), for a cluster's log collector; default on.
    - ``runsc``: the runsc binary.
    - ``checkpoint_compression``: whether a checkpoint's memory is compressed: ``auto`` (the
      default) leaves a snapshot kept on disks (``file://``, ``local://``) uncompressed, since
      a restore reads it faster that way, and compresses one bound for object storage, where the
      network is slower than the inflate; ``none`` and ``flate-best-speed`` (runsc's own default)
      choose for both. A restore reads either. A ``local://`` snapshot copied to object storage
      later (async suspend, suspend from PAUSED, detach) is uploaded as it was written.
    - ``drain_on_sigterm``: on SIGTERM, ask the API server to drain this node (it suspends the
      node's actors) and stop only once no sandbox runs or ``drain_deadline_seconds`` (+10 s)
      passed; a second SIGTERM stops at once. Off by default (``ate dev`` stops the atelet itself).
    - ``tls_cert`` / ``tls_key``: PEM files of the node's certificate chain (leaf first: CN and SAN
      DNS name = ``node``) and its private key: the gRPC server's certificate, and the key that
      signs the node's registrations (``atelet.node_identity``). Required: gRPC is served only
      over mutual TLS (``atelet.tls``). Re-read when they change.
    - ``tls_ca``: PEM file of the CA that issued the control plane's client certificate; a client
      whose certificate it did not issue fails the handshake.
    - ``tls_allowed_clients``: the client certificate CNs whose calls are served (the control
      plane's); any other certificate of the CA is refused with PERMISSION_DENIED.
    """

    model_config = SettingsConfigDict(env_prefix="ATE_ATELET_")

    node: str = Field(default_factory=socket.gethostname)
    listen: str = "127.0.0.1:8085"
    advertise_address: str | None = None
    metrics_listen: str = "127.0.0.1:9085"
    state_dir: Path = Path(".ate/atelet")
    snapshot_roots: list[Path] = Field(default_factory=lambda: [Path(".ate/snapshots")])
    local_snapshot_root: Path | None = None
    object_store_locations: list[str] = Field(default_factory=list)
    object_store_retry_seconds: float = Field(default=15.0, gt=0)
    snapshot_cache_dir: Path | None = None
    snapshot_cache_bytes: int = Field(default=10 * 2**30, ge=0)
    image_roots: list[Path] = Field(default_factory=lambda: [Path.cwd()])
    insecure_registries: list[str] = Field(default_factory=list)
    image_cache_bytes: int = Field(default=20 * 2**30, ge=0)
    image_prefetch_seconds: float = Field(default=60.0, ge=0)
    operation_record_seconds: float = Field(default=7 * 86400.0, ge=3600)
    pool_file: Path | None = None
    pool_document: str = ""
    advertise_worker_ip: str | None = None
    workers: int = Field(default=2, ge=0, le=1000)
    microvm_workers: int = Field(default=0, ge=0, le=1000)
    microvm_kernel_dir: Path | None = None
    microvm_accelerator: Literal["auto", "kvm", "tcg"] = "auto"
    microvm_durable_dir_mib: int = Field(default=256, ge=8, le=1 << 20)
    api_server: str | None = None
    heartbeat_seconds: float = Field(default=HEARTBEAT_SECONDS, gt=0)
    local_endpoint_port: int = Field(default=8086, ge=0, le=65535)
    egress: Literal["auto", "on", "off"] = "auto"
    egress_squid: str = "squid"
    egress_proxy_port: int = Field(default=8087, ge=1, le=65535)
    egress_http_port: int = Field(default=8088, ge=1, le=65535)
    egress_https_port: int = Field(default=8089, ge=1, le=65535)
    egress_ca_cert_file: Path | None = None
    egress_ca_key_file: Path | None = None
    egress_upstream_ca_file: Path = SYSTEM_ROOTS
    egress_system_roots_file: Path = SYSTEM_ROOTS
    egress_hosts_file: Path | None = None
    egress_dns_nameservers: list[str] = Field(default_factory=list)
    egress_protected_networks: list[str] = Field(default_factory=list)
    egress_allowed_exceptions: list[str] = Field(default_factory=list)
    egress_run_dir: Path | None = None
    egress_policy_seconds: float = Field(default=1.0, gt=0, le=60)
    egress_drain_seconds: float = Field(default=10.0, ge=0, le=240)
    subnet: str = "10.88.0.0/16"
    hollow: bool = False
    output_to_stdout: bool = True
    runsc: str = "runsc"
    checkpoint_compression: Literal["auto", "none", "flate-best-speed"] = "auto"
    drain_on_sigterm: bool = False
    drain_deadline_seconds: float = Field(default=1800.0, gt=0)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_allowed_clients: list[str] = Field(default_factory=lambda: ["ate-control-plane"], min_length=1)

    @field_validator("subnet")
    @classmethod
    def _subnet_is_ipv4(cls, value: str) -> str:
        net = ipaddress.ip_network(value, strict=False)
        if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen > 29:
            raise ValueError("subnet must be an IPv4 network of /29 or larger")
        return str(net)

    @property
    def local_endpoint_on(self) -> bool:
        """Whether the node serves the local endpoint: an API server to relay to, a port, real sandboxes."""
        return bool(self.api_server) and self.local_endpoint_port > 0 and not self.hollow

    @field_validator("egress_protected_networks", "egress_allowed_exceptions")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        return [str(ipaddress.ip_network(n, strict=False)) for n in value]

    @field_validator("egress_dns_nameservers")
    @classmethod
    def _nameservers(cls, value: list[str]) -> list[str]:
        return [str(ipaddress.ip_address(n)) for n in value]

    def egress_missing(self) -> str | None:
        """What keeps the egress proxy from running here (None: nothing): hollow mode, no API
        server, no Squid binary, no egress CA, or the egress ports colliding."""
        if self.hollow:
            return "the node is hollow"
        if not self.api_server:
            return "no api_server to fetch the actors' policies from"
        if shutil.which(self.egress_squid) is None:
            return f"no Squid binary {self.egress_squid!r} (Debian: apt-get install squid-openssl)"
        if self.egress_ca_cert_file is None or self.egress_ca_key_file is None:
            return "no egress CA (egress_ca_cert_file and egress_ca_key_file)"
        absent = [str(f) for f in (self.egress_ca_cert_file, self.egress_ca_key_file) if not f.is_file()]
        if absent:
            return f"no egress CA: {', '.join(absent)} not found"
        ports = {self.egress_proxy_port, self.egress_http_port, self.egress_https_port, self.local_endpoint_port}
        if len(ports) < 4:
            return "egress_proxy_port, egress_http_port, egress_https_port and local_endpoint_port must differ"
        return None

    @property
    def egress_on(self) -> bool:
        """Whether the node runs its egress proxy (``egress`` on, or auto with nothing missing)."""
        return self.egress != "off" and self.egress_missing() is None

    @property
    def local_snapshot_dir(self) -> Path:
        """The local snapshot root in effect: ``local_snapshot_root`` or ``<state_dir>/local-snapshots``."""
        return self.local_snapshot_root or Path(self.state_dir) / "local-snapshots"

    @property
    def snapshot_cache(self) -> Path:
        """The snapshot cache in effect: ``snapshot_cache_dir`` or ``<state_dir>/snapshot-cache``."""
        return self.snapshot_cache_dir or Path(self.state_dir) / "snapshot-cache"

    @property
    def guest_kernel_dir(self) -> Path:
        """The microvm guest kernel's dir in effect (``microvm_kernel_dir`` or scripts/guest-kernel.sh's)."""
        if self.microvm_kernel_dir is not None:
            return self.microvm_kernel_dir
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(os.environ.get("ATE_GUEST_KERNEL_CACHE") or Path(cache) / "ate" / "guest-kernel")

    @property
    def advertise(self) -> str:
        """The gRPC address given to the API server."""
        return self.advertise_address or self.listen
