"""`X-Request-Id` (kept when the client sent a well-formed one, made otherwise; the actor, the
client and the router's log all see the same) and `X-Forwarded-For` (appended only when the
client is a trusted proxy, replaced otherwise: a client must not choose the address the actor
sees)."""

from __future__ import annotations

import logging
import re

import pytest

from tests.router.conftest import StartRouter

H = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")


def seen_by_actor(response: object) -> dict[str, str]:
    return dict(response.json()["headers"])  # type: ignore[attr-defined]


async def test_a_request_without_an_id_gets_one_the_actor_sees_too(
    start_router: StartRouter, caplog: pytest.LogCaptureFixture
) -> None:
    env = await start_router()
    with caplog.at_level(logging.INFO, logger="router.python.app"):
        response = await env.client.get("/echo", headers=H)
    request_id = response.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert seen_by_actor(response)["x-request-id"] == request_id
    logged = await env.logged(request_id, [r.getMessage() for r in caplog.records])
    assert logged and logged[0].startswith(f"request {request_id} demo/c1 GET /echo 200 parked_ok ")


async def test_a_well_formed_id_is_kept_and_a_malformed_one_replaced(start_router: StartRouter) -> None:
    env = await start_router()
    kept = await env.client.get("/echo", headers={**H, "X-Request-Id": "trace-1234:abc/def"})
    assert kept.headers["x-request-id"] == "trace-1234:abc/def"
    assert seen_by_actor(kept)["x-request-id"] == "trace-1234:abc/def"
    for bad in ("has spaces in it", "x" * 129, "semi;colon"):
        replaced = await env.client.get("/echo", headers={**H, "X-Request-Id": bad})
        assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"])
        assert seen_by_actor(replaced)["x-request-id"] == replaced.headers["x-request-id"]


async def test_the_routers_own_answers_carry_the_id(start_router: StartRouter) -> None:
    env = await start_router()
    env.api.access = {"mode": "token"}
    refused = await env.client.get("/echo", headers={**H, "X-Request-Id": "mine-1"})
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "mine-1"
    bad_target = await env.client.get("/echo", headers={"ate-target-actor": "Bad/Name"})
    assert bad_target.status_code == 400 and "x-request-id" in bad_target.headers


async def test_forwarded_for_is_kept_only_from_a_trusted_proxy(start_router: StartRouter) -> None:
    untrusted = await start_router()
    response = await untrusted.client.get("/echo", headers={**H, "X-Forwarded-For": "203.0.113.9"})
    assert seen_by_actor(response)["x-forwarded-for"] == "127.0.0.1"
    trusted = await start_router(trusted_proxies=["127.0.0.0/8"])
    response = await trusted.client.get("/echo", headers={**H, "X-Forwarded-For": "203.0.113.9"})
    assert seen_by_actor(response)["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"


def test_a_trusted_proxy_that_is_not_a_network_is_refused_naming_the_setting() -> None:
    from router.settings import RouterSettings

    with pytest.raises(ValueError, match=re.escape("trusted_proxies: 'ten.0.0.0/8' is not a network")):
        RouterSettings(trusted_proxies=["ten.0.0.0/8"])
