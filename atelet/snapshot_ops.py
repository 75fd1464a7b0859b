"""What DeleteSnapshot and CopySnapshot do: snapshot operations that touch no worker.

Each method is the body of one RPC; ``Node`` measures it (CopySnapshot also goes through the
operation log; DeleteSnapshot is idempotent by itself). The files are ``atelet.snapshots``'s job.
"""

from __future__ import annotations

import logging
import time

from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.places import SnapshotPlaces
from domain.failpoints import failpoint

log = logging.getLogger(__name__)


class SnapshotOperations:
    """DeleteSnapshot and CopySnapshot on the node's snapshot store.

    Args:
        hollow: benchmark mode (a CopySnapshot of a missing source answers the request's manifest).
        places: the node's snapshots, on disk and in object storage.
    """

    def __init__(self, hollow: bool, places: SnapshotPlaces) -> None:
        self.hollow = hollow
        self.places = places
        self.snapshots = places.store

    async def delete_snapshot(self, req: pb.DeleteSnapshotRequest) -> pb.DeleteSnapshotResponse:
        """Deletes the snapshot at ``req.snapshot_uri`` (and its empty parents below the root).

        Returns:
            ``existed``: a snapshot directory was there (False tells a repeat).

        Raises:
            AteletError: INVALID_ARGUMENT (URI), FAILED_PRECONDITION (not a snapshot directory).
        """
        existed = await self.places.delete(req.snapshot_uri)
        log.info("delete snapshot %s: %s", req.snapshot_uri, "deleted" if existed else "nothing there")
        return pb.DeleteSnapshotResponse(existed=existed)

    async def copy_snapshot(self, req: pb.CopySnapshotRequest) -> pb.CopySnapshotResponse:
        """Copies the snapshot at ``req.source_uri`` to ``req.destination_uri`` (``SnapshotStore.copy``):
        the upload of a paused actor's local snapshot. Hollow mode copies real files too, but
        answers a missing source with ``req.manifest`` (its Checkpoint wrote nothing).

        Returns:
            The manifest, its size in bytes and the copy's seconds.

        Raises:
            AteletError: as ``SnapshotStore.copy``.
        """
        start = time.monotonic()
        if self.hollow:
            source = self.snapshots.resolve(req.source_uri, "source_uri")
            self.places.check(req.destination_uri, "destination_uri")
            if not source.exists():
                return pb.CopySnapshotResponse(manifest=req.manifest, size_bytes=0)
        manifest, copied = await self.places.copy(req.source_uri, req.destination_uri, req.manifest)
        seconds = time.monotonic() - start
        await failpoint("Atelet.copy_snapshot.after_copy")
        size = self.snapshots.size_of(manifest)
        log.info("copy snapshot %s -> %s: %s, %d bytes in %.3fs", req.source_uri, req.destination_uri,
                 "copied" if copied else "already there", size, seconds)
        return pb.CopySnapshotResponse(manifest=manifest, size_bytes=size, copy_seconds=seconds)
