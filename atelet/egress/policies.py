"""The actors' egress policies, fetched from the API server and kept for a second.

``GET {api_server}/v1/nodes/{node}/workers/{worker}/actors/{atespace}/{name}/egress`` with the
node's credentials answers the policy in force for the actor that worker holds, in the document
form ``domain.egress.parse_egress_policy`` reads, each credential carrying its secret's
plaintext as ``value``: ``{"allow": [...], "credentials": [{"host", "header", "secret",
"value"}]}``; 404 or 409 when that worker does not hold that actor now.

A fetched policy is used for ``ttl`` seconds (``egress_policy_seconds``, 1 s by default), so a
policy changed at the API applies to the connections opened from then on, at most that long
later. Lookups of one actor in flight at once share one fetch. Any failure (the API down, a
refusal, a document the node cannot read) denies: the answer is a ``Refusal`` saying why,
kept for ``ttl`` too so a failing API is not asked once per connection (but "the worker does
not hold the actor", which may be the control plane recording the placement in that moment).

Secret values stay in this process's memory (and Squid's, per transaction): never logged
(``FetchedPolicy`` hides them from ``repr``), never written to a file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from domain.egress import EgressPolicy, parse_egress_policy
from domain.idle import PolicyError

log = logging.getLogger(__name__)

NOT_HELD = "not held"
"""The rule of a refusal because the API says the worker does not hold the actor (not cached)."""


@dataclass(frozen=True)
class FetchedPolicy:
    """An actor's policy and its credentials' secret values by credential host."""

    policy: EgressPolicy
    values: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Refusal:
    """Why no policy could be had: the rule (short, for metrics) and the message for the actor."""

    rule: str
    message: str


def read_document(document: Any) -> FetchedPolicy:
    """The ``FetchedPolicy`` of the egress route's answer, ``{"allow", "source", "credentials":
    [{"host", "header", "secret", "value", "problem"}]}`` (docs/rest-api.md): ``value`` the
    secret's value, or null with ``problem`` saying why (the secret is gone); ``source`` is
    not used.

    Raises:
        PolicyError: the document is not a policy (naming the field), or a credential's value is
            not a string.
    """
    if not isinstance(document, dict):
        raise PolicyError("egress", "", "the answer is not a mapping")
    credentials = document.get("credentials") or []
    values: dict[str, str] = {}
    stripped = []
    for index, credential in enumerate(credentials if isinstance(credentials, list) else []):
        if isinstance(credential, dict):
            credential = dict(credential)
            value = credential.pop("value", None)
            problem = credential.pop("problem", None)
            if value is None and isinstance(problem, str):
                pass  # no value (its secret is gone): a request to its host is refused (decision.decide)
            elif not isinstance(value, str):
                raise PolicyError("egress", f"credentials[{index}].value", "must be the secret's value as a string")
            elif isinstance(credential.get("host"), str):
                values[credential["host"].lower().rstrip(".")] = value
        stripped.append(credential)
    policy = parse_egress_policy({"allow": document.get("allow") or [], "credentials": stripped})
    return FetchedPolicy(policy, values)


class PolicySource:
    """Fetches and caches the policy of the actor each worker holds.

    Args:
        node: this node's name (the route's ``{node}``).
        api_server: the API server's URL.
        auth: the node's credentials (``atelet.node_identity.NodeCredentials``).
        ttl: how long a fetched policy (or a refusal) is used, in seconds.
        timeout: the time limit of one fetch, in seconds.
    """

    def __init__(self, node: str, api_server: str, auth: httpx.Auth, ttl: float = 1.0, timeout: float = 5.0) -> None:
        self.node = node
        self.api_server = api_server.rstrip("/")
        self.auth = auth
        self.ttl = ttl
        self.timeout = timeout
        self._cache: dict[tuple[str, str, str], tuple[float, FetchedPolicy | Refusal]] = {}
        self._fetching: dict[tuple[str, str, str], asyncio.Task[FetchedPolicy | Refusal]] = {}
        self._client: httpx.AsyncClient | None = None

    def url(self, worker: str, actor: tuple[str, str]) -> str:
        """The egress route of ``actor`` on ``worker``."""
        return f"{self.api_server}/v1/nodes/{self.node}/workers/{worker}/actors/{actor[0]}/{actor[1]}/egress"

    async def get(self, worker: str, actor: tuple[str, str]) -> FetchedPolicy | Refusal:
        """The policy of ``actor`` on ``worker``: from the cache when fetched less than ``ttl``
        ago, else fetched (one fetch per actor at a time). Never raises."""
        key = (worker, *actor)
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        task = self._fetching.get(key)
        if task is None:
            task = asyncio.create_task(self._fetch(worker, actor))
            self._fetching[key] = task
            task.add_done_callback(lambda _: self._fetching.pop(key, None))
        return await asyncio.shield(task)

    async def _fetch(self, worker: str, actor: tuple[str, str]) -> FetchedPolicy | Refusal:
        started = time.monotonic()
        result = await self._ask(worker, actor)
        if isinstance(result, Refusal) and result.rule == NOT_HELD:
            return result  # not kept: the control plane may record the placement any moment now
        self._cache[(worker, *actor)] = (started, result)
        if len(self._cache) > 4096:  # forget the oldest (workers change actors; names come and go)
            for stale in sorted(self._cache, key=lambda k: self._cache[k][0])[:1024]:
                del self._cache[stale]
        return result

    async def _ask(self, worker: str, actor: tuple[str, str]) -> FetchedPolicy | Refusal:
        name = f"{actor[0]}/{actor[1]}"
        try:
            answer = await self._http().get(self.url(worker, actor))
        except httpx.HTTPError as error:
            log.warning("egress: the policy of %s could not be fetched: %s", name, error)
            return Refusal("control plane unavailable", f"the control plane did not give the policy of {name}; "
                           "try again shortly")  # fmt: skip
        if answer.status_code in (404, 409):
            return Refusal(NOT_HELD, f"the control plane says worker {worker} does not hold {name} now")
        if answer.status_code != 200:
            log.warning("egress: the policy of %s: the API answered %d", name, answer.status_code)
            return Refusal("control plane refused", f"the control plane refused the policy of {name} "
                           f"({answer.status_code})")  # fmt: skip
        try:
            return read_document(answer.json())
        except ValueError as error:  # never the document itself: it holds secrets (a PolicyError never does)
            log.warning("egress: the policy of %s is not readable: %s", name,
                        error if isinstance(error, PolicyError) else "not JSON")  # fmt: skip
            return Refusal("unreadable policy", f"the node cannot read the policy of {name}")

    def forget(self, worker: str, actor: tuple[str, str]) -> None:
        """Drops what is cached for ``actor`` on ``worker`` (the next lookup fetches)."""
        self._cache.pop((worker, *actor), None)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), auth=self.auth)
        return self._client

    async def close(self) -> None:
        """Closes the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
