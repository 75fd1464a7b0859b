"""Local OCI image layouts (``oci:<path>:<tag>``) and registry images (``atelet.registry``, pulled
into OCI layouts of the node's cache), unpacked once per digest and shared read-only.

``<path>`` is relative to one of the atelet's image roots (or absolute); after following
symlinks it must lie inside one of them, else INVALID_ARGUMENT naming the field. The image is
unpacked with ``umoci unpack`` into ``<cache>/<manifest digest>/`` (a ``rootfs`` dir and umoci's
runtime ``config.json``), atomically, once; every sandbox of that image then uses the same rootfs
with runsc's in-memory root overlay, so none writes to it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atelet import proc
from atelet.errors import internal, invalid, not_found
from atelet.registry import RegistryPuller
from domain.image_references import is_registry_reference, parse_registry_image

REF_ANNOTATION = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class UnpackedImage:
    """An unpacked image: ``rootfs`` dir and umoci's runtime ``config`` (the OCI config.json dict)."""

    digest: str
    rootfs: Path
    config: dict[str, Any]


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


class ImageStore:
    """Resolves image references against ``roots`` and unpacks them into ``cache_dir``."""

    def __init__(self, roots: list[Path], cache_dir: Path, registry: RegistryPuller | None = None) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.cache_dir = Path(cache_dir)
        self.registry = registry or RegistryPuller(self.cache_dir / "registry")
        self._locks: dict[str, asyncio.Lock] = {}

    def check(self, ref: str, field: str = "image") -> None:
        """Refuses ``ref`` before any work: a malformed registry reference, or a local layout that
        ``resolve`` does not find (INVALID_ARGUMENT/NOT_FOUND naming ``field``)."""
        if is_registry_reference(ref):
            try:
                parse_registry_image(ref)
            except ValueError as error:
                raise invalid(f"{field}: {error}") from None
        else:
            self.resolve(ref, field)

    def resolve(self, ref: str, field: str = "image") -> tuple[Path, str]:
        """Returns (layout dir, tag) of ``oci:<path>:<tag>``; INVALID_ARGUMENT/NOT_FOUND naming ``field``."""
        if not ref.startswith("oci:"):
            raise invalid(f"{field}: {ref!r} is not a local OCI image; use oci:<path>:<tag>")
        body = ref[len("oci:"):]
        path_text, sep, tag = body.rpartition(":")
        if not sep or not path_text or not tag or "/" in tag:
            raise invalid(f"{field}: {ref!r} must be oci:<path>:<tag>")
        path = Path(path_text)
        if ".." in path.parts:
            raise invalid(f"{field}: {ref!r}: '..' is not allowed in image paths")
        candidates = [path] if path.is_absolute() else [root / path for root in self.roots]
        for candidate in candidates:
            resolved = candidate.resolve()
            if not _inside(resolved, self.roots):
                raise invalid(f"{field}: {ref!r} resolves to {resolved}, outside the image roots "
                              f"{[str(r) for r in self.roots]}")
            if (resolved / "index.json").is_file():
                return resolved, tag
        raise not_found(f"{field}: no OCI image layout at {path_text!r} under the image roots "
                        f"{[str(r) for r in self.roots]}")

    @staticmethod
    def digest(layout: Path, tag: str, field: str = "image") -> str:
        """The manifest digest (``sha256:...``) the tag points to; NOT_FOUND if the tag is missing."""
        try:
            index = json.loads((layout / "index.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise invalid(f"{field}: unreadable index.json in {layout}: {exc}") from None
        for desc in index.get("manifests", []):
            if desc.get("annotations", {}).get(REF_ANNOTATION) == tag:
                return str(desc["digest"])
        raise not_found(f"{field}: image {layout} has no tag {tag!r}")

    async def unpack(self, ref: str, field: str = "image") -> UnpackedImage:
        """Resolves and (once per digest) unpacks ``ref``, a local layout or a registry image
        (pulled once per digest by ``registry``); safe under concurrent calls."""
        if is_registry_reference(ref):
            try:
                image = parse_registry_image(ref)
            except ValueError as error:
                raise invalid(f"{field}: {error}") from None
            unpacked = self.cache_dir / (image.digest or "").replace(":", "_")
            if image.digest and (unpacked / "config.json").is_file():  # unpacked already: no pull
                config = json.loads((unpacked / "config.json").read_text())
                return UnpackedImage(digest=image.digest, rootfs=unpacked / "rootfs", config=config)
            layout, tag = await self.registry.layout_of(image, field)
        else:
            layout, tag = self.resolve(ref, field)
        digest = self.digest(layout, tag, field)
        target = self.cache_dir / digest.replace(":", "_")
        lock = self._locks.setdefault(digest, asyncio.Lock())
        async with lock:
            if not (target / "config.json").is_file():
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                tmp = self.cache_dir / f".tmp-{uuid.uuid4().hex}"
                try:
                    result = await proc.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(tmp)],
                                            timeout=300)
                    if not result.ok:
                        raise internal(f"{field}: cannot unpack {ref}: {result.describe()}")
                    if target.exists():
                        shutil.rmtree(target)
                    tmp.rename(target)
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
        config = json.loads((target / "config.json").read_text())
        return UnpackedImage(digest=digest, rootfs=target / "rootfs", config=config)
