"""Where the atelet keeps its files: the layout of ``state_dir``.

::

    runsc/                         runsc --root
    images/<digest>/               unpacked images (shared, never written by sandboxes)
    operations/<sha256>.json       started and completed operations
    workers/<worker>/bundle/       OCI bundle of the worker's current sandbox
    workers/<worker>/assignment.json   what runs on the worker (``atelet.assignments``)
    actors/<atespace>/<name>/volumes/<volume>/   durable dirs (bind-mounted into the sandbox)
    logs/<atespace>/<name>.log     sandbox output (runsc's stdout/stderr)
    local-snapshots/<path>/        LOCAL snapshots, ``local:///<path>`` (unless ``local_snapshot_root`` is set)
    egress/ca-certificates.crt     the sandboxes' CA bundle (``atelet.egress.sandbox``)
    egress/squid.conf              the egress proxy's configuration (``atelet.egress``)
    egress/header-names.json       the credential header names Squid adds (names only)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atelet.proto import atelet_pb2 as pb

SUBDIRS = ("runsc", "images", "operations", "workers", "actors", "logs", "egress")


@dataclass(frozen=True)
class NodeLayout:
    """The paths under one state dir.

    Attributes:
        root: the state dir, absolute and symlink-free.
    """

    root: Path

    def create(self) -> None:
        """Creates every directory of ``SUBDIRS`` (with parents; existing ones are kept)."""
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def runsc(self) -> Path:
        """runsc's ``--root``."""
        return self.root / "runsc"

    @property
    def images(self) -> Path:
        """The cache of unpacked images."""
        return self.root / "images"

    @property
    def operations(self) -> Path:
        """The operation log's records."""
        return self.root / "operations"

    @property
    def workers(self) -> Path:
        """One dir per worker: its bundle and its assignment record."""
        return self.root / "workers"

    @property
    def ca_bundle(self) -> Path:
        """The CA bundle every gVisor sandbox mounts (``atelet.egress.sandbox``)."""
        return self.root / "egress" / "ca-certificates.crt"

    def checkpoint_journal(self, worker: str) -> Path:
        """Where the checkpoint process of ``worker``'s sandbox records its pid, output and exit
        status (``Runsc.checkpoint``)."""
        return self.workers / worker / "checkpoint"

    def exec_dir(self, worker: str) -> Path:
        """Where the execs into ``worker``'s sandbox write their output (``atelet.exec_ops``)."""
        return self.workers / worker / "exec"

    def bundle_dir(self, worker: str) -> Path:
        """The runtime files (OCI bundle) of ``worker``'s current sandbox."""
        return self.workers / worker / "bundle"

    def actor_dir(self, actor: tuple[str, str]) -> Path:
        """The dir of actor ``(atespace, name)`` on this node; its durable dirs lie below."""
        return self.root / "actors" / actor[0] / actor[1]

    def log_path(self, actor: tuple[str, str]) -> Path:
        """The log file of actor ``(atespace, name)``: its sandboxes' output."""
        return self.root / "logs" / actor[0] / f"{actor[1]}.log"

    def volume_dirs(self, actor: tuple[str, str], spec: pb.WorkloadSpec) -> dict[str, Path]:
        """The host dir of each durable-dir volume of ``spec``, by volume name (not created here)."""
        base = self.actor_dir(actor) / "volumes"
        return {v.name: base / v.name for v in spec.volumes if v.durable_dir}
