"""The atelet's output collector (atelet/output.py) against the real api-server: what a sandbox
appends to its log file is printed as labelled JSON and shipped, cut into lines as it should be,
once each even when the API was down or the atelet restarted, and read back by `GET .../logs`.
(The sandbox itself is a file written here; tests/e2e/test_logs.py runs the real one.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx

from atelet.layout import NodeLayout
from atelet.netns import WorkerNet
from atelet.output import OutputCollector
from atelet.proto import atelet_pb2 as pb
from atelet.workers import Worker
from domain.logs import MAX_LINE_BYTES
from domain.pools import WorkerPoolSpec
from store import Store
from tests.api.test_logs import running_actor
from tests.credentials import SuiteCredentials


def worker_running(actor: tuple[str, str]) -> Worker:
    net = WorkerNet("ate-w0", "vh0", "vp0", "10.99.0.1", "10.99.0.2")
    worker = Worker("default-0", WorkerPoolSpec("default", 1), 0, net, actor=actor, state="running")
    worker.spec = pb.WorkloadSpec(containers=[pb.Container(name="counter")], template="counter-t", generation=3)
    return worker


async def logged_lines(api: httpx.AsyncClient, atespace: str) -> list[str]:
    answer = await api.get(f"/v1/atespaces/{atespace}/actors/a1/logs")
    assert answer.status_code == 200, answer.text
    return [r["line"] for r in map(json.loads, answer.text.splitlines()) if r["type"] == "line"]


async def test_the_collector_prints_and_ships_each_line_once(api: httpx.AsyncClient, api_store: Store,
                                                             tmp_path: Path) -> None:  # fmt: skip
    await running_actor(api, api_store, "ls", "shipnode")
    layout = NodeLayout(tmp_path)
    actor = ("ls", "a1")
    worker = worker_running(actor)
    log_file = layout.log_path(actor)
    log_file.parent.mkdir(parents=True)
    out = io.StringIO()
    collector = OutputCollector({"default-0": worker}, layout, "shipnode", str(api.base_url), SuiteCredentials(),
                                stdout=out)  # fmt: skip
    long = "é" * MAX_LINE_BYTES  # 2 bytes each: two full pieces of MAX_LINE_BYTES bytes
    log_file.write_bytes(b"counter: listening on 0.0.0.0:8080\r\nsecond\n" + long.encode() + b"\nno newline yet")
    await collector.look()
    half = "é" * (MAX_LINE_BYTES // 2)
    assert await logged_lines(api, "ls") == ["counter: listening on 0.0.0.0:8080", "second", half, half]
    printed = [json.loads(line) for line in out.getvalue().splitlines()]
    assert printed[0] | {"time": ""} == {"time": "", "node": "shipnode", "worker": "default/default-0",
                                         "atespace": "ls", "actor": "a1", "template": "counter-t",
                                         "container": "counter", "generation": 3, "stream": "output",
                                         "line": "counter: listening on 0.0.0.0:8080"}  # fmt: skip
    # the line without its newline waits for it; a restarted atelet (a new collector) ships the
    # rest and nothing twice
    with open(log_file, "ab") as f:
        f.write(b", now\n")
    restarted = OutputCollector({"default-0": worker}, layout, "shipnode", str(api.base_url), SuiteCredentials(),
                                stdout=None)  # fmt: skip
    await restarted.look()
    assert (await logged_lines(api, "ls"))[-1] == "no newline yet, now"
    assert len(await logged_lines(api, "ls")) == 5
    # the API unreachable: lines wait in memory and go once it answers (each once)
    with open(log_file, "ab") as f:
        f.write(b"while down\n")
    down = OutputCollector({"default-0": worker}, layout, "shipnode", "http://127.0.0.1:9", SuiteCredentials(),
                           stdout=None)  # fmt: skip
    await down.look()
    assert len(await logged_lines(api, "ls")) == 5
    down.url = f"{api.base_url}/v1/nodes/shipnode/logs"
    down._retry_at = 0.0
    await down.look()
    assert (await logged_lines(api, "ls"))[-2:] == ["no newline yet, now", "while down"]
    # the sandbox gone: its last line without a newline is a line too
    with open(log_file, "ab") as f:
        f.write(b"last words")
    worker.state = "exited"
    await down.look()
    assert (await logged_lines(api, "ls"))[-1] == "last words"
    assert len(await logged_lines(api, "ls")) == 7


async def test_a_golden_boots_lines_are_printed_and_never_shipped(api: httpx.AsyncClient, api_store: Store,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    """A template's golden boot (WorkloadSpec.golden): its lines go to the node's stdout and into
    the golden snapshot, not to the API, even for a name the API would take (here an actor placed
    on the node: nothing of it is stored)."""
    await running_actor(api, api_store, "gb", "goldnode")
    layout = NodeLayout(tmp_path)
    actor = ("gb", "a1")
    worker = worker_running(actor)
    assert worker.spec is not None
    worker.spec.golden = True
    log_file = layout.log_path(actor)
    log_file.parent.mkdir(parents=True)
    log_file.write_bytes(b"counter: listening on 0.0.0.0:8080\n")
    out = io.StringIO()
    collector = OutputCollector({"default-0": worker}, layout, "goldnode", str(api.base_url), SuiteCredentials(),
                                stdout=out)  # fmt: skip
    await collector.look()
    assert [json.loads(line)["line"] for line in out.getvalue().splitlines()] == ["counter: listening on 0.0.0.0:8080"]
    answer = await api.get("/v1/atespaces/gb/actors/a1/logs")
    assert answer.status_code == 200 and [r for r in map(json.loads, answer.text.splitlines()) if r["type"] == "line"] == []
