"""The credentials of the test suite's requests to its api-servers: the bootstrap token they are
started with (a cluster-admin credential, as `ate dev` and a cluster's Secret give one), and a
node's certificate-signed JWT for that node's registration and events."""

from __future__ import annotations

import base64
import re
from collections.abc import Generator
from urllib.parse import unquote

import httpx

BOOTSTRAP_TOKEN = "bootstrap-token-of-the-test-suite-0123456789abcdef"
"""At least 32 characters, as the api-server requires."""

BOOTSTRAP_HEADERS = {"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
"""Request headers acting as cluster-admin."""

BOOTSTRAP_ENV = {"ATE_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN}
"""The api-server's environment for it."""

SUITE_SECRET_KEY = bytes(range(32))
"""The suite's api-servers' key for secrets (key id `suite1`): fixed, so a test can open what the
store holds with it and see that the store holds no value in the clear."""

SECRET_KEYS_ENV = {"ATE_SECRET_KEYS": "suite1 " + base64.b64encode(SUITE_SECRET_KEY).decode()}
"""The api-server's environment for its key ring of secrets."""


_NODE_ROUTE = re.compile(r"^/v1/nodes/([^/]+)(/events|/logs)?$")


def node_token(node: str) -> str:
    """What node `node`'s atelet sends the API: a JWT signed with its certificate's key (x5c),
    its certificate from the suite's CA (tests/tls.py)."""
    from atelet.node_identity import NodeCredentials
    from tests.tls import certificates

    files = certificates(node).node(node)
    return NodeCredentials(node, files.cert, files.key).token()


def headers_for(method: str, path: str) -> dict[str, str]:
    """The credential a request to `path` needs: node N's own certificate for node N's
    registration (PUT /v1/nodes/N), events and logs (POST /v1/nodes/N/events, /logs), else the bootstrap
    token. A node name no certificate can carry gets the bootstrap token (and its 403)."""
    found = _NODE_ROUTE.match(path)
    if found and (method, bool(found.group(2))) in (("PUT", False), ("POST", True)):
        try:
            return {"Authorization": f"Bearer {node_token(unquote(found.group(1)))}"}
        except Exception:
            return dict(BOOTSTRAP_HEADERS)
    return dict(BOOTSTRAP_HEADERS)


class SuiteCredentials(httpx.Auth):
    """httpx auth carrying `headers_for` each request."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Set the request's Authorization header."""
        request.headers.update(headers_for(request.method, request.url.path))
        yield request
