"""PauseActor, every transition out of PAUSED, and async suspend, on the real stack (runsc,
Temporal, Postgres).

Counts come from the counter's definition (+1 memory and +1 file per request; FULL snapshots
keep both). A pause keeps the checkpoint on the node (under the atelet's local-snapshots dir, not
in the storage location); a resume restores it with its memory; a suspend uploads it; a revert
drops it and returns to the last snapshot in the storage location. Generations count every
snapshot of the actor, local or not (ARCHITECTURE.md, "Actor states").
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.e2e.conftest import PORTS, Stack
from tests.e2e.test_lifecycle import api, setup_actor
from tests.e2e.test_tour import get, workflows

pytestmark = [pytest.mark.slow, pytest.mark.runsc]


def generations(directory: Path) -> list[int]:
    """Generations of the snapshot directories in `directory` (named `<generation>-<digest>`)."""
    if not directory.exists():
        return []
    return sorted(int(d.name.split("-", 1)[0]) for d in directory.iterdir() if d.is_dir() and d.name[0].isdigit())


def collect_garbage() -> None:
    async def signal() -> None:
        client = await Client.connect(f"127.0.0.1:{PORTS['temporal']}")
        await client.get_workflow_handle("snapshot-gc").signal("collect_now")

    asyncio.run(signal())


def test_pause_resume_upload_and_revert(stack: Stack) -> None:
    path = setup_actor(stack, "pz", "p1")
    local_dir = stack.data_dir / "atelet" / "local-snapshots" / "pz" / "actors" / "p1"
    stored_dir = stack.data_dir / "snapshots" / "pz" / "actors" / "p1"

    refused = api(stack, "POST", path + "/pause", json={})
    assert refused.status_code == 409
    assert refused.json()["message"] == "actor pz/p1 cannot be paused from state SUSPENDED (PauseActor wants RUNNING or FROZEN)"

    assert get(stack, "pz/p1")["memory_count"] == 1
    stack.ate("suspend", "actor", "p1", "-a", "pz")  # generation 1 (stored): count 1
    assert get(stack, "pz/p1")["memory_count"] == 2
    node = api(stack, "GET", path).json()["worker"]["node"]

    # RUNNING -> PAUSED: generation 2 on the node only
    paused = stack.ate("pause", "actor", "p1", "-a", "pz")
    assert paused.stdout.strip() == f"actor/p1 paused: PAUSED on node {node}"
    actor = api(stack, "GET", path).json()
    assert (actor["state"], actor["worker"], actor["pinned_node"]) == ("PAUSED", None, node)
    assert actor["local_snapshot"]["generation"] == 2 and actor["local_snapshot"]["uri"].startswith(
        "local:///pz/actors/p1/2-"
    )
    assert actor["latest_snapshot"]["generation"] == 1  # what a revert would return to
    assert generations(local_dir) == [2] and generations(stored_dir) == [1]
    assert api(stack, "POST", path + "/pause", json={}).json()["state"] == "PAUSED"  # at once when PAUSED
    described = stack.ate("describe", "actor", "p1", "-a", "pz").stdout
    assert f"Paused snapshot:  generation 2 FULL on node {node}" in described, described

    # PAUSED -> RESUMING (pinned) -> RUNNING: the memory survived
    after = get(stack, "pz/p1")
    assert (after["memory_count"], after["file_count"]) == (3, 3)
    actor = api(stack, "GET", path).json()
    assert (actor["state"], actor["worker"]["node"], actor["pinned_node"], actor["local_snapshot"]) == (
        "RUNNING", node, None, None,
    )  # fmt: skip

    # PAUSED -> SUSPENDING (upload) -> SUSPENDED
    stack.ate("pause", "actor", "p1", "-a", "pz")  # generation 3 (local): count 3
    suspended = api(stack, "POST", path + "/suspend", json={})
    assert suspended.status_code == 200, suspended.text
    actor = suspended.json()
    assert (actor["state"], actor["pinned_node"], actor["local_snapshot"]) == ("SUSPENDED", None, None)
    assert (actor["latest_snapshot"]["generation"], actor["latest_snapshot"]["state"]) == (4, "COMPLETED")
    assert 4 in generations(stored_dir)
    after = get(stack, "pz/p1")
    assert (after["memory_count"], after["file_count"]) == (4, 4)  # the uploaded state, then +1

    # PAUSED -> REVERTING -> SUSPENDED: the paused state is dropped, generation 4 comes back
    assert get(stack, "pz/p1")["memory_count"] == 5
    stack.ate("pause", "actor", "p1", "-a", "pz")  # generation 5 (local): count 5
    reverted = stack.ate("revert", "actor", "p1", "-a", "pz")
    assert reverted.stdout.strip() == "actor/p1 reverted: SUSPENDED (back to generation 4)"
    after = get(stack, "pz/p1")
    assert (after["memory_count"], after["file_count"]) == (4, 4)  # generation 4 held count 3

    history = [h["operation"] for h in api(stack, "GET", path + "/operations").json()["items"]]
    assert history[:4] == ["ResumeActor", "RevertActor", "PauseActor", "ResumeActor"]
    workers = api(stack, "GET", "/v1/workers").json()["items"]
    assert sum("pz/p1" in w["actors"] for w in workers) == 1  # one place, the running one

    # The local snapshots were consumed (2), uploaded (3) and dropped (5): the GC removes them.
    deadline = time.monotonic() + 30
    while generations(local_dir) and time.monotonic() < deadline:
        collect_garbage()
        time.sleep(1)
    assert generations(local_dir) == []
    assert 4 in generations(stored_dir)  # the latest stays
    stack.ate("suspend", "actor", "p1", "-a", "pz")


def test_a_paused_actor_resumes_through_the_router_when_requested(stack: Stack) -> None:
    path = setup_actor(stack, "pz", "p2")
    assert get(stack, "pz/p2")["memory_count"] == 1
    stack.ate("pause", "actor", "p2", "-a", "pz")  # generation 1, local: count 1
    busy = api(stack, "POST", path + "/revert", json={})  # a revert from PAUSED is allowed...
    assert busy.status_code == 200 and busy.json()["state"] == "SUSPENDED"
    after = get(stack, "pz/p2")  # ...and, with no stored snapshot, goes back to the golden one
    assert (after["memory_count"], after["file_count"]) == (1, 1)
    stack.ate("pause", "actor", "p2", "-a", "pz")
    assert get(stack, "pz/p2")["memory_count"] == 2  # the router resumes a PAUSED actor like a SUSPENDED one
    stack.ate("suspend", "actor", "p2", "-a", "pz")


def wait_uploaded(stack: Stack, path: str, timeout: float = 60.0) -> dict[str, object]:
    """The actor once its async suspend's upload has landed (upload_pending false)."""
    deadline = time.monotonic() + timeout
    actor: dict[str, object] = api(stack, "GET", path).json()
    while actor["upload_pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
        actor = api(stack, "GET", path).json()
    assert not actor["upload_pending"], actor
    return actor


def test_async_suspend_returns_first_and_uploads_in_the_background(stack: Stack) -> None:
    path = setup_actor(stack, "asy", "a1")
    local_dir = stack.data_dir / "atelet" / "local-snapshots" / "asy" / "actors" / "a1"
    stored_dir = stack.data_dir / "snapshots" / "asy" / "actors" / "a1"
    get(stack, "asy/a1")
    assert get(stack, "asy/a1")["memory_count"] == 2
    node = api(stack, "GET", path).json()["worker"]["node"]

    # generation 1: the checkpoint on the node (count 2); generation 2: its upload
    out = stack.ate("suspend", "actor", "a1", "-a", "asy", "--mode", "async").stdout.strip()
    assert out in (
        f"actor/a1 suspended: SUSPENDED (uploading in the background from node {node})",
        "actor/a1 suspended: SUSPENDED",  # the upload may already have landed when the CLI reads the actor
    ), out
    actor = wait_uploaded(stack, path)
    assert (actor["state"], actor["worker"], actor["pinned_node"], actor["local_snapshot"]) == (
        "SUSPENDED", None, None, None,
    )  # fmt: skip
    assert (actor["latest_snapshot"]["generation"], actor["latest_snapshot"]["state"]) == (2, "COMPLETED")  # type: ignore[index]
    assert 2 in generations(stored_dir) and 1 not in generations(stored_dir)
    uploads = workflows(stack, 'AteActor="a1" AND AteOperation="UploadSnapshot"')
    assert len(uploads) == 1 and uploads[0]["status"] == "WORKFLOW_EXECUTION_STATUS_COMPLETED", uploads
    after = get(stack, "asy/a1")
    assert (after["memory_count"], after["file_count"]) == (3, 3)  # the uploaded state, then +1

    # A request right after an async suspend: whether or not the upload has landed, the memory is kept.
    stack.ate("suspend", "actor", "a1", "-a", "asy", "--mode", "async")  # generation 3 on the node: count 3
    after = get(stack, "asy/a1")
    assert (after["memory_count"], after["file_count"]) == (4, 4)
    actor = api(stack, "GET", path).json()
    assert (actor["state"], actor["worker"]["node"], actor["pinned_node"], actor["upload_pending"]) == (
        "RUNNING", node, None, False,
    )  # fmt: skip

    refused = api(stack, "POST", path + "/suspend", json={"mode": "later"})
    assert refused.status_code == 400 and "mode" in refused.json()["message"], refused.text
    stack.ate("suspend", "actor", "a1", "-a", "asy")

    deadline = time.monotonic() + 30  # the local copies (generation 1 uploaded, 3 consumed) are collected
    while generations(local_dir) and time.monotonic() < deadline:
        collect_garbage()
        time.sleep(1)
    assert generations(local_dir) == []
