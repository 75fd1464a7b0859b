"""What `ate dev` runs and where: `DevConfig`, and the node name and subnet derived from its data dir.

Two stacks on one machine need different node names (they name the workers' network namespaces)
and subnets; both default to values derived from the absolute data dir (`default_node`,
`default_subnet`), so two data dirs give two stacks that leave each other alone.
"""

import hashlib
import socket
from dataclasses import dataclass, field
from pathlib import Path

from ate.dev.restart import RestartPolicy

OBJECT_STORE_LOCATION = "s3://ate/snapshots"
"""The default snapshot location of `ate dev --object-store` (bucket `ate` of the local server)."""


@dataclass
class DevConfig:
    """What `ate dev` runs and where.

    Attributes:
        data_dir: Holds postgres/, temporal.db, snapshots/, atelet/, tls/ and logs/.
        workers: Workers the atelet starts when no pool file is given.
        pool: A worker-pool YAML file for the atelet.
        microvm_workers: Workers of sandbox class microvm (pool `microvm`, QEMU VMs) the atelet
            starts beside the `workers` gVisor ones; 0: none. Not with `pool` (a pool file says
            its own classes).
        example: Create atespace demo, template counter and actor c1 once ready.
        host: Address every part listens on.
        api_port: REST API port.
        router_port: Router port for actor traffic.
        atelet_port: atelet gRPC port.
        temporal_port: Temporal frontend port.
        ui_port: Temporal Web UI port.
        metrics_port_base: Prometheus ports: router at base, worker base+1, atelet base+85.
        object_store: Keep snapshots in a local S3 server (`ate.dev.object_store`) instead of
            `data_dir/snapshots`.
        object_store_port: That server's S3 port (it opens the next 4 too).
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
    microvm_workers: int = 0
    example: bool = False
    host: str = "127.0.0.1"
    api_port: int = 8080
    router_port: int = 8000
    atelet_port: int = 8085
    temporal_port: int = 7233
    ui_port: int = 8233
    metrics_port_base: int = 9000
    object_store: bool = False
    object_store_port: int = 8333
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
    def snapshot_location(self) -> str:
        """Where templates' snapshots go by default: the local S3 server, or `data_dir/snapshots`."""
        return OBJECT_STORE_LOCATION if self.object_store else f"file://{self.data_dir / 'snapshots'}"

    @property
    def tls_dir(self) -> Path:
        """The local CA and the certificates of the atelet's mutual TLS (`ate.dev.certificates`)."""
        return self.data_dir / "tls"

    @property
    def logs(self) -> Path:
        """Directory of the parts' logs."""
        return self.data_dir / "logs"

    def resolve(self) -> None:
        """Make `data_dir` absolute and fill an empty `node` and `subnet` with its defaults."""
        self.data_dir = self.data_dir.expanduser().resolve()
        self.node = self.node or default_node(self.data_dir)
        self.subnet = self.subnet or default_subnet(self.data_dir)


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
