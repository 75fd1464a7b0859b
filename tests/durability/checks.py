"""The kill matrix's independent checks: what a settled actor, template and node must look like.

Everything is read without the product's own view where it can be: Postgres rows with SQL,
Temporal's record of each workflow, the atelet's Health over gRPC, the workload over HTTP at its
worker IP, the snapshot files hashed here, `runsc list` and `ip netns list` (`probes`). The API
is read only to check that it agrees.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx

from tests.durability.harness import NODE, TRANSITIONAL, WORKERS, Stack
from tests.durability.probes import namespaces, runsc_containers, snapshot_dir, verify_snapshot_dir

ATESPACE = "dur"
TEMPLATE = "counter"
PORT = 8080
SETTLE_SECONDS = 60.0


def actor_path(name: str) -> str:
    return f"/v1/atespaces/{ATESPACE}/actors/{name}"


def actor_row(stack: Stack, name: str) -> dict[str, Any]:
    rows = stack.sql(
        "SELECT a.state, a.worker_id, a.latest_snapshot_id, a.local_snapshot_id, a.pending_upload_snapshot_id, "
        "a.pinned_node, w.name AS worker, w.ip "
        "FROM actors a LEFT JOIN workers w ON w.id = a.worker_id WHERE a.atespace = $1 AND a.name = $2",
        ATESPACE,
        name,
    )
    assert rows, f"actor {ATESPACE}/{name} is gone"
    return rows[0]


def workflows_of(stack: Stack, name: str) -> list[str]:
    """The actor's workflow IDs: its per-actor lock, and the UploadSnapshot of each of its LOCAL
    snapshots (`upload/<atespace>/<name>/<local snapshot id>`, which holds no per-actor lock)."""
    local = stack.sql(
        "SELECT id FROM snapshots WHERE owner = $1 AND storage = 'LOCAL' ORDER BY id", f"actor/{ATESPACE}/{name}"
    )
    return [f"actor/{ATESPACE}/{name}", *(f"upload/{ATESPACE}/{name}/{r['id']}" for r in local)]


def settle_actor(stack: Stack, name: str, timeout: float = SETTLE_SECONDS) -> str:
    """Wait until no workflow of the actor (its own operation, an upload of its local snapshot) is
    open and its state is not transitional."""
    deadline = time.monotonic() + timeout
    state, open_ = "?", ["?"]
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            state = actor_row(stack, name)["state"]
            open_ = [w for w in workflows_of(stack, name) if stack.workflow_open(w)]
            if not open_ and state not in TRANSITIONAL:
                return str(state)
        time.sleep(0.3)
    raise AssertionError(
        f"actor {ATESPACE}/{name} did not settle in {timeout:.0f} s: state {state}, workflows open {open_}"
    )


def settle_template(stack: Stack, name: str, timeout: float = SETTLE_SECONDS) -> str:
    deadline = time.monotonic() + timeout
    phase, open_ = "?", True
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            phase = stack.sql("SELECT phase FROM actor_templates WHERE atespace = $1 AND name = $2", ATESPACE, name)[0][
                "phase"
            ]
            open_ = stack.workflow_open(f"template/{ATESPACE}/{name}")
            if not open_ and phase != "Pending":
                return str(phase)
        time.sleep(0.3)
    raise AssertionError(f"template {ATESPACE}/{name} did not settle in {timeout:.0f} s: phase {phase}, open {open_}")


def count(stack: Stack, name: str) -> tuple[int, int]:
    """One request to the counter at the worker IP Postgres records for the actor."""
    row = actor_row(stack, name)
    assert row["state"] == "RUNNING" and row["ip"], row
    response = httpx.get(f"http://{row['ip']}:{PORT}/", timeout=10, headers={"Connection": "close"})
    assert response.status_code == 200, response.text
    body = response.json()
    return int(body["memory_count"]), int(body["file_count"])


def check_global(stack: Stack) -> None:
    """Invariants over the whole node: places, pins, sandboxes, namespaces, latest snapshots."""
    actors = stack.sql(
        "SELECT a.atespace, a.name, a.state, a.worker_id, w.name AS worker, a.pinned_node, a.local_snapshot_id, "
        "a.pending_upload_snapshot_id FROM actors a LEFT JOIN workers w ON w.id = a.worker_id"
    )
    stuck = [f"{a['atespace']}/{a['name']} {a['state']}" for a in actors if a["state"] in TRANSITIONAL]
    assert not stuck, f"actors left in a transitional state: {stuck}"
    pending = stack.sql("SELECT atespace, name FROM actor_templates WHERE phase = 'Pending'")
    assert not pending, f"templates left Pending: {pending}"
    # A local snapshot pins its actor: PAUSED holds one, an async-suspended SUSPENDED one waits for
    # its upload; nothing else keeps one, and nothing is pinned without one (ARCHITECTURE.md).
    for a in actors:
        local, upload = a["local_snapshot_id"] is not None, a["pending_upload_snapshot_id"] is not None
        assert (a["state"] == "PAUSED") == local and (not upload or a["state"] == "SUSPENDED"), (
            f"{a['atespace']}/{a['name']} {a['state']} keeps local snapshot {a['local_snapshot_id']}, "
            f"pending upload {a['pending_upload_snapshot_id']}"
        )
        assert (a["pinned_node"] is not None) == (local or upload), (
            f"{a['atespace']}/{a['name']} {a['state']}: pinned to {a['pinned_node']} with local snapshot "
            f"{a['local_snapshot_id']}, pending upload {a['pending_upload_snapshot_id']}"
        )

    running = {f"{a['atespace']}/{a['name']}": a for a in actors if a["state"] == "RUNNING"}
    holders = {r["holder"]: r for r in stack.sql("SELECT holder, worker_id FROM placements")}
    assert set(holders) == {f"actor/{k}" for k in running}, (
        f"placements {sorted(holders)} != RUNNING actors {sorted(running)}"
    )
    for key, a in running.items():
        assert holders[f"actor/{key}"]["worker_id"] == a["worker_id"], f"{key}: placement on another worker"

    workers = [w for w in stack.rest("GET", "/v1/workers").json()["items"] if w["node"] == NODE]
    assert len(workers) == WORKERS, workers
    by_worker = {w["name"]: w for w in workers}
    for w in workers:
        mine = [k for k, a in running.items() if a["worker"] == w["name"]]
        assert w["used_places"] == len(mine), f"worker {w['name']}: used_places {w['used_places']}, runs {mine}"

    health = {w.name: w for w in stack.health().workers}
    assert set(health) == set(by_worker), f"atelet workers {sorted(health)} != registered {sorted(by_worker)}"
    for wname, status in health.items():
        on_it = [k for k, a in running.items() if a["worker"] == wname]
        seen = f"{status.actor.atespace}/{status.actor.name}" if status.actor.name else None
        if on_it:
            assert seen == on_it[0] and status.sandbox_state == "running", (
                f"worker {wname} should run {on_it[0]}; atelet says {seen} ({status.sandbox_state})"
            )
        else:
            assert seen is None or status.sandbox_state != "running", (
                f"worker {wname} runs {seen}, not RUNNING in Postgres"
            )

    deadline = time.monotonic() + 10  # sandboxes are deleted in the background after a stop
    while True:
        containers = runsc_containers(stack)
        if len(containers) == len(running) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(containers) == len(running), f"runsc sandboxes {containers} for RUNNING actors {sorted(running)}"
    expected_ns = sorted(f"ate-{NODE}-default-{i}" for i in range(WORKERS))
    assert namespaces() == expected_ns, f"network namespaces {namespaces()} != {expected_ns}"

    not_completed = stack.sql(
        "SELECT s.owner, s.generation, s.state FROM snapshots s WHERE s.state <> 'COMPLETED' AND ("
        " s.id IN (SELECT latest_snapshot_id FROM actors WHERE latest_snapshot_id IS NOT NULL)"
        " OR s.id IN (SELECT local_snapshot_id FROM actors WHERE local_snapshot_id IS NOT NULL)"
        " OR s.id IN (SELECT pending_upload_snapshot_id FROM actors WHERE pending_upload_snapshot_id IS NOT NULL)"
        " OR s.id IN (SELECT golden_snapshot_id FROM actor_templates WHERE golden_snapshot_id IS NOT NULL))"
    )
    assert not not_completed, f"a snapshot that is not COMPLETED is someone's latest: {not_completed}"


def snapshot_rows(stack: Stack, owner: str) -> list[dict[str, Any]]:
    return stack.sql(
        "SELECT id, generation, state, storage, node, uri, manifest FROM snapshots WHERE owner = $1 ORDER BY generation",
        owner,
    )


def check_snapshots(stack: Stack, owner: str, newest_id: int | None) -> None:
    """The newest COMPLETED with its data intact (a LOCAL one on its node's disk); COMPLETED
    generations 1..n with the newest the last."""
    rows = snapshot_rows(stack, owner)
    completed = [r["generation"] for r in rows if r["state"] == "COMPLETED"]
    assert completed == list(range(1, len(completed) + 1)), (
        f"{owner}: COMPLETED generations {completed} have a gap ({rows})"
    )
    if newest_id is None:
        return
    newest = next((r for r in rows if r["id"] == newest_id), None)
    assert newest is not None and newest["state"] == "COMPLETED", f"{owner}: latest snapshot {newest}"
    assert newest["generation"] == completed[-1], (
        f"{owner}: latest is generation {newest['generation']}, not {completed[-1]}"
    )
    verify_snapshot_dir(snapshot_dir(stack, newest["uri"], newest["node"]), newest["manifest"])


def check_paused(stack: Stack, name: str, row: dict[str, Any]) -> None:
    """A PAUSED actor: pinned to this node, its COMPLETED LOCAL snapshot there (the files are
    checked by `check_snapshots`), no sandbox of it running; the API says the same."""
    local = stack.sql("SELECT storage, state, node FROM snapshots WHERE id = $1", row["local_snapshot_id"])
    assert local and (local[0]["storage"], local[0]["state"], local[0]["node"]) == ("LOCAL", "COMPLETED", NODE), (
        f"{name}: PAUSED with local snapshot {local}"
    )
    assert row["pinned_node"] == NODE and row["worker_id"] is None, row
    api = stack.rest("GET", actor_path(name)).json()
    assert api["pinned_node"] == NODE and api["local_snapshot"]["state"] == "COMPLETED", api


def check_upload_landed(stack: Stack, name: str) -> None:
    """An async suspend whose upload settled: SUSPENDED, unpinned, `upload_pending` false; the
    latest snapshot is the upload (EXTERNAL, COMPLETED, the local generation + 1, the same files,
    hashed) and no PENDING row is left; the local copy is referenced by nothing (collectable) and,
    while still on disk, intact."""
    owner = f"actor/{ATESPACE}/{name}"
    row = actor_row(stack, name)
    assert row["state"] == "SUSPENDED", row
    assert (row["pending_upload_snapshot_id"], row["local_snapshot_id"], row["pinned_node"]) == (None, None, None), (
        f"{name}: the upload did not land: {row}"
    )
    api = stack.rest("GET", actor_path(name)).json()
    assert (api["upload_pending"], api["pinned_node"], api["local_snapshot"]) == (False, None, None), api
    rows = snapshot_rows(stack, owner)
    left = [r["generation"] for r in rows if r["state"] == "PENDING"]
    assert not left, f"{name}: PENDING snapshots left after the upload: {left}"
    locals_ = [r for r in rows if r["storage"] == "LOCAL"]
    assert len(locals_) == 1 and locals_[0]["state"] == "COMPLETED", f"{name}: local snapshots {locals_}"
    local = locals_[0]
    latest = next((r for r in rows if r["id"] == row["latest_snapshot_id"]), None)
    assert latest is not None and (latest["storage"], latest["state"], latest["generation"]) == (
        "EXTERNAL", "COMPLETED", local["generation"] + 1,
    ), f"{name}: latest {latest}, local {local}"  # fmt: skip
    assert api["latest_snapshot"]["generation"] == latest["generation"], api
    verify_snapshot_dir(snapshot_dir(stack, latest["uri"]), latest["manifest"])
    uploaded = {(f["path"], f["sha256"]) for f in latest["manifest"]["files"]}
    assert uploaded == {(f["path"], f["sha256"]) for f in local["manifest"]["files"]}, (
        f"{name}: the upload is not the local snapshot"
    )
    referenced = stack.sql(
        "SELECT EXISTS (SELECT 1 FROM actors WHERE $1 IN (latest_snapshot_id, local_snapshot_id, "
        "pending_upload_snapshot_id, in_progress_snapshot_id)) OR EXISTS (SELECT 1 FROM tags WHERE snapshot_id = $1) "
        "OR EXISTS (SELECT 1 FROM actor_templates WHERE golden_snapshot_id = $1) AS referenced",
        local["id"],
    )[0]["referenced"]
    assert not referenced, f"{name}: the uploaded local snapshot {local['uri']} is still referenced"
    local_dir = snapshot_dir(stack, local["uri"], local["node"])
    if local_dir.exists():  # the snapshot GC may have deleted it already (then its row goes too)
        verify_snapshot_dir(local_dir, local["manifest"])


def check_actor(
    stack: Stack, name: str, expected: tuple[int, int], states: tuple[str, ...] = ("RUNNING", "SUSPENDED")
) -> None:
    """The settled actor is in one of `states`, consistent and, running (or resumed), answers `expected`."""
    check_global(stack)
    row = actor_row(stack, name)
    assert row["state"] in states, row
    api = stack.rest("GET", actor_path(name)).json()
    assert api["state"] == row["state"], f"API says {api['state']}, Postgres {row['state']}"
    newest = row["local_snapshot_id"] or row["pending_upload_snapshot_id"] or row["latest_snapshot_id"]
    check_snapshots(stack, f"actor/{ATESPACE}/{name}", newest)
    if row["state"] == "PAUSED":
        check_paused(stack, name, row)
    if row["state"] in ("SUSPENDED", "PAUSED"):
        assert all(w.actor.name != name for w in stack.health().workers), f"a {row['state']} actor runs on a worker"
        resumed = stack.rest("POST", f"{actor_path(name)}/resume", timeout=90, json={"timeout_seconds": 60})
        assert resumed.status_code == 200, f"resume after the case: {resumed.status_code} {resumed.text}"
        check_global(stack)
    api = stack.rest("GET", actor_path(name)).json()
    status = [w for w in stack.health().workers if w.actor.name == name and w.actor.atespace == ATESPACE]
    assert len(status) == 1 and status[0].sandbox_state == "running", f"atelet Health for {name}: {status}"
    assert api["worker"] and status[0].name == api["worker"]["name"], (
        f"API worker {api['worker']} != atelet {status[0].name}"
    )
    assert count(stack, name) == expected
    suspended = stack.rest("POST", f"{actor_path(name)}/suspend", timeout=90, json={"timeout_seconds": 60})
    assert suspended.status_code == 200 and suspended.json()["state"] == "SUSPENDED", suspended.text
    check_snapshots(stack, f"actor/{ATESPACE}/{name}", actor_row(stack, name)["latest_snapshot_id"])
    check_global(stack)
