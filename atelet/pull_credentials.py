"""The node's pull credentials (issue 29): what ``RegistryPuller.credentials`` asks before a pull.

``ApiPullCredentials`` asks the API which credentials this node may pull an image with (``GET
/v1/nodes/{node}/image-credentials?image=...``, the node's own authenticated channel): those of
the pull secrets that the templates running the image list for its registry. They are used for
that one pull and kept nowhere (not on disk beyond the pull's own auth file, never in a log).
When the API cannot be asked, the pull goes on anonymously and, should the registry refuse it,
its error says why no credentials were used.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx

from domain.image_references import RegistryImage
from domain.registry_credentials import RegistryCredentials, of_document

log = logging.getLogger(__name__)


class ApiPullCredentials:
    """A ``CredentialSource`` (``atelet.registry``) backed by the API.

    Args:
        api_server: the API's base URL.
        node: this node's name.
        auth: the node's credentials towards the API.
        timeout: seconds one question may take.
    """

    def __init__(self, api_server: str, node: str, auth: httpx.Auth, timeout: float = 10.0) -> None:
        self.url = f"{api_server.rstrip('/')}/v1/nodes/{quote(node, safe='')}/image-credentials"
        self.auth = auth
        self.timeout = timeout

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
