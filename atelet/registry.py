"""Images of container registries for the node (issue 29): resolved and pulled with skopeo
(containers/image), kept as OCI layouts in the node's cache, one per manifest digest, which
``atelet.images`` then unpacks once like a local layout.

A pull is by digest (``RegistryImage.pinned``; a reference by tag is resolved first), into a
temporary layout renamed into place when complete, so a pull cut short leaves nothing that
looks whole; one pull per digest at a time. A registry on loopback may speak plain HTTP, as
Docker and containers/image allow, and so may one the operator lists as insecure; any other
must have TLS the system trusts. A layer that a cached layout holds already is hard-linked into the
new one before the pull, and containers/image reuses it instead of downloading it again: images
built on a common base share its layers' files (read-only: a blob never changes). The cache is
bounded (``max_bytes``, a shared file counted once): the least recently used layouts go first.

Credentials: ``credentials`` (set by the atelet: ``atelet.pulls_api``) gives those the
API lets this node use for an image (its templates' pull secrets for that registry); each is
tried in turn until one is let in, written to an auth file of its own (mode 0600 in a 0700 dir
of the cache, removed after the run), never on skopeo's command line, which any user of the node
may read. Without any the pull is anonymous (``--no-creds``): never with the node's own logins.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from atelet import proc
from atelet.errors import AteletError, internal, invalid, not_found, precondition, unavailable
from domain.image_pulls import PullProgress, PullState
from domain.image_references import RUNTIME_PLATFORM, RegistryImage, pull_failure, skopeo_message
from domain.registry_credentials import RegistryCredentials, attempts, refused_hint, write_auth_file

log = logging.getLogger(__name__)

LAYOUT_TAG = "image"
"""The tag of a pulled image in its cached layout."""

CredentialSource = Callable[[RegistryImage], Awaitable[tuple[list[RegistryCredentials], list[str]]]]
"""(the credentials this node may pull an image with, the problems of those it may not use)."""

ProgressSink = Callable[[RegistryImage, PullProgress], Awaitable[None]]
"""Told how a pull goes (``atelet.pulls_api``); must not raise."""

PROGRESS_SECONDS = 0.5
"""How often a pull's progress is looked at and told."""


class RegistryPuller:
    """Resolves and pulls registry images into ``cache_dir`` (``<cache_dir>/<digest>/``, OCI layouts).

    Args:
        cache_dir: where pulled layouts are kept.
        insecure_registries: registries (``host[:port]``) that may be plain HTTP or self-signed
            besides those on loopback.
        skopeo: the skopeo binary.
        timeout: seconds one skopeo run may take.
        max_bytes: the pulled layouts' total size this cache keeps (0: no bound); past it, the
            least recently used are removed after a pull, never the one in use. A removed
            layout is pulled again when needed; what was unpacked from it stays (``atelet.images``).
    """

    def __init__(self, cache_dir: Path, insecure_registries: list[str] | None = None, skopeo: str = "skopeo",
                 timeout: float = 600.0, max_bytes: int = 0) -> None:  # fmt: skip
        self.cache_dir = Path(cache_dir)
        self.insecure = set(insecure_registries or [])
        self.skopeo = skopeo
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.credentials: CredentialSource | None = None
        self.progress: ProgressSink | None = None
        self._locks: dict[str, asyncio.Lock] = {}

    def _verify(self, image: RegistryImage) -> str:
        return "false" if image.loopback or image.registry in self.insecure else "true"

    @contextlib.asynccontextmanager
    async def _auth_file(self, credentials: RegistryCredentials) -> AsyncIterator[Path]:
        """An auth file giving ``credentials`` (mode 0600, in a 0700 dir), removed after."""
        private = self.cache_dir / ".auth"
        private.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = private / f"{uuid.uuid4().hex}.json"
        try:
            yield write_auth_file(path, credentials)
        finally:
            path.unlink(missing_ok=True)

    async def _run(self, image: RegistryImage, args: list[str], field: str, source: bool = False) -> str:
        """skopeo ``args`` (the reference last) with each credential in turn, or anonymously;
        ``source``: the flags of a copy's source (``--src-authfile``) rather than ``--authfile``."""
        prefix = "--src-" if source else "--"
        candidates, problems = await self.credentials(image) if self.credentials is not None else ([], [])
        output = ""
        tried: list[RegistryCredentials] = []
        for candidate in attempts(candidates, image.registry):
            async with contextlib.AsyncExitStack() as stack:
                if candidate is None:
                    auth = [f"{prefix}no-creds"]
                else:
                    auth = [f"{prefix}authfile={await stack.enter_async_context(self._auth_file(candidate))}"]
                    tried.append(candidate)
                try:
                    done = await proc.run([self.skopeo, args[0], *auth, *args[1:]], timeout=self.timeout)
                except FileNotFoundError:
                    raise internal(f"{field}: {image}: skopeo is not installed on this node (scripts/install.sh)") from None
            if done.ok:
                return done.stdout
            output = done.stderr or done.stdout
            if pull_failure(output)[0] != "unauthorized":
                break
        raise _error(image, output, field, tried, problems)

    async def digest_of(self, image: RegistryImage, field: str = "image") -> str:
        """The manifest digest of ``image`` (its own when pinned, else its tag's, asked of the registry).

        Raises:
            AteletError: named by ``_error`` (the field, the image, what the registry said, what to do).
        """
        if image.digest:
            return image.digest
        out = await self._run(image, ["inspect", f"--tls-verify={self._verify(image)}", "--format", "{{.Digest}}",
                                      image.transport_reference()], field)  # fmt: skip
        return out.strip()

    async def layout_of(self, image: RegistryImage, field: str = "image") -> tuple[Path, str]:
        """The cached OCI layout of ``image`` and its tag in it, pulled once per digest.

        Raises:
            AteletError: as ``digest_of``; INTERNAL when the cache cannot be written.
        """
        digest = await self.digest_of(image, field)
        target = self.cache_dir / digest.replace(":", "_")
        async with self._locks.setdefault(digest, asyncio.Lock()):
            if not (target / "index.json").is_file():
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                tmp = self.cache_dir / f".pull-{uuid.uuid4().hex}"
                try:
                    await self._copy(image.pinned(digest), tmp, field)
                    if target.exists():
                        shutil.rmtree(target)
                    tmp.rename(target)
                except OSError as error:
                    raise internal(f"{field}: {image}: the node's image cache {self.cache_dir} cannot be written: "
                                   f"{error}") from None  # fmt: skip
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
            target.touch()  # its last use, for the eviction's order
            if self.max_bytes:
                await asyncio.to_thread(self.evict, target)
        return target, LAYOUT_TAG

    async def _copy(self, image: RegistryImage, tmp: Path, field: str) -> None:
        """skopeo copy of the pinned ``image`` into the layout ``tmp``, telling ``progress`` every
        ``PROGRESS_SECONDS`` how many of its layers' bytes are in ``tmp`` so far, and how it ended.
        A layer another cached layout holds already is hard-linked into ``tmp`` first, which
        containers/image then reuses instead of downloading it again (``_share_layers``).

        Raises:
            AteletError: as ``_run``.
        """
        args = ["copy", "--quiet", f"--src-tls-verify={self._verify(image)}", image.transport_reference(),
                f"oci:{tmp}:{LAYOUT_TAG}"]  # fmt: skip
        layers = await self._layers(image, field)
        await asyncio.to_thread(self._share_layers, tmp, [digest for digest, _ in layers])
        if self.progress is None:
            await self._run(image, args, field, source=True)
            return
        count, total = len(layers), sum(size for _, size in layers)
        copying = asyncio.create_task(self._run(image, args, field, source=True))
        while not copying.done():
            await self.progress(image, PullProgress(count, total, min(total, await asyncio.to_thread(_size, tmp))))
            await asyncio.wait({copying}, timeout=PROGRESS_SECONDS)
        try:
            copying.result()
        except AteletError as error:
            await self.progress(image, PullProgress(count, total, 0, PullState.FAILED, error.reason))
            raise
        await self.progress(image, PullProgress(count, total, total, PullState.PULLED))

    def _share_layers(self, tmp: Path, digests: list[str]) -> list[str]:
        """Hard-links into the layout ``tmp`` each of ``digests`` (``sha256:...``) that a cached
        layout holds; returns those linked. A blob is named by its digest and never changes, so
        the layouts share its file read-only, and removing one layout leaves the others whole."""
        linked = []
        blobs = tmp / "blobs" / "sha256"
        for digest in digests:
            algorithm, _, hexadecimal = digest.partition(":")
            if algorithm != "sha256" or not hexadecimal.isalnum():
                continue
            source = next((found for layout in self.cache_dir.glob("sha256_*")
                           if (found := layout / "blobs" / "sha256" / hexadecimal).is_file()), None)  # fmt: skip
            if source is None:
                continue
            with contextlib.suppress(OSError):  # not linked: downloaded as any other
                blobs.mkdir(parents=True, exist_ok=True)
                os.link(source, blobs / hexadecimal)
                linked.append(digest)
        return linked

    async def _layers(self, image: RegistryImage, field: str) -> list[tuple[str, int]]:
        """(digest, stated size in bytes) of each layer of ``image``'s manifest for this node's
        platform; [] when the manifest cannot be read (the copy then says why)."""
        try:
            manifest = json.loads(await self._run(image, ["inspect", f"--tls-verify={self._verify(image)}", "--raw",
                                                          image.transport_reference()], field))  # fmt: skip
            if "manifests" in manifest:  # an index: the entry skopeo copies for this platform
                os_name, architecture = RUNTIME_PLATFORM.split("/")
                entry = next(m for m in manifest["manifests"]
                             if (m.get("platform") or {}).get("os") == os_name
                             and (m.get("platform") or {}).get("architecture") == architecture)  # fmt: skip
                manifest = json.loads(await self._run(image, ["inspect", f"--tls-verify={self._verify(image)}", "--raw",
                                                              f"docker://{image.name}@{entry['digest']}"], field))  # fmt: skip
            return [(str(layer["digest"]), int(layer["size"])) for layer in manifest.get("layers") or []]
        except (AteletError, ValueError, KeyError, TypeError, StopIteration):
            return []

    def evict(self, keep: Path) -> list[Path]:
        """Removes the least recently used layouts (by their dir's mtime, touched at each use)
        until the cache holds at most ``max_bytes`` (a layer file shared by layouts counted
        once), never ``keep`` nor one being pulled; returns those removed."""
        layouts = [p for p in self.cache_dir.iterdir() if p.is_dir() and p.name.startswith("sha256_") and p != keep]
        removed = []
        for layout in sorted(layouts, key=lambda p: p.stat().st_mtime):
            if _size(self.cache_dir) <= self.max_bytes:
                break
            if self._locks.get(layout.name.replace("_", ":", 1), asyncio.Lock()).locked():
                continue
            shutil.rmtree(layout, ignore_errors=True)
            removed.append(layout)
        if removed:
            log.info("image cache: removed %d least recently used layout(s) to stay within %d bytes: %s",
                     len(removed), self.max_bytes, ", ".join(p.name for p in removed))  # fmt: skip
        return removed


def _size(path: Path) -> int:
    """The bytes of the regular files under ``path``, a file with several links there counted
    once (0 when it is not there yet); files that go while it counts are skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for found in path.rglob("*") if path.exists() else ():
        with contextlib.suppress(OSError):
            stat = found.lstat()
            if found.is_file() and not found.is_symlink() and (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def _error(image: RegistryImage, output: str, field: str, tried: list[RegistryCredentials] | None = None,
           problems: list[str] | None = None) -> AteletError:  # fmt: skip
    """The error of a failed pull of ``image``: its kind (``domain.image_references.pull_failure``)
    chooses the status, retried (UNAVAILABLE) only when the registry could not be reached; an
    unauthorized one names the pull secrets ``tried`` and the ``problems`` of those left out."""
    kind, hint = pull_failure(output)
    if kind == "unauthorized" and tried:
        hint = refused_hint(tried)
    if kind == "unauthorized" and problems:
        hint += f"; pull secrets that could not be used: {'; '.join(problems)}"
    message = f"{field}: {image}: {kind} ({skopeo_message(output)}); {hint}"
    if kind == "no such image":
        return not_found(message)
    if kind == "not for this platform":
        return invalid(message)
    if kind == "registry unreachable":
        return unavailable(message)
    return precondition(message)
