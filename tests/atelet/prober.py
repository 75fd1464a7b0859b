"""A sandbox that tries to connect out, for the network isolation tests.

``build_busybox_image`` packs the host's static busybox (package busybox-static, installed by
scripts/install.sh) into an OCI layout with umoci. ``prober_spec`` runs it with a shell script that
lists what the sandbox sees (``ip -o addr``, ``ip route``), then tries a TCP connect to every
target address (plus the default gateway it finds) on every port, all at once, each given
``CONNECT_SECONDS``, writes one line per attempt (``open|closed <address> <port>``) to its
durable dir and only then serves that dir on port 8080, where its wakeup probe (``GET /report``)
looks: a Run that returns has probed everything. ``Listeners`` stands in for a control-plane
part on the host: it listens on every IPv4 and IPv6 address and records who connected.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from atelet.proto import atelet_pb2 as pb

CONNECT_SECONDS = 5
IMAGE_TAG = "latest"

SCRIPT = r"""
bb=/bin/busybox
{
  echo "== addr"; $bb ip -o addr
  echo "== route"; $bb ip route
} > /data/seen 2>&1
gateway=$($bb ip route | $bb awk '$1 == "default" {print $3}')
for address in $TARGETS $gateway; do
  for port in $PORTS; do
    (if $bb nc -w $CONNECT_SECONDS "$address" "$port" </dev/null >/dev/null 2>&1
     then echo "open $address $port"; else echo "closed $address $port"; fi) >> /data/probes &
  done
done
wait
{ echo "gateway $gateway"; $bb cat /data/probes; } > /data/report.tmp && $bb mv /data/report.tmp /data/report
exec $bb httpd -f -p 8080 -h /data
"""


def build_busybox_image(directory: Path) -> Path:
    """Builds the layout ``<directory>/busybox`` (tag ``latest``) from /usr/bin/busybox; returns it.

    Raises:
        RuntimeError: busybox or umoci is missing (run scripts/install.sh).
    """
    busybox = shutil.which("busybox")
    if busybox is None or shutil.which("umoci") is None:
        raise RuntimeError("the isolation tests need busybox (busybox-static) and umoci: run scripts/install.sh")
    rootfs = directory / "rootfs"
    for sub in ("bin", "data", "tmp", "etc"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(busybox, rootfs / "bin/busybox")
    (rootfs / "etc/resolv.conf").write_text("")
    layout = directory / "busybox"
    image = f"{layout}:{IMAGE_TAG}"
    for argv in (["umoci", "init", "--layout", str(layout)], ["umoci", "new", "--image", image],
                 ["umoci", "insert", "--image", image, str(rootfs), "/"],
                 ["umoci", "config", "--image", image, "--config.entrypoint", "/bin/busybox", "--config.workingdir", "/"]):  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True)
    return layout


def prober_spec(image: str, targets: list[str], ports: list[int]) -> pb.WorkloadSpec:
    """The prober trying every port of ``ports`` on every address of ``targets`` and its gateway."""
    return pb.WorkloadSpec(
        containers=[pb.Container(
            name="prober", image=image, command=["/bin/busybox", "sh", "-c", SCRIPT],
            env={"TARGETS": " ".join(targets), "PORTS": " ".join(str(p) for p in ports),
                 "CONNECT_SECONDS": str(CONNECT_SECONDS)},
            wakeup_probe=pb.HttpGetProbe(path="/report", port=8080),
            volume_mounts=[pb.VolumeMount(name="data", mount_path="/data")],
        )],
        volumes=[pb.Volume(name="data", durable_dir=True)],
        cpu_millis=500, memory_bytes=128 * 2**20,
    )  # fmt: skip


@dataclass
class Report:
    """What the prober found: the gateway it saw and each attempt's outcome by (address, port)."""

    gateway: str
    outcomes: dict[tuple[str, int], str]

    @property
    def opened(self) -> list[tuple[str, int]]:
        """The attempts that connected."""
        return sorted(k for k, v in self.outcomes.items() if v == "open")


def parse_report(text: str) -> Report:
    """Parses the prober's /report (``gateway <ip>`` then ``open|closed <address> <port>`` lines)."""
    lines = text.splitlines()
    assert lines and lines[0].startswith("gateway "), text
    outcomes: dict[tuple[str, int], str] = {}
    for line in lines[1:]:
        outcome, address, port = line.split()
        assert outcome in ("open", "closed"), line
        if outcomes.get((address, int(port))) != "open":  # an address may be probed twice (the gateway)
            outcomes[(address, int(port))] = outcome
    return Report(lines[0].split()[1], outcomes)


@dataclass
class Listeners:
    """TCP listeners on every address of the host (0.0.0.0 and ::), one port per named part,
    each recording the peers it accepted (and closing them at once). ``close`` when done."""

    ports: dict[str, int] = field(default_factory=dict)
    accepted: list[tuple[str, str]] = field(default_factory=list)  # (part, peer address)
    _sockets: list[socket.socket] = field(default_factory=list)

    def open(self, part: str) -> int:
        """Listens for ``part`` on a free port on both families; returns the port."""
        v4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        v4.bind(("0.0.0.0", 0))
        port = int(v4.getsockname()[1])
        v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(("::", port))
        for s in (v4, v6):
            s.listen(64)
            self._sockets.append(s)
            threading.Thread(target=self._accept, args=(part, s), daemon=True).start()
        self.ports[part] = port
        return port

    def _accept(self, part: str, server: socket.socket) -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return  # closed
            self.accepted.append((part, str(peer[0])))
            conn.close()

    def close(self) -> None:
        """Stops listening."""
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
            s.close()
