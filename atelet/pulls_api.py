"""What the node's image pulls ask of the API and tell it (issue 29), over the node's own
authenticated channel, one short request each (a pull is rare; no connection is kept).

- ``ApiPullCredentials`` (``RegistryPuller.credentials``): ``GET /v1/nodes/{node}/image-credentials
  ?image=...``, the credentials of the pull secrets that the templates running the image list for
  its registry. Used for that one pull and kept nowhere (not on disk beyond the pull's own auth
  file, never in a log). When the API cannot be asked, the pull goes on anonymously and, should
  the registry refuse it, its error says why no credentials were used.
- ``ApiPullProgress`` (``RegistryPuller.progress``): each look at a pull (layers, bytes so far, how
  it ended) to ``PUT /v1/nodes/{node}/pulls``, so that a Pending template shows it. A report that
  cannot be sent is dropped (the next look sends a newer one); it never raises and never holds a
  pull up for long.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx

from domain.image_pulls import PullProgress
from domain.image_references import RegistryImage
from domain.registry_credentials import RegistryCredentials, of_document

log = logging.getLogger(__name__)


class NodeRoute:
    """One route of the API under ``/v1/nodes/{node}/``.

    Args:
        api_server: the API's base URL.
        node: this node's name.
        auth: the node's credentials towards the API.
        route: the route's last part, e.g. ``pulls``.
        timeout: seconds one request may take.
    """

    def __init__(self, api_server: str, node: str, auth: httpx.Auth, route: str, timeout: float) -> None:
        self.url = f"{api_server.rstrip('/')}/v1/nodes/{quote(node, safe='')}/{route}"
        self.auth = auth
        self.timeout = timeout


class ApiPullCredentials(NodeRoute):
    """A ``CredentialSource`` (``atelet.registry``) backed by the API (module doc)."""

    def __init__(self, api_server: str, node: str, auth: httpx.Auth, timeout: float = 10.0) -> None:
        super().__init__(api_server, node, auth, "image-credentials", timeout)

    async def __call__(self, image: RegistryImage) -> tuple[list[RegistryCredentials], list[str]]:
        """(the credentials for ``image``, the problems of those the API could not give or that
        were malformed); never raises."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout, auth=self.auth) as client:
                answer = await client.get(self.url, params={"image": str(image)})
            document = answer.json() if answer.is_success else None
        except (httpx.HTTPError, ValueError) as error:
            return [], [f"the API could not be asked for pull credentials ({type(error).__name__}: {error})"]
        if not isinstance(document, dict):
            return [], [f"the API answered {answer.status_code} when asked for pull credentials"]
        found: list[RegistryCredentials] = []
        problems = [str(p) for p in document.get("problems") or []]
        for entry in document.get("credentials") or []:
            try:
                found.append(of_document(entry))
            except ValueError as error:
                problems.append(str(error))
        return found, problems


class ApiPullProgress(NodeRoute):
    """A ``ProgressSink`` (``atelet.registry``) that reports to the API (module doc)."""

    def __init__(self, api_server: str, node: str, auth: httpx.Auth, timeout: float = 2.0) -> None:
        super().__init__(api_server, node, auth, "pulls", timeout)

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
