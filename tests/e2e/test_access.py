"""Access end to end, as a platform team would try it on `ate dev`: the CLI's tokens (create,
list, use, revoke), an atespace admin kept to its atespace, and a template whose actors only a
token holder reaches through the router, an unknown actor looking the same as a forbidden one.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ATE, REPO, Stack

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def ate_as(stack: Stack, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with `token` in ATE_TOKEN (and no config), as a CI job would run it."""
    env = {**os.environ, "ATE_TOKEN": token, "ATE_CONFIG": str(stack.data_dir / "no-config.yaml")}
    return subprocess.run([ATE, "--server", stack.api, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def created_token(stack: Stack, *args: str) -> tuple[str, str]:
    """`ate create token ...`: (id, token)."""
    done = stack.ate("create", "token", *args)
    first, secret = done.stdout.splitlines()[:2]
    assert first.startswith("token/") and " created (" in first, done.stdout
    assert "it is not shown again" in done.stderr
    return first.split("/", 1)[1].split(" ", 1)[0], secret


def test_tokens_from_the_cli(stack: Stack) -> None:
    stack.ate("create", "atespace", "acl-a")
    stack.ate("create", "atespace", "acl-b")
    whoami = stack.ate("auth", "whoami").stdout
    assert "token" in whoami and "cluster-admin" in whoami

    admin_id, admin = created_token(stack, "acl-a-admin", "--grant", "admin:acl-a", "--expires-in", "1h")
    listed = json.loads(stack.ate("get", "tokens", "-o", "json").stdout)["items"]
    mine = next(t for t in listed if t["token_id"] == admin_id)
    assert mine["grants"] == ["admin:acl-a"] and mine["expires_at"] is not None
    assert admin not in json.dumps(listed)

    assert ate_as(stack, admin, "get", "actors", "-a", "acl-a").returncode == 0
    refused = ate_as(stack, admin, "get", "actors", "-a", "acl-b")
    assert refused.returncode == 1 and refused.stderr.strip() == "error: token lacks viewer on atespace acl-b"
    refused = ate_as(stack, admin, "create", "token", "x", "--grant", "viewer:acl-b")
    assert refused.stderr.strip() == "error: grants[0] (viewer:acl-b): token lacks admin on atespace acl-b"
    assert ate_as(stack, admin, "create", "token", "ci", "--grant", "operator:acl-a").returncode == 0

    stack.ate("delete", "token", admin_id)
    refused = ate_as(stack, admin, "get", "actors", "-a", "acl-a")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: the bearer token is not valid (unknown, expired or revoked)"

    anonymous = subprocess.run(
        [ATE, "--server", stack.api, "get", "atespaces"], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if k != "ATE_TOKEN"}, "ATE_CONFIG": str(stack.data_dir / "none.yaml")},
    )  # fmt: skip
    assert anonymous.returncode == 1
    assert "no token configured: set ATE_TOKEN, or a context in the ate config" in anonymous.stderr


def test_a_token_template_keeps_its_actors_to_token_holders(stack: Stack, tmp_path: Path) -> None:
    template = (REPO / "examples/counter/template.yaml").read_text() + "  access: {mode: token}\n"
    (tmp_path / "private.yaml").write_text(template)
    stack.ate("create", "atespace", "private")
    stack.ate("create", "template", "counter", "-a", "private", "-f", str(tmp_path / "private.yaml"))
    stack.ate("create", "actor", "p1", "-a", "private", "--template", "counter")
    _, p1_user = created_token(stack, "p1-user", "--grant", "user:private/p1")
    _, other_user = created_token(stack, "p2-user", "--grant", "user:private/p2")

    def through_router(actor: str, **headers: str) -> httpx.Response:
        return httpx.get(stack.router + "/", headers={"ate-target-actor": actor, **headers}, timeout=60)

    anonymous = through_router("private/p1")
    assert anonymous.status_code == 401 and anonymous.text.startswith("actor private/p1: not found, or it needs a bearer token")
    unknown = through_router("private/nobody")
    assert unknown.status_code == 401 and unknown.text == anonymous.text.replace("private/p1", "private/nobody")
    other = through_router("private/p1", Authorization=f"Bearer {other_user}")
    assert other.status_code == 403
    unknown = through_router("private/nobody", Authorization=f"Bearer {other_user}")
    assert unknown.status_code == 403 and unknown.text == other.text.replace("private/p1", "private/nobody")
    assert json.loads(stack.ate("get", "actor", "p1", "-a", "private", "-o", "json").stdout)["state"] == "SUSPENDED"

    served = through_router("private/p1", Authorization=f"Bearer {p1_user}")
    assert served.status_code == 200, served.text
    first = served.json()["memory_count"]
    by_cookie = through_router("private/p1", Cookie=f"ate-token={p1_user}")
    assert by_cookie.status_code == 200 and by_cookie.json()["memory_count"] == first + 1
    stack.ate("suspend", "actor", "p1", "-a", "private")


def test_the_router_and_cli_files_ate_dev_wrote_are_private(stack: Stack) -> None:
    # secret-keys: the api-server's key ring for secrets, private like the tokens
    credentials = stack.data_dir / "credentials"
    # egress-ca.*: the CA the atelet's egress proxy signs with (its key would let one impersonate any host to actors)
    assert sorted(p.name for p in credentials.iterdir()) == ["bootstrap-token", "egress-ca.crt", "egress-ca.key",
                                                             "local-admin.token", "router.token", "secret-keys"]  # fmt: skip
    assert {p.stat().st_mode & 0o777 for p in credentials.iterdir()} == {0o600}
    assert stack.config.stat().st_mode & 0o777 == 0o600
    assert f"token-file: {credentials / 'local-admin.token'}" in stack.config.read_text()
