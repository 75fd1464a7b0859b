"""A paused actor whose node is full is moved: detach (upload) + placement elsewhere, in one resume.

Two real atelets (runsc): node `dur` (2 workers, pool label `zone: a`, subnet 10.91.0.0/16) and
node `dur2` (2 workers, `zone: b`, subnet 10.92.0.0/16), sharing the snapshot root. Every worker
has one place. What is expected comes from ARCHITECTURE.md ("Actor states", "Placement") and the
PauseActor feature (README, docs/rest-api.md), counted by hand:

- the counter (examples/counter, FULL scope) answers memory_count and file_count, +1 each per
  request; a FULL snapshot (local or uploaded) keeps both;
- a pause checkpoints onto the actor's node: PAUSED, `pinned_node` that node, `local_snapshot` a
  `local:///` generation under that atelet's `<state_dir>/local-snapshots`; generations count
  every snapshot of the actor, local or not, so an upload of local generation g is generation g+1;
- a resume of a PAUSED actor places it on the pinned node only; when that node is full and
  another has room, the same resume uploads the local snapshot (PAUSED -> SUSPENDING ->
  SUSPENDED, a SuspendActor operation), then places the actor anywhere and restores the upload;
- when the pinned node is full and no other node has room either: 503 NoCapacity naming the
  pinned node, and the actor stays PAUSED with its local snapshot.

Everything is checked independently of the product's own view where it can be: Postgres rows
(actors, snapshots, placements), each atelet's Health over gRPC, the workload over HTTP at its
worker IP, the snapshot files hashed here, `runsc list` per node, `ip netns list`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.durability.checks import ATESPACE, count, settle_actor
from tests.durability.conftest import running_stack
from tests.durability.harness import DEFAULT_ATELET, NODE, SECOND_ATELET, Stack, labelled
from tests.durability.probes import files_of, runsc_containers, snapshot_dir, verify_snapshot_dir

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

NODE2 = SECOND_ATELET.node
ATELETS = (labelled(DEFAULT_ATELET, zone="a"), labelled(SECOND_ATELET, zone="b"))
ZONE_A = {"zone": "a"}
ZONE_B = {"zone": "b"}
OP_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """This module's stack: two atelets (nodes `dur` and `dur2`); no namespace of either is left.

    Overrides conftest's one-node `stack` (conftest's `template` fixture then uses this one).
    The logs are kept (path printed) when a test of this module failed.
    """
    failed_before = request.session.testsfailed
    with running_stack(ATELETS, keep_logs=lambda: request.session.testsfailed > failed_before) as running:
        yield running


# ---- REST helpers ------------------------------------------------------------------------------


def path_of(name: str) -> str:
    return f"/v1/atespaces/{ATESPACE}/actors/{name}"


def get_actor(stack: Stack, name: str) -> dict[str, Any]:
    response = stack.rest("GET", path_of(name))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def create(stack: Stack, template: str, name: str, selector: dict[str, str]) -> None:
    created = stack.rest(
        "POST",
        f"/v1/atespaces/{ATESPACE}/actors",
        json={"name": name, "template": template, "worker_selector": selector},
    )
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "SUSPENDED" and created.json()["worker_selector"] == selector, created.text


def act(stack: Stack, name: str, operation: str) -> httpx.Response:
    """POST .../{operation} (resume, pause, suspend) and wait for its answer."""
    return stack.rest(
        "POST", f"{path_of(name)}/{operation}", timeout=OP_TIMEOUT + 30, json={"timeout_seconds": OP_TIMEOUT}
    )


def act_ok(stack: Stack, name: str, operation: str, state: str) -> dict[str, Any]:
    response = act(stack, name, operation)
    assert response.status_code == 200, f"{operation} of {name}: {response.status_code} {response.text}"
    body: dict[str, Any] = response.json()
    assert body["state"] == state, f"{operation} of {name}: {body}"
    return body


def set_selector(stack: Stack, name: str, selector: dict[str, str]) -> None:
    patched = stack.rest("PATCH", path_of(name), json={"worker_selector": selector})
    assert patched.status_code == 200, patched.text
    assert patched.json()["worker_selector"] == selector, patched.text


def workers_by_node(stack: Stack) -> dict[str, list[dict[str, Any]]]:
    items = stack.rest("GET", "/v1/workers").json()["items"]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for w in items:
        by_node.setdefault(w["node"], []).append(w)
    return by_node


# ---- independent probes -----------------------------------------------------------------------


def local_dir(stack: Stack, node: str, uri: str) -> Path:
    """The directory of a `local:///<path>` snapshot on `node`: `<state_dir>/local-snapshots/<path>`."""
    assert uri.startswith("local:///"), uri
    return snapshot_dir(stack, uri, node)


def snapshot_rows(stack: Stack, name: str) -> list[dict[str, Any]]:
    return stack.sql(
        "SELECT id, generation, scope, storage, state, uri, node, manifest FROM snapshots "
        "WHERE owner = $1 AND deleted_at IS NULL ORDER BY generation",
        f"actor/{ATESPACE}/{name}",
    )


def actor_sql(stack: Stack, name: str) -> dict[str, Any]:
    rows = stack.sql(
        "SELECT a.state, a.pinned_node, a.local_snapshot_id, a.latest_snapshot_id, a.worker_id, "
        "w.node AS worker_node FROM actors a LEFT JOIN workers w ON w.id = a.worker_id "
        "WHERE a.atespace = $1 AND a.name = $2",
        ATESPACE,
        name,
    )
    assert rows, f"actor {ATESPACE}/{name} is gone"
    return rows[0]


def placements(stack: Stack) -> dict[str, dict[str, Any]]:
    """holder -> {worker_id, node} of every placement row."""
    rows = stack.sql("SELECT p.holder, p.worker_id, w.node FROM placements p JOIN workers w ON w.id = p.worker_id")
    return {r["holder"]: r for r in rows}


def running_on(stack: Stack, node: str) -> dict[str, str]:
    """worker name -> `atespace/name` of each sandbox the node's atelet reports running."""
    return {
        w.name: f"{w.actor.atespace}/{w.actor.name}"
        for w in stack.health(node).workers
        if w.actor.name and w.sandbox_state == "running"
    }


def check_layout(stack: Stack, expected: dict[str, str]) -> None:
    """Exactly the actors of `expected` (name -> node) run, each on one worker of its node:
    Postgres (actors, placements), /v1/workers and each atelet's Health agree."""
    actors = stack.sql(
        "SELECT a.name, a.state, a.worker_id, w.name AS worker, w.node FROM actors a "
        "LEFT JOIN workers w ON w.id = a.worker_id WHERE a.atespace = $1",
        ATESPACE,
    )
    running = {a["name"]: a for a in actors if a["state"] == "RUNNING"}
    assert {n: a["node"] for n, a in running.items()} == expected, f"RUNNING actors {running} != {expected}"
    held = placements(stack)
    assert set(held) == {f"actor/{ATESPACE}/{n}" for n in expected}, (
        f"placements {sorted(held)} != RUNNING actors {sorted(expected)} (a leaked or missing place)"
    )
    for n, a in running.items():
        assert held[f"actor/{ATESPACE}/{n}"]["worker_id"] == a["worker_id"], f"{n}: placement on another worker"
    by_node = workers_by_node(stack)
    for node in (NODE, NODE2):
        on_node = {a["worker"]: f"{ATESPACE}/{n}" for n, a in running.items() if a["node"] == node}
        for w in by_node[node]:
            want = 1 if w["name"] in on_node else 0
            assert w["used_places"] == want, f"{node}/{w['name']}: used_places {w['used_places']}, runs {on_node}"
        assert running_on(stack, node) == on_node, f"atelet {node} runs {running_on(stack, node)}, expected {on_node}"


def wait_runsc(stack: Stack, node: str, n: int) -> list[str]:
    """`runsc list` of the node once it shows `n` sandboxes (deletes happen in the background)."""
    deadline = time.monotonic() + 10
    while True:
        containers = runsc_containers(stack, node)
        if len(containers) == n or time.monotonic() > deadline:
            return containers
        time.sleep(0.2)


# ---- the scenario ------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_paused_actor_on_a_full_node_is_uploaded_and_resumed_elsewhere(stack: Stack, template: str) -> None:
    """Steps 1-5 of the scenario; see the module docstring for where each expected value comes from."""
    a, f1, f2, f3, f4 = "pin-a", "fill-a1", "fill-a2", "fill-a3", "fill-b1"
    by_node = workers_by_node(stack)
    assert sorted(by_node) == [NODE, NODE2], by_node
    for node, zone in ((NODE, ZONE_A), (NODE2, ZONE_B)):
        assert len(by_node[node]) == 2, by_node[node]
        assert all(w["labels"] == zone and w["places"] == 1 and w["state"] == "ACTIVE" for w in by_node[node]), by_node[
            node
        ]

    # 1. A (zone=a, so on dur) answers twice, then is paused: local generation 1 on dur, count 2.
    create(stack, template, a, ZONE_A)
    resumed = act_ok(stack, a, "resume", "RUNNING")
    assert resumed["worker"]["node"] == NODE, resumed
    assert count(stack, a) == (1, 1)
    assert count(stack, a) == (2, 2)
    paused = act_ok(stack, a, "pause", "PAUSED")
    assert (paused["worker"], paused["pinned_node"]) == (None, NODE), paused
    local = paused["local_snapshot"]
    assert local is not None and (local["generation"], local["scope"], local["state"]) == (1, "FULL", "COMPLETED")
    assert local["uri"].startswith(f"local:///{ATESPACE}/actors/{a}/1-"), local
    assert paused["latest_snapshot"] is None, paused  # nothing in the storage location yet
    paused_dir = local_dir(stack, NODE, local["uri"])
    assert paused_dir.is_dir(), f"the paused snapshot {paused_dir} is not on node {NODE}'s disk"
    rows = snapshot_rows(stack, a)
    assert [(r["generation"], r["storage"], r["state"], r["node"]) for r in rows] == [(1, "LOCAL", "COMPLETED", NODE)]
    verify_snapshot_dir(paused_dir, rows[0]["manifest"])
    paused_files = files_of(paused_dir)
    assert actor_sql(stack, a)["pinned_node"] == NODE
    assert not any(p.startswith(f"actor/{ATESPACE}/{a}") for p in placements(stack)), "a PAUSED actor holds a place"

    # 2. A may go anywhere from its next resume; two zone=a actors take both workers of dur.
    set_selector(stack, a, {})
    for filler in (f1, f2):
        create(stack, template, filler, ZONE_A)
        assert act_ok(stack, filler, "resume", "RUNNING")["worker"]["node"] == NODE
    assert count(stack, f1) == (1, 1)  # f1 is paused in step 4: its paused state holds count 1
    check_layout(stack, {f1: NODE, f2: NODE})
    assert actor_sql(stack, a)["state"] == "PAUSED"

    # 3. Resume A: dur is full, dur2 has room -> upload (generation 2), then restore on dur2.
    started = time.monotonic()
    moved = act_ok(stack, a, "resume", "RUNNING")
    seconds = time.monotonic() - started
    print(f"\nresume with detach took {seconds:.1f} s")
    assert moved["worker"]["node"] == NODE2, f"A should run on {NODE2} (dur is full): {moved}"
    assert (moved["pinned_node"], moved["local_snapshot"]) == (None, None), moved
    latest = moved["latest_snapshot"]
    assert latest is not None and (latest["generation"], latest["scope"], latest["state"]) == (2, "FULL", "COMPLETED")
    assert latest["uri"].startswith(f"file://{stack.snapshots}/{ATESPACE}/actors/{a}/2-"), latest
    assert count(stack, a) == (3, 3), "the memory (count 2) did not survive the upload and the restore on dur2"

    history = stack.rest("GET", f"{path_of(a)}/operations").json()["items"]
    assert [h["operation"] for h in history] == ["ResumeActor", "SuspendActor", "PauseActor", "ResumeActor"], history
    resume_op, detach_op = history[0], history[1]
    assert resume_op["outcome"] == "ok" and detach_op["outcome"] == "ok", history
    assert detach_op["operation_id"] == f"{resume_op['operation_id']}/detach", (
        f"the upload is not the resume's own detach step: {history}"
    )

    row = actor_sql(stack, a)
    assert (row["state"], row["pinned_node"], row["local_snapshot_id"], row["worker_node"]) == (
        "RUNNING", None, None, NODE2,
    ), row  # fmt: skip
    rows = snapshot_rows(stack, a)
    uploaded = next(r for r in rows if r["generation"] == 2)
    assert (uploaded["id"], uploaded["storage"], uploaded["state"], uploaded["uri"]) == (
        row["latest_snapshot_id"], "EXTERNAL", "COMPLETED", latest["uri"],
    ), rows  # fmt: skip
    upload_dir = snapshot_dir(stack, uploaded["uri"])
    verify_snapshot_dir(upload_dir, uploaded["manifest"])
    assert files_of(upload_dir) == paused_files, "the uploaded snapshot is not the paused one"
    check_layout(stack, {f1: NODE, f2: NODE, a: NODE2})
    assert len(wait_runsc(stack, NODE, 2)) == 2 and len(wait_runsc(stack, NODE2, 1)) == 1

    # 4. dur2 full too (a zone=b actor); f1 paused on dur, dur filled again by a zone=a actor.
    create(stack, template, f4, ZONE_B)
    assert act_ok(stack, f4, "resume", "RUNNING")["worker"]["node"] == NODE2
    paused_f1 = act_ok(stack, f1, "pause", "PAUSED")
    assert paused_f1["pinned_node"] == NODE and paused_f1["local_snapshot"]["generation"] == 1, paused_f1
    f1_dir = local_dir(stack, NODE, paused_f1["local_snapshot"]["uri"])
    assert f1_dir.is_dir(), f1_dir
    create(stack, template, f3, ZONE_A)
    assert act_ok(stack, f3, "resume", "RUNNING")["worker"]["node"] == NODE
    set_selector(stack, f1, {})  # dur2 would match it: only its lack of room stops the move
    check_layout(stack, {f2: NODE, f3: NODE, a: NODE2, f4: NODE2})

    refused = act(stack, f1, "resume")
    assert refused.status_code == 503, f"resume with no room anywhere: {refused.status_code} {refused.text}"
    error = refused.json()
    assert error["reason"] == "NoCapacity", error
    # 4 workers, 2 per node: dur2's 2 are not on the node of f1's paused state, dur's 2 host f2 and f3
    assert error["message"] == (
        f"no worker has room for the actor {ATESPACE}/{f1}: 4 workers: 2 not on node {NODE} (it holds the actor's "
        "local snapshot), 2 busy (a worker hosts one actor)"
    ), error
    assert settle_actor(stack, f1) == "PAUSED"
    after = get_actor(stack, f1)
    assert (after["state"], after["pinned_node"], after["worker"]) == ("PAUSED", NODE, None), after
    assert after["local_snapshot"] == paused_f1["local_snapshot"] and after["latest_snapshot"] is None, after
    rows = snapshot_rows(stack, f1)
    assert [(r["generation"], r["storage"], r["state"]) for r in rows] == [(1, "LOCAL", "COMPLETED")], (
        f"a refused resume uploaded or added a snapshot: {rows}"
    )
    assert f1_dir.is_dir(), "the refused resume lost the paused snapshot"
    check_layout(stack, {f2: NODE, f3: NODE, a: NODE2, f4: NODE2})

    # ... and its paused state is intact: with a place free on dur it resumes there, count 1 + 1.
    act_ok(stack, f3, "suspend", "SUSPENDED")
    back = act_ok(stack, f1, "resume", "RUNNING")
    assert back["worker"]["node"] == NODE and back["pinned_node"] is None, back
    assert count(stack, f1) == (2, 2)

    # 5. Everything suspended: no place, sandbox or RUNNING actor left on either node.
    for name in (a, f1, f2, f4):
        act_ok(stack, name, "suspend", "SUSPENDED")
    check_layout(stack, {})
    assert wait_runsc(stack, NODE, 0) == [] and wait_runsc(stack, NODE2, 0) == []
    states = {r["name"]: r["state"] for r in stack.sql("SELECT name, state FROM actors WHERE atespace = $1", ATESPACE)}
    assert states == dict.fromkeys((a, f1, f2, f3, f4), "SUSPENDED"), states
