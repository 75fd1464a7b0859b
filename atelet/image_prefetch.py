"""The node's pre-pull of registry images (issue 29): so that a first resume on this node does not
wait for a pull, the atelet asks the API every ``image_prefetch_seconds`` which registry images
the templates its workers can run name (``GET /v1/nodes/{node}/images``: pinned to their
digests) and pulls and unpacks each it lacks, one at a time, in the background
(``ImageStore.unpack``: nothing is done for one already unpacked). Failures are logged and tried
again at the next round; this loop never raises (except on cancellation).
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from atelet.errors import AteletError
from atelet.images import ImageStore
from domain.image_references import is_registry_reference

log = logging.getLogger(__name__)


async def prefetch_once(client: httpx.AsyncClient, url: str, images: ImageStore) -> list[str]:
    """One round: the images asked for, and each pulled and unpacked unless it is already;
    returns those now unpacked on the node."""
    try:
        answer = await client.get(url)
        listed = answer.json().get("images") if answer.is_success else None
    except (httpx.HTTPError, ValueError) as error:
        log.warning("image pre-pull: the list of images could not be read from %s: %s", url, error)
        return []
    if not isinstance(listed, list):
        log.warning("image pre-pull: %s answered %s without a list of images", url, answer.status_code)
        return []
    ready = []
    for image in listed:
        if not isinstance(image, str) or not is_registry_reference(image):
            continue
        try:
            await images.unpack(image, "image")
            ready.append(image)
        except AteletError as error:
            log.warning("image pre-pull: %s", error.reason)
    return ready


async def prefetch_loop(api_server: str, node: str, auth: httpx.Auth, images: ImageStore, interval: float) -> None:
    """``prefetch_once`` now and then every ``interval`` seconds until cancelled."""
    url = f"{api_server.rstrip('/')}/v1/nodes/{node}/images"
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0), auth=auth) as client:
        while True:
            done = await prefetch_once(client, url, images)
            if done:
                log.debug("image pre-pull: %d image(s) on the node", len(done))
            await asyncio.sleep(interval)
