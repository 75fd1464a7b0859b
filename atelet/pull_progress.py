"""The node's reports of its image pulls (issue 29): ``RegistryPuller.progress`` tells each look
at a pull (layers, bytes so far, how it ended) to ``PUT /v1/nodes/{node}/pulls``, so that a
Pending template shows it. A report that cannot be sent is dropped (the next look sends a newer
one); this never raises and never holds a pull up for long (``timeout``).
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx

from domain.image_pulls import PullProgress
from domain.image_references import RegistryImage

log = logging.getLogger(__name__)


class ApiPullProgress:
    """A ``ProgressSink`` (``atelet.registry``) that reports to the API.

    Args:
        api_server: the API's base URL.
        node: this node's name.
        auth: the node's credentials towards the API.
        timeout: seconds one report may take.
    """

    def __init__(self, api_server: str, node: str, auth: httpx.Auth, timeout: float = 2.0) -> None:
        self.url = f"{api_server.rstrip('/')}/v1/nodes/{quote(node, safe='')}/pulls"
        self.auth = auth
        self.timeout = timeout

    async def __call__(self, image: RegistryImage, progress: PullProgress) -> None:
        """Sends one look; logs (at debug) and drops it when the API does not take it."""
        body = {"image": str(image), "state": progress.state.value, "layers": progress.layers,
                "bytes_total": progress.bytes_total, "bytes_done": progress.bytes_done,
                "message": progress.message[:2000]}  # fmt: skip
        try:
            async with httpx.AsyncClient(timeout=self.timeout, auth=self.auth) as client:  # only while pulling
                answer = await client.put(self.url, json=body)
            if not answer.is_success:
                log.debug("image pull report of %s refused: %s %s", image, answer.status_code, answer.text[:200])
        except httpx.HTTPError as error:
            log.debug("image pull report of %s not sent: %s", image, error)
