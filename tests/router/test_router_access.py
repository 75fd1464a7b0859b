"""Per-template access at the router (issue 11, "Router"): `public` lets anyone through; `token`
wants a bearer token (header, or cookie `ate-token`) that the API's access review says reaches
the actor. The credential is stripped before the actor sees the request unless the template
passes it on, and an unknown actor looks exactly like a forbidden one to a caller without access.

The API here is the router tests' stand-in (tests/router/router_harness.py); the real API's
access review is tested in tests/api/test_access.py, and both together in tests/e2e.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.router.conftest import StartRouter

TARGET = {"ate-target-actor": "demo/c1"}
DATA_PATHS = ("python", "nginx")
GOOD = "ate_0123456789ab_reaches-c1"
OTHER = "ate_0123456789ab_reaches-c2"


async def protected(start_router: StartRouter, **access: Any) -> Any:
    env = await start_router()
    env.api.access = {"mode": "token", "passCredential": False, **access}
    env.api.grants = {GOOD: {"demo/c1"}, OTHER: {"demo/c2"}}
    env.api.missing = {"demo/nobody"}
    return env


def forwarded_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.json()["headers"]}


async def test_a_public_template_needs_nothing_and_its_actor_sees_no_credential(start_router: StartRouter) -> None:
    env = await start_router()
    response = await env.client.get(
        "/", headers={**TARGET, "Authorization": f"Bearer {GOOD}", "Cookie": "x=1; ate-token=t"}
    )
    assert response.status_code == 200
    seen = forwarded_headers(response)
    assert "authorization" not in seen and seen["cookie"] == "x=1"
    assert env.api.reviews == []


async def test_a_token_template_refuses_without_a_token(start_router: StartRouter) -> None:
    env = await protected(start_router)
    response = await env.client.get("/", headers=TARGET)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == (
        "actor demo/c1: not found, or it needs a bearer token (header 'Authorization: Bearer <token>' or "
        "cookie ate-token); `ate create token --grant user:demo/c1` makes one\n"
    )
    assert env.api.calls["demo/c1"] == 0  # refused before any resume: no one wakes an actor for free


async def test_a_token_template_refuses_a_bad_token_and_a_token_of_another_actor(start_router: StartRouter) -> None:
    env = await protected(start_router)
    bad = await env.client.get("/", headers={**TARGET, "Authorization": "Bearer ate_0123456789ab_wrong"})
    assert bad.status_code == 401 and bad.text == "actor demo/c1: not found, or the bearer token is not valid\n"
    other = await env.client.get("/", headers={**TARGET, "Authorization": f"Bearer {OTHER}"})
    assert other.status_code == 403
    assert other.text == "actor demo/c1: not found, or this token does not grant access to it\n"
    assert env.api.calls["demo/c1"] == 0


async def test_a_good_token_passes_by_header_or_cookie_and_is_stripped(start_router: StartRouter) -> None:
    env = await protected(start_router)
    by_header = await env.client.get("/", headers={**TARGET, "Authorization": f"Bearer {GOOD}"})
    assert by_header.status_code == 200
    assert "authorization" not in forwarded_headers(by_header)
    by_cookie = await env.client.get("/", headers={**TARGET, "Cookie": f"theme=dark; ate-token={GOOD}; lang=en"})
    assert by_cookie.status_code == 200
    assert forwarded_headers(by_cookie)["cookie"] == "theme=dark; lang=en"


async def test_a_template_may_pass_the_credential_on(start_router: StartRouter) -> None:
    env = await protected(start_router, passCredential=True)
    response = await env.client.get("/", headers={**TARGET, "Authorization": f"Bearer {GOOD}"})
    assert response.status_code == 200
    assert forwarded_headers(response)["authorization"] == f"Bearer {GOOD}"


async def test_an_unknown_actor_looks_like_a_forbidden_one(start_router: StartRouter) -> None:
    env = await protected(start_router)
    nobody, known = {"ate-target-actor": "demo/nobody"}, TARGET
    for headers in ({}, {"Authorization": "Bearer ate_0123456789ab_wrong"}, {"Authorization": f"Bearer {OTHER}"}):
        unknown = await env.client.get("/", headers={**nobody, **headers})
        forbidden = await env.client.get("/", headers={**known, **headers})
        assert unknown.status_code == forbidden.status_code
        assert unknown.text.replace("demo/nobody", "demo/c1") == forbidden.text
        assert set(unknown.headers) == set(forbidden.headers)


async def test_reviews_are_cached_so_the_hot_path_asks_the_api_once(start_router: StartRouter) -> None:
    env = await protected(start_router)
    for _ in range(5):
        assert (await env.client.get("/", headers={**TARGET, "Authorization": f"Bearer {GOOD}"})).status_code == 200
    assert len(env.api.reviews) == 1 and env.api.actor_calls == 1 and env.api.template_calls == 1


async def test_a_change_of_state_keeps_the_actors_template_and_a_deletion_forgets_it(start_router: StartRouter) -> None:
    # An actor's template is fixed for its life: after a freeze or a suspend its next request
    # asks the API only for the resume, not again for the template. A deletion (the name may be
    # made again from another template) and a creation after a lookup found nothing do not keep it.
    env = await start_router()
    cache = env.router.core.cache
    assert (await env.client.get("/", headers=TARGET)).status_code == 200
    assert env.api.actor_calls == 1
    for state in ("FROZEN", "RUNNING", "SUSPENDING", "SUSPENDED", "RESUMING", "RUNNING"):
        cache.on_notification(f"demo/c1 {state}")  # as NOTIFY ate_actor_changes brings it
        assert (await env.client.get("/", headers=TARGET)).status_code == 200
    assert env.api.actor_calls == 1
    cache.on_notification("demo/c1 DELETED")
    assert (await env.client.get("/", headers=TARGET)).status_code == 200
    assert env.api.actor_calls == 2
    env.api.missing = {"demo/c2"}
    other = {"ate-target-actor": "demo/c2"}
    assert (await env.client.get("/", headers=other)).status_code == 401  # unknown: as if forbidden
    calls = env.api.actor_calls
    env.api.missing = set()
    cache.on_notification("demo/c2 SUSPENDED")  # it was created
    assert (await env.client.get("/", headers=other)).status_code == 200
    assert env.api.actor_calls == calls + 1
