"""The tour with snapshots in object storage: `ate dev --object-store` (a real S3 server,
SeaweedFS) as a user tries it, and what a user sees when the store fails.

Counts come from examples/counter (+1 in memory and +1 in the durable dir per request; FULL keeps
both), so the expected values follow from the requests made.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import obstore
import pytest
from obstore.store import S3Store
from temporalio.client import Client

from ate.dev.object_store import ACCESS_KEY, REGION, SECRET_KEY, LocalObjectStore
from domain.temporal import SNAPSHOT_GC_WORKFLOW_ID
from tests.e2e.conftest import REPO, Stack, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.runsc]

# Fixed ports stay below the kernel's ephemeral range (32768-60999): there any outgoing connection may
# hold one as its local port, and a CI run once failed on 38080 "address already in use".
# SeaweedFS also opens S3_PORT+1..4 and their gRPC twins at +10000 (31333-31337).
PORTS = {"api": 22080, "router": 22000, "atelet": 22085, "temporal": 21233, "ui": 22233, "metrics": 23000}
S3_PORT = 21333


RESTARTED: list[LocalObjectStore] = []
"""Object stores a test started again after killing the stack's: stopped after the stack."""


@pytest.fixture(scope="module")
def s3_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`ate dev --object-store`; a failing store is retried for 2 s per call instead of 15 s."""
    extra = ("--object-store", "--object-store-port", str(S3_PORT))
    env = {"ATE_ATELET_OBJECT_STORE_RETRY_SECONDS": "2"}
    try:
        base = Path(tmp_path_factory.mktemp("ate-dev-s3"))
        with running_stack(base, PORTS, "e2e-s3", "10.90.0.0/16", extra, env) as s:
            yield s
    finally:
        for server in RESTARTED:
            server.stop()


def get(stack: Stack, target: str) -> dict[str, int]:
    response = httpx.get(stack.router + "/", headers={"ate-target-actor": target}, timeout=60)
    assert response.status_code == 200, response.text
    return {k: v for k, v in response.json().items() if k != "ip"}


def objects(prefix: str) -> dict[str, int]:
    """Keys (below `prefix`) and sizes in the stack's bucket, read with the server's own credentials."""

    async def listing() -> dict[str, int]:
        store = S3Store("ate", endpoint=f"http://127.0.0.1:{S3_PORT}", access_key_id=ACCESS_KEY,
                        secret_access_key=SECRET_KEY, region=REGION, client_options={"allow_http": True})  # fmt: skip
        found: dict[str, int] = {}
        async for batch in obstore.list(store, prefix=prefix):
            for meta in batch:
                found[meta["path"]] = meta["size"]
        return found

    return asyncio.run(listing())


def actor(stack: Stack, name: str) -> dict[str, object]:
    response = httpx.get(f"{stack.api}/v1/atespaces/demo/actors/{name}", timeout=30, headers=stack.headers)
    return dict(response.json())


def test_the_tour_with_snapshots_in_s3(s3_stack: Stack, tmp_path: Path) -> None:
    stack = s3_stack
    stack.ate("create", "atespace", "demo")
    elsewhere = (REPO / "examples/counter/template.yaml").read_text().replace(
        "snapshotConfig: {", "snapshotConfig: {storageLocation: 's3://other-bucket/x', "
    )
    assert "other-bucket" in elsewhere
    (tmp_path / "elsewhere.yaml").write_text(elsewhere)
    refused = stack.ate("create", "template", "t0", "-a", "demo", "-f", str(tmp_path / "elsewhere.yaml"), check=False)
    assert refused.returncode == 1
    assert "spec.snapshotConfig.storageLocation 's3://other-bucket/x' is outside the snapshot stores" in refused.stderr
    assert "use s3://ate/snapshots or file://" in refused.stderr, refused.stderr
    stack.ate("create", "template", "counter", "-a", "demo", "-f", "examples/counter/template.yaml")
    template = httpx.get(f"{stack.api}/v1/atespaces/demo/templates/counter", timeout=30, headers=stack.headers).json()
    assert template["spec"]["snapshotConfig"]["storageLocation"] == "s3://ate/snapshots"
    assert any(key.endswith("/manifest.json") for key in objects("snapshots/demo/templates/counter/"))

    stack.ate("create", "actor", "c1", "-a", "demo", "--template", "counter")
    assert get(stack, "demo/c1") == {"memory_count": 1, "file_count": 1}
    assert get(stack, "demo/c1") == {"memory_count": 2, "file_count": 2}
    stack.ate("suspend", "actor", "c1", "-a", "demo")
    latest = actor(stack, "c1")["latest_snapshot"]
    assert isinstance(latest, dict) and str(latest["uri"]).startswith("s3://ate/snapshots/demo/actors/c1/1-")
    key = str(latest["uri"]).removeprefix("s3://ate/")
    stored = objects(key + "/")
    assert f"{key}/manifest.json" in stored and f"{key}/volumes/data.tar" in stored
    assert not (stack.data_dir / "snapshots" / "demo" / "actors").exists()  # nothing of it on the file store
    assert get(stack, "demo/c1") == {"memory_count": 3, "file_count": 3}  # resumed from S3 (via the cache)

    stack.ate("pause", "actor", "c1", "-a", "demo")  # a pause stays on the node, as before
    assert get(stack, "demo/c1") == {"memory_count": 4, "file_count": 4}
    stack.ate("pause", "actor", "c1", "-a", "demo")
    stack.ate("suspend", "actor", "c1", "-a", "demo")  # uploads the paused snapshot to S3
    latest = actor(stack, "c1")["latest_snapshot"]
    assert isinstance(latest, dict) and str(latest["uri"]).startswith("s3://ate/snapshots/demo/actors/c1/")
    assert get(stack, "demo/c1") == {"memory_count": 5, "file_count": 5}


def test_a_store_that_fails_leaves_the_actor_running_with_an_error_naming_it(s3_stack: Stack) -> None:
    stack = s3_stack
    stack.ate("create", "atespace", "demo", check=False)
    stack.ate("create", "template", "counter", "-a", "demo", "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", "down", "-a", "demo", "--template", "counter")
    assert get(stack, "demo/down") == {"memory_count": 1, "file_count": 1}
    before = actor(stack, "down")["latest_snapshot"]
    server = LocalObjectStore(stack.data_dir / "object-store", S3_PORT)
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _is_weed_of(p, server)]
    assert pids, "the stack's object store is not running"
    for pid in pids:  # the server of `ate dev --object-store` dies, as in a crash
        os.kill(pid, signal.SIGKILL)
    try:
        failed = stack.ate("suspend", "actor", "down", "-a", "demo", check=False)
        assert failed.returncode == 1
        assert "snapshot store s3://ate failed while" in failed.stderr, failed.stderr
        after = actor(stack, "down")
        assert after["state"] == "RUNNING" and after["latest_snapshot"] == before  # nothing promoted
        assert get(stack, "demo/down") == {"memory_count": 2, "file_count": 2}  # its memory is intact
    finally:
        _wait_gone(pids)
        server.start()  # the store comes back (stopped after the stack: see RESTARTED)
        RESTARTED.append(server)
    stack.ate("suspend", "actor", "down", "-a", "demo")
    assert get(stack, "demo/down") == {"memory_count": 3, "file_count": 3}
    stack.ate("suspend", "actor", "down", "-a", "demo")


def _wait_gone(pids: list[int]) -> None:
    """Until each process is gone or a zombie (its parent, ate dev, reaps it later)."""

    def running(pid: int) -> bool:
        try:
            return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False

    for _ in range(100):
        if not any(running(pid) for pid in pids):
            return
        time.sleep(0.05)


def _is_weed_of(proc: Path, server: LocalObjectStore) -> bool:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return len(argv) > 1 and argv[0].endswith(b"weed") and f"-s3.port={server.port}".encode() in argv


def test_the_snapshots_of_a_deleted_actor_are_collected_from_the_store(s3_stack: Stack) -> None:
    stack = s3_stack
    stack.ate("create", "atespace", "demo", check=False)
    stack.ate("create", "template", "counter", "-a", "demo", "-f", "examples/counter/template.yaml", check=False)
    stack.ate("create", "actor", "g1", "-a", "demo", "--template", "counter")
    get(stack, "demo/g1")
    stack.ate("suspend", "actor", "g1", "-a", "demo")
    get(stack, "demo/g1")
    stack.ate("suspend", "actor", "g1", "-a", "demo")  # generation 2 supersedes generation 1
    prefix = "snapshots/demo/actors/g1/"
    generations = {key.removeprefix(prefix).split("/")[0] for key in objects(prefix)}
    assert len(generations) == 2, generations
    stack.ate("delete", "actor", "g1", "-a", "demo")

    async def collect() -> None:
        client = await Client.connect(f"127.0.0.1:{PORTS['temporal']}")
        await client.get_workflow_handle(SNAPSHOT_GC_WORKFLOW_ID).signal("collect_now")

    deadline = time.monotonic() + 60
    while objects(prefix) and time.monotonic() < deadline:
        asyncio.run(collect())
        time.sleep(1)
    assert objects(prefix) == {}
    assert objects("snapshots/demo/templates/counter/")  # the golden snapshot is still in use
