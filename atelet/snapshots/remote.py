"""Snapshots in object storage: ``s3://``, ``gs://`` and ``az://`` locations through obstore.

A snapshot at ``s3://bucket/prefix/demo/actors/c1/3-ab12cd34ef56`` is the objects
``<that key>/<file>`` for every file of its manifest, plus ``<that key>/manifest.json`` written
last: an object-store snapshot without a manifest object is an incomplete one, never restored.

Why obstore (over fsspec): one library, no Python dependencies, speaks S3, GCS and Azure with
the providers' own credential chains (environment variables, web identity / workload identity,
instance metadata, refreshed before expiry), streams uploads from files with parallel multipart
parts and downloads in chunks, and retries 5xx and connection errors with exponential backoff
and jitter by itself; fsspec would need one package per provider (s3fs, gcsfs, adlfs) with
their own configuration and retry behaviour.

Credentials are never in a URI or a template: each store is built from the environment of the
atelet (e.g. ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_ENDPOINT``, or
``GOOGLE_APPLICATION_CREDENTIALS``; in Kubernetes, a Secret mounted as those variables).

Errors: INVALID_ARGUMENT for a malformed URI or one outside the allowed locations; NOT_FOUND for
a snapshot that is not there; FAILED_PRECONDITION for an incomplete or corrupted one (naming the
file); PERMISSION_DENIED when the store refuses this node's credentials; UNAVAILABLE when the
store is unreachable or failing after obstore's retries (a retry may work). Each names the store
and the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import obstore
from obstore.exceptions import PermissionDeniedError, UnauthenticatedError
from obstore.store import ObjectStore, from_url

from atelet.errors import (
    AteletError,
    damaged,
    internal,
    invalid,
    not_found,
    permission_denied,
    precondition,
    unavailable,
)
from atelet.proto import atelet_pb2 as pb
from atelet.snapshots.manifest import MANIFEST, manifest_from_json, manifest_to_json

REMOTE_SCHEMES = ("s3", "gs", "az")

PART_BYTES = 8 * 2**20
"""Multipart upload part size (S3's minimum is 5 MiB)."""

PARALLEL_PARTS = 8
"""Parts of one file uploaded at once."""

PARALLEL_FILES = 4
"""Files of one snapshot moved at once."""

CHUNK_BYTES = 4 * 2**20
"""Download chunk: what is held in memory per file at a time."""

def retry_config(seconds: float) -> dict[str, Any]:
    """obstore's retries inside one call (5xx, connection errors, throttling), exponential backoff
    with jitter from 100 ms up to 3 s, for at most ``seconds``; then the call fails UNAVAILABLE
    and the activity's own retry policy (a few attempts) decides what happens next."""
    return {
        "max_retries": 10,
        "retry_timeout": timedelta(seconds=seconds),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=3), "base": 2},
    }


@dataclass(frozen=True)
class ObjectLocation:
    """A place in object storage: ``<scheme>://<bucket>/<key>`` (the key without slashes at
    either end; empty for a whole bucket)."""

    scheme: str
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        """The location as a URI."""
        return f"{self.scheme}://{self.bucket}/{self.key}"

    @property
    def store_name(self) -> str:
        """What messages call the store: ``s3://bucket``."""
        return f"{self.scheme}://{self.bucket}"

    def object(self, path: str) -> str:
        """The key of one file of the snapshot (``path`` relative, POSIX)."""
        return f"{self.key}/{path}"

    def within(self, other: ObjectLocation) -> bool:
        """Whether this location is ``other`` or lies below it."""
        return (self.scheme, self.bucket) == (other.scheme, other.bucket) and (
            not other.key or self.key == other.key or self.key.startswith(other.key + "/")
        )


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names object storage (``s3://``, ``gs://``, ``az://``)."""
    return urlparse(uri).scheme in REMOTE_SCHEMES


def parse_location(uri: str, field: str, allow_root: bool = False) -> ObjectLocation:
    """Parse ``<scheme>://<bucket>/<key>``.

    Args:
        field: the request field, named in errors.
        allow_root: accept a whole bucket (an allowed location, not a snapshot).

    Raises:
        AteletError: INVALID_ARGUMENT naming ``field`` (scheme, bucket, '..', query or fragment).
    """
    parsed = urlparse(uri)
    if parsed.scheme not in REMOTE_SCHEMES:
        schemes = ", ".join(s + "://" for s in REMOTE_SCHEMES)
        raise invalid(f"{field}: {uri!r}: object storage URIs start with {schemes}")
    if not parsed.netloc or "@" in parsed.netloc or ":" in parsed.netloc:
        raise invalid(f"{field}: {uri!r}: must be {parsed.scheme}://<bucket>/<path> (no credentials, no port)")
    if parsed.query or parsed.fragment or parsed.params or "\0" in uri:
        raise invalid(f"{field}: {uri!r}: no query, fragment or NUL allowed")
    parts = [p for p in parsed.path.split("/") if p]
    if ".." in parts or "." in parts:
        raise invalid(f"{field}: {uri!r}: '..' and '.' are not allowed")
    key = "/".join(parts)
    if not key and not allow_root:
        raise invalid(f"{field}: {uri!r}: names a whole bucket, not a snapshot")
    return ObjectLocation(scheme=parsed.scheme, bucket=parsed.netloc, key=key)


def store_error(error: Exception, location: ObjectLocation, doing: str) -> AteletError:
    """An obstore failure as an AteletError naming the store and the reason (its first line)."""
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, PermissionDeniedError | UnauthenticatedError):
        return permission_denied(
            f"snapshot store {location.store_name} refused this node's credentials while {doing}: {reason}"
        )
    return unavailable(f"snapshot store {location.store_name} failed while {doing}: {reason}")


def missing(location: ObjectLocation, field: str) -> AteletError:
    """NOT_FOUND for a snapshot with no manifest object at ``location``."""
    return not_found(f"{field}: no completed snapshot at {location.uri} (no {MANIFEST} object)")


class ObjectStores:
    """The object stores this node may use, one obstore client per bucket, built on first use
    from the environment (see the module docstring).

    Args:
        allowed: the locations snapshots may be read from and written to (``s3://bucket/prefix``);
            anything else is refused (the control plane chooses URIs, but a node does not trust
            them blindly). Empty: object storage is off on this node.
        retry_seconds: how long one call retries a failing store (see ``retry_config``).
    """

    def __init__(self, allowed: Iterable[str], retry_seconds: float = 15.0) -> None:
        self.allowed = [parse_location(uri, "object_store_locations", allow_root=True) for uri in allowed]
        self.retry = retry_config(retry_seconds)
        self._stores: dict[tuple[str, str], ObjectStore] = {}

    def location(self, uri: str, field: str) -> ObjectLocation:
        """Parse ``uri`` and check it lies in an allowed location.

        Raises:
            AteletError: INVALID_ARGUMENT naming ``field``.
        """
        location = parse_location(uri, field)
        if not any(location.within(root) for root in self.allowed):
            allowed = [root.uri for root in self.allowed] or "none: object storage is off on this node"
            raise invalid(f"{field}: {uri!r} is outside the object storage locations of this node ({allowed})")
        return location

    def store(self, location: ObjectLocation) -> ObjectStore:
        """The client of ``location``'s bucket (credentials and endpoint from the environment)."""
        key = (location.scheme, location.bucket)
        store = self._stores.get(key)
        if store is None:
            store = from_url(location.store_name, retry_config=self.retry)  # type: ignore[call-overload]
            self._stores[key] = store
        return store

    async def read_manifest(self, location: ObjectLocation) -> pb.SnapshotManifest | None:
        """The manifest object of the snapshot at ``location``; None when there is none (the
        snapshot is absent or incomplete)."""
        try:
            response = await obstore.get_async(self.store(location), location.object(MANIFEST))
            text = bytes(await response.bytes_async()).decode()
        except FileNotFoundError:
            return None
        except Exception as error:
            raise store_error(error, location, "reading the manifest") from None
        try:
            return manifest_from_json(text)
        except Exception as error:
            raise internal(f"unreadable manifest at {location.uri}: {error}") from None

    async def upload(self, directory: Path, location: ObjectLocation, manifest: pb.SnapshotManifest) -> None:
        """Store every file of ``manifest`` from ``directory``, then the manifest object last.

        Each file streams from disk (multipart above PART_BYTES, PARALLEL_PARTS parts at once);
        nothing is held whole in memory.

        Raises:
            AteletError: UNAVAILABLE / PERMISSION_DENIED from the store.
        """
        store = self.store(location)
        gate = asyncio.Semaphore(PARALLEL_FILES)

        async def put(entry: pb.SnapshotFile) -> None:
            async with gate:
                try:
                    await obstore.put_async(
                        store,
                        location.object(entry.path),
                        directory / entry.path,
                        chunk_size=PART_BYTES,
                        max_concurrency=PARALLEL_PARTS,
                    )
                except Exception as error:
                    raise store_error(error, location, f"uploading {entry.path}") from None

        await _all(put(entry) for entry in manifest.files)
        try:
            await obstore.put_async(store, location.object(MANIFEST), manifest_to_json(manifest).encode())
        except Exception as error:
            raise store_error(error, location, "uploading the manifest") from None

    async def download(self, location: ObjectLocation, manifest: pb.SnapshotManifest, directory: Path) -> None:
        """Fetch every file of ``manifest`` into ``directory`` (which must exist), checking each
        file's size and SHA-256 while it streams in, then write manifest.json there.

        Raises:
            AteletError: FAILED_PRECONDITION (a file is missing, or its size or SHA-256 differs
                from the manifest: the file is named), UNAVAILABLE / PERMISSION_DENIED.
        """
        store = self.store(location)
        gate = asyncio.Semaphore(PARALLEL_FILES)

        async def fetch(entry: pb.SnapshotFile) -> None:
            rel = PurePosixPath(entry.path)
            if not entry.path or rel.is_absolute() or ".." in rel.parts:
                raise precondition(f"manifest.files: bad path {entry.path!r}")
            async with gate:
                try:
                    response = await obstore.get_async(store, location.object(entry.path))
                except FileNotFoundError:
                    raise damaged(
                        f"snapshot at {location.uri} is incomplete: file {entry.path} is missing from the store"
                    ) from None
                except Exception as error:
                    raise store_error(error, location, f"downloading {entry.path}") from None
                await _stream_to(response, directory / entry.path, entry, location)

        await _all(fetch(entry) for entry in manifest.files)
        await asyncio.to_thread((directory / MANIFEST).write_text, manifest_to_json(manifest))

    async def delete(self, location: ObjectLocation) -> bool:
        """Delete every object under the snapshot's key, the manifest first (a half-deleted
        snapshot is then an incomplete one, never taken for complete). True when any was there.

        Raises:
            AteletError: UNAVAILABLE / PERMISSION_DENIED from the store.
        """
        store = self.store(location)
        try:
            keys = [meta["path"] async for batch in obstore.list(store, prefix=location.key + "/") for meta in batch]
            if not keys:
                return False
            manifest_key = location.object(MANIFEST)
            if manifest_key in keys:
                await obstore.delete_async(store, manifest_key)
            rest = [k for k in keys if k != manifest_key]
            if rest:
                await obstore.delete_async(store, rest)
            return True
        except Exception as error:
            raise store_error(error, location, "deleting the snapshot") from None


async def _all(tasks: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run coroutines together; the first failure cancels the rest and is raised."""
    try:
        async with asyncio.TaskGroup() as group:
            for task in tasks:
                group.create_task(task)
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None


async def _stream_to(response: Any, target: Path, entry: pb.SnapshotFile, location: ObjectLocation) -> None:
    """Write a GET's body to the new file ``target`` chunk by chunk, hashing on the way;
    FAILED_PRECONDITION when its size or SHA-256 differs from ``entry``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            async for chunk in response.stream(min_chunk_size=CHUNK_BYTES):
                data = bytes(chunk)
                size += len(data)
                if size > entry.size_bytes:
                    break
                await asyncio.to_thread(_write_and_hash, fd, data, digest)
        except Exception as error:
            raise store_error(error, location, f"downloading {entry.path}") from None
    finally:
        os.close(fd)
    where = f"snapshot file {entry.path} at {location.uri}"
    if size > entry.size_bytes:
        raise damaged(f"{where}: more than the {entry.size_bytes} bytes of the manifest: the snapshot is corrupted")
    if size != entry.size_bytes:
        raise damaged(f"{where}: {size} bytes, the manifest says {entry.size_bytes}: the snapshot is corrupted")
    if digest.hexdigest() != entry.sha256:
        raise damaged(
            f"{where}: sha256 {digest.hexdigest()} != manifest {entry.sha256}: the snapshot is corrupted"
        )


def _write_and_hash(fd: int, data: bytes, digest: Any) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    digest.update(data)
