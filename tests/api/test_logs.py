"""`ate logs` through the real api-server: a node ships an actor's lines (`POST /v1/nodes/{node}/logs`),
a reader gets them back (`GET .../actors/{name}/logs`) in order with the actor's lifecycle events
between them, bounded per actor, and follows them; bad input and foreign nodes change nothing.
(The atelet's side, and the whole path across a suspend, are tests/atelet/test_output.py and
tests/e2e/test_logs.py.)"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from domain.refs import ActorRef
from domain.templates import ActorTemplateSpec
from store import Store
from tests.api.conftest import stored_state
from tests.credentials import BOOTSTRAP_HEADERS

WORKER = {"name": "default-0", "pool": "default", "ip": "10.99.0.2", "cpu_millis": 1000, "memory_bytes": 2**30}
SPEC = {"containers": [{"name": "c", "image": "oci:x:latest", "port": 8080}],
        "snapshotConfig": {"storageLocation": "file:///snap"}}  # fmt: skip


async def running_actor(api: httpx.AsyncClient, store: Store, atespace: str, node: str) -> tuple[ActorRef, str]:
    """An actor RUNNING on node `node`'s worker default-0 (its resume recorded `ok`), and that
    worker's name as the node ships it."""
    worker = {**WORKER, "labels": {"lognode": node}}
    registered = await api.put(f"/v1/nodes/{node}", json={"address": "10.0.0.9:8085", "workers": [worker]})
    assert registered.status_code == 200, registered.text
    ref = ActorRef(atespace, "a1")
    await store.atespaces.create(atespace)
    await store.templates.create(atespace, "t", ActorTemplateSpec.from_document(SPEC))
    golden = await store.golden_snapshots.begin(atespace, "t", f"golden-{atespace}")
    await store.golden_snapshots.complete(atespace, "t", golden.snapshot.snapshot_id, {"files": []}, 10)
    await store.actors.create(ref, "t", {"lognode": node})
    plan = await store.resumes.begin(ref, f"resume-{atespace}")
    await store.resumes.finish(ref, f"resume-{atespace}")
    assert plan.worker is not None and plan.worker.node == node
    return ref, f"default/{plan.worker.name}"


def batch(worker: str, atespace: str, lines: list[tuple[int, str]], *, log_id: str = "log-1",
          time: datetime | None = None) -> dict[str, Any]:  # fmt: skip
    at = time or datetime.now(UTC)
    return {"worker": worker, "actor": {"atespace": atespace, "name": "a1"}, "log_id": log_id,
            "lines": [{"time": at.isoformat(), "offset": o, "line": text} for o, text in lines]}  # fmt: skip


def records(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line]


def texts(found: list[dict[str, Any]]) -> list[str]:
    return [r["line"] if r["type"] == "line" else f"[ate] {r['event']}" for r in found]


async def test_lines_come_back_in_order_once_with_the_lifecycle_between(api: httpx.AsyncClient, api_store: Store) -> None:
    _, worker = await running_actor(api, api_store, "lg", "lognode1")
    path = "/v1/atespaces/lg/actors/a1/logs"
    started = datetime.now(UTC)
    shipped = await api.post("/v1/nodes/lognode1/logs", json=batch(worker, "lg", [(0, "hello"), (6, "world")]))
    assert shipped.json() == {"accepted": True}
    # a repeat (the node did not get the answer) and a later batch: each line once, in order
    await api.post("/v1/nodes/lognode1/logs", json=batch(worker, "lg", [(6, "world"), (12, "third")]))
    found = records(await api.get(path))
    # the resume finished before the lines were read: its event comes first
    assert texts(found) == [f"[ate] resumed on {worker}", "hello", "world", "third"]
    line = next(r for r in found if r["type"] == "line")
    assert line["node"] == "lognode1" and line["worker"] == worker and line["stream"] == "output"
    assert datetime.fromisoformat(line["time"]) >= started - timedelta(seconds=1)
    # --tail 2: the newest two lines only
    assert [r["line"] for r in records(await api.get(path, params={"tail": 2})) if r["type"] == "line"] == \
        ["world", "third"]  # fmt: skip
    # --since: a line read two hours ago is left out by --since 1h
    old = datetime.now(UTC) - timedelta(hours=2)
    await api.post("/v1/nodes/lognode1/logs", json=batch(worker, "lg", [(0, "old")], log_id="log-0", time=old))
    recent = [r["line"] for r in records(await api.get(path, params={"since": "1h"})) if r["type"] == "line"]
    assert recent == ["hello", "world", "third"]
    assert "old" in [r["line"] for r in records(await api.get(path)) if r["type"] == "line"]
    # a suspend shows as an event after the lines (the history's own record of it)
    await api_store.pool.execute(
        "INSERT INTO operations (operation_id, atespace, actor, operation, outcome, reason, finished_at) "
        "VALUES ('sus-lg', 'lg', 'a1', 'SuspendActor', 'ok', 'idle for 300 s', now())")
    assert texts(records(await api.get(path)))[-1] == "[ate] suspended: idle for 300 s"


async def test_a_node_may_write_only_its_own_actors_output(api: httpx.AsyncClient, api_store: Store) -> None:
    _, worker = await running_actor(api, api_store, "lf", "lognode2")
    other = await api.put("/v1/nodes/lognode3", json={"address": "10.0.0.10:8085", "workers": [WORKER]})
    assert other.status_code == 200
    refused = await api.post("/v1/nodes/lognode3/logs", json=batch("default/default-0", "lf", [(0, "forged")]))
    assert refused.status_code == 200 and refused.json() == {"accepted": False}
    unknown = await api.post("/v1/nodes/lognode2/logs", json={**batch(worker, "lf", [(0, "x")]),
                                                              "actor": {"atespace": "lf", "name": "nosuch"}})  # fmt: skip
    assert unknown.json() == {"accepted": False}
    # a token, even a cluster admin's, is not the node
    async with httpx.AsyncClient(base_url=api.base_url, headers=BOOTSTRAP_HEADERS) as admin:
        as_admin = await admin.post("/v1/nodes/lognode2/logs", json=batch(worker, "lf", [(0, "x")]))
    assert as_admin.status_code == 403, as_admin.text
    assert await api_store.pool.fetchval("SELECT count(*) FROM actor_log_lines WHERE atespace = 'lf'") == 0
    # once the actor has left its worker, the node that shipped its newest line may still send the
    # rest (lines read just before the suspend); no other node may
    assert (await api.post("/v1/nodes/lognode2/logs", json=batch(worker, "lf", [(0, "mine")]))).json()["accepted"]
    await api_store.pool.execute("UPDATE actors SET state = 'SUSPENDED', worker_id = NULL WHERE atespace = 'lf'")
    late = await api.post("/v1/nodes/lognode2/logs", json=batch(worker, "lf", [(5, "late")]))
    assert late.json() == {"accepted": True}
    foreign = await api.post("/v1/nodes/lognode3/logs", json=batch("default/default-0", "lf", [(0, "forged")]))
    assert foreign.json() == {"accepted": False}
    stored = await api_store.pool.fetch("SELECT line FROM actor_log_lines WHERE atespace = 'lf' ORDER BY seq")
    assert [r["line"] for r in stored] == ["mine", "late"]


async def test_bad_log_requests_say_what_is_wrong_and_change_nothing(api: httpx.AsyncClient, api_store: Store) -> None:
    await api_store.atespaces.create("lb")
    await api_store.templates.create("lb", "t", ActorTemplateSpec.from_document(SPEC))
    await api_store.actors.create(ActorRef("lb", "a1"), "t", {})
    before = await stored_state(api_store)
    never = await api.get("/v1/atespaces/lb/actors/a1/logs")
    assert never.status_code == 409, never.text
    assert never.json()["message"] == (
        "actor lb/a1 has never run, so it has no output yet: send it a request or run `ate resume actor a1 "
        "-a lb`, then ask again (`ate logs -f` waits for its first line)")
    missing = await api.get("/v1/atespaces/lb/actors/nosuch/logs")
    assert missing.status_code == 404, missing.text
    for params, field in (({"since": "10x"}, "since"), ({"since": "-5m"}, "since"), ({"tail": -1}, "tail"),
                          ({"tail": 100_001}, "tail"), ({"follow": "perhaps"}, "follow")):  # fmt: skip
        refused = await api.get("/v1/atespaces/lb/actors/a1/logs", params=params)
        assert refused.status_code == 400 and field in refused.text, (params, refused.text)
    since = await api.get("/v1/atespaces/lb/actors/a1/logs", params={"since": "10x"})
    assert since.json()["message"] == (
        "since: '10x' is not a duration; give a positive number and a unit s, m, h or d, e.g. 10m or 2h")
    too_long = await api.post("/v1/nodes/lognode1/logs", json=batch("default/default-0", "lb", [(0, "x" * 16385)]))
    assert too_long.status_code == 400, too_long.text
    assert await stored_state(api_store) == before


async def test_each_actor_keeps_its_newest_lines_up_to_the_bound(api: httpx.AsyncClient, api_store: Store) -> None:
    ref, worker = await running_actor(api, api_store, "lk", "lognode4")
    line = "y" * 1023  # 1024 bytes with its newline
    for start in range(0, 1200, 300):  # 1200 KiB shipped; the api-server keeps 1 MiB (its default)
        lines = [(i * 1024, line) for i in range(start, start + 300)]
        assert (await api.post("/v1/nodes/lognode4/logs", json=batch(worker, "lk", lines))).json()["accepted"]
    kept = await api_store.pool.fetch(
        "SELECT \"offset\" FROM actor_log_lines WHERE atespace = 'lk' ORDER BY seq")
    assert len(kept) == 1024  # 1 MiB / 1024 bytes
    assert kept[0]["offset"] == (1200 - 1024) * 1024 and kept[-1]["offset"] == 1199 * 1024
    # deleting the actor deletes its output (once suspended: what the suspend's finish leaves)
    await api_store.pool.execute("UPDATE actors SET state = 'SUSPENDED', worker_id = NULL WHERE atespace = 'lk'")
    await api_store.actors.delete(ref)
    assert await api_store.pool.fetchval("SELECT count(*) FROM actor_log_lines WHERE atespace = 'lk'") == 0


async def test_follow_sends_what_comes_until_the_client_goes(api: httpx.AsyncClient, api_store: Store) -> None:
    _, worker = await running_actor(api, api_store, "lw", "lognode5")
    await api.post("/v1/nodes/lognode5/logs", json=batch(worker, "lw", [(0, "before")]))
    got: list[dict[str, Any]] = []

    async def follow() -> None:
        async with api.stream("GET", "/v1/atespaces/lw/actors/a1/logs", params={"follow": "true", "tail": 1},
                              timeout=httpx.Timeout(30)) as response:  # fmt: skip
            assert response.status_code == 200
            async for text in response.aiter_lines():
                if text:
                    got.append(json.loads(text))
                if any(r.get("line") == "after" for r in got):
                    return

    reader = asyncio.create_task(follow())
    await asyncio.sleep(1.0)
    await api.post("/v1/nodes/lognode5/logs", json=batch(worker, "lw", [(7, "after")]))
    await asyncio.wait_for(reader, 15)
    assert [r["line"] for r in got if r["type"] == "line"] == ["before", "after"]
