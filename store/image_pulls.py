"""Pull progress (`domain.image_pulls`): what the nodes report about their pulls of registry
images, for the templates that run those images to show while Pending."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from domain.image_pulls import PullProgress, PullState
from store.sql import QUERIES as Q


@dataclass(frozen=True)
class ImagePull:
    """A node's latest look at its pull of `image`."""

    node: str
    image: str
    progress: PullProgress
    updated_at: datetime


class ImagePulls:
    """record, of_images."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def record(self, node: str, image: str, progress: PullProgress) -> bool:
        """Replace `node`'s look at its pull of `image`; False (nothing stored) for an unknown node."""
        done = await self.pool.fetchval(Q["record_image_pull"], node, image, progress.state.value, progress.layers,
                                        progress.bytes_total, progress.bytes_done, progress.message)  # fmt: skip
        return done is not None

    async def of_images(self, images: list[str]) -> list[ImagePull]:
        """The latest looks of every node at its pulls of `images`, newest first."""
        if not images:
            return []
        rows = await self.pool.fetch(Q["image_pulls_of"], images)
        return [ImagePull(r["node"], r["image"], PullProgress(r["layers"], r["bytes_total"], r["bytes_done"],
                                                              PullState(r["state"]), r["message"]), r["updated_at"])
                for r in rows]  # fmt: skip
