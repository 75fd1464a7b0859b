"""The router's API client: a template is read from the API once, however its callers interleave."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from router.core.api_client import ApiClient


def _template_api(reads: list[str]) -> httpx.AsyncClient:
    async def api(request: httpx.Request) -> httpx.Response:
        reads.append(request.url.path)
        await asyncio.sleep(0.005)
        return httpx.Response(200, json={
            "atespace": "demo", "name": "web", "phase": "Ready",
            "spec": {"containers": [{"name": "app", "image": "oci:app:latest", "port": 8080}]},
        })

    return httpx.AsyncClient(transport=httpx.MockTransport(api))


@pytest.mark.asyncio
async def test_a_caller_arriving_as_the_read_completes_finds_its_answer() -> None:
    """The single-flight read leaves its table in a done callback, which runs before its waiters
    wake. A caller that arrives in that gap (CI run 24: 20 concurrent first requests on the nginx
    path read the template twice) must find the answer remembered, or it reads again. Checked in
    a callback of the read that runs in exactly that gap."""
    reads: list[str] = []
    client = ApiClient("http://api.invalid", client=_template_api(reads))
    in_the_gap: list[tuple[bool, bool]] = []
    try:
        first = asyncio.ensure_future(client.template_routing("demo", "web"))
        await asyncio.sleep(0)  # the read is in flight
        flight = client._routing_flights[("demo", "web")]
        flight.add_done_callback(lambda _f: in_the_gap.append((
            ("demo", "web") in client._routing_flights,
            ("demo", "web") in client._routings,
        )))
        assert (await first).port == 8080
        assert in_the_gap == [(False, True)]  # left the table, answer already remembered
        assert (await client.template_routing("demo", "web")).port == 8080
    finally:
        await client.aclose()
    assert reads == ["/v1/atespaces/demo/templates/web"]


@pytest.mark.asyncio
async def test_a_template_is_read_once_while_callers_keep_arriving() -> None:
    """One caller started at every step of the event loop until the first read is answered, and
    twenty after: the API sees one read."""
    reads: list[str] = []
    client = ApiClient("http://api.invalid", client=_template_api(reads))
    try:
        callers = [asyncio.ensure_future(client.template_routing("demo", "web"))]
        after = 0
        while after < 20:
            await asyncio.sleep(0)
            callers.append(asyncio.ensure_future(client.template_routing("demo", "web")))
            if callers[0].done():
                after += 1
        ports = {routing.port for routing in await asyncio.gather(*callers)}
    finally:
        await client.aclose()
    assert ports == {8080}
    assert len(reads) == 1, f"the template was read {len(reads)} times by {len(callers)} callers"
