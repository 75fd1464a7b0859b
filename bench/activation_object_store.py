"""Benchmark: activation of a suspended FULL counter whose snapshots live in object storage
(`ate dev --object-store`: SeaweedFS on loopback), with a warm and a cold node cache, against
a raw download of the same snapshot plus a raw `runsc restore`, interleaved in the same run.

Per cycle: suspend through the API (the checkpoint is uploaded to S3 and stays in the node's
cache), then on odd cycles empty the node's cache (a cold resume downloads and checks every
file; even cycles hit the cache), wait 0.3 s, and time one `GET /` through the router. While the
actor is suspended, the floor: download the same snapshot's objects with obstore (files in
parallel, nothing checked) into a fresh directory, `runsc restore` it into a prepared network
namespace (as `bench activation`'s floor) and wait for the first `GET /`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import COUNTER, call, setup
from bench.common import Log, machine, measurements, ms, summary, table, write_result

ATESPACE, ACTOR = "bench", "s1"
S3_PORT = 18433


async def _latest(dsn: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The actor's latest snapshot (uri, manifest) and its template spec, from Postgres."""
    async with measurements(dsn) as db:
        return await db.latest_snapshot(ATESPACE, ACTOR)


class RawFloor:
    """A raw download of a snapshot with obstore, then a raw `runsc restore` of it."""

    def __init__(self, stack: stack_mod.Stack) -> None:
        self.stack = stack
        self.rows: dict[str, list[float]] = {"total": [], "download": [], "restore": [], "first_get": []}

    async def prepare(self) -> None:
        from obstore.store import S3Store

        from activities.atelet_wire import workload_spec
        from ate.dev.object_store import ACCESS_KEY, REGION, SECRET_KEY
        from bench.activation import prepare_floor
        from domain.templates import ActorTemplateSpec

        self.s3 = S3Store("ate", endpoint=f"http://127.0.0.1:{S3_PORT}", access_key_id=ACCESS_KEY,
                          secret_access_key=SECRET_KEY, region=REGION, client_options={"allow_http": True})  # fmt: skip
        uri, manifest, spec = await _latest(self.stack.dsn)
        self.wspec = workload_spec(ActorTemplateSpec.from_document(spec))
        first = Path(tempfile.mkdtemp(prefix="ate-bench-s3-"))
        await self._download(uri, manifest, first)
        self.floor = await prepare_floor(self.stack, self.wspec, first, node="atebench-s3", subnet="10.96.1.0/30")
        shutil.rmtree(first, ignore_errors=True)

    async def _download(self, uri: str, manifest: dict[str, Any], into: Path) -> None:
        import obstore

        key = uri.removeprefix("s3://ate/")

        async def one(path: str) -> None:
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            response = await obstore.get_async(self.s3, f"{key}/{path}")
            with open(target, "wb") as f:
                async for chunk in response.stream(min_chunk_size=4 * 2**20):
                    f.write(bytes(chunk))

        await asyncio.gather(*(one(f["path"]) for f in manifest["files"]))

    async def once(self, i: int) -> None:
        from atelet import netns, probe
        from atelet.snapshots import CHECKPOINT_DIR

        uri, manifest, _ = await _latest(self.stack.dsn)
        into = Path(tempfile.mkdtemp(prefix="ate-bench-s3-"))
        port = self.wspec.containers[0].wakeup_probe.port
        cid = f"s3floor-{i}"
        try:
            await netns.ensure(self.floor.net)
            t0 = time.monotonic()
            await self._download(uri, manifest, into)
            t1 = time.monotonic()
            await self.floor.runsc.restore(cid, self.floor.bundle, into / CHECKPOINT_DIR, self.floor.work / "floor.log")
            t2 = time.monotonic()
            while await probe.http_status(self.floor.net.worker_ip, port, "/") != 200:
                await asyncio.sleep(0.002)
            t3 = time.monotonic()
        finally:
            await self.floor.runsc.kill(cid)
            await self.floor.runsc.delete(cid)
            shutil.rmtree(into, ignore_errors=True)
        for name, value in (("download", t1 - t0), ("restore", t2 - t1), ("first_get", t3 - t2), ("total", t3 - t0)):
            self.rows[name].append(value)
        await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self.floor.close()


async def _cycles(stack: stack_mod.Stack, cycles: int, warmup: int, log: Log) -> dict[str, Any]:
    from temporalio.client import Client

    temporal = await Client.connect(stack.temporal_address)
    cache = stack.data_dir / "atelet" / "snapshot-cache"
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=120)
    proxy = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
    headers = {"ate-target-actor": f"{ATESPACE}/{ACTOR}"}
    floor = RawFloor(stack)
    rows: dict[str, list[float]] = {"warm": [], "cold": []}
    hits: dict[str, list[bool]] = {"warm": [], "cold": []}
    try:
        (await proxy.get(stack.router_url + "/", headers=headers)).raise_for_status()
        await call(api, "suspend", ATESPACE, ACTOR)
        await floor.prepare()
        (await proxy.get(stack.router_url + "/", headers=headers)).raise_for_status()
        for i in range(warmup + cycles):
            await asyncio.sleep(0.1)
            await call(api, "suspend", ATESPACE, ACTOR)
            kind = "cold" if i % 2 else "warm"
            if i >= warmup:
                await floor.once(i)
            if kind == "cold":
                for entry in cache.iterdir():
                    if not entry.name.startswith("."):
                        shutil.rmtree(entry, ignore_errors=True)
            await asyncio.sleep(0.3)
            t = time.monotonic()
            r = await proxy.get(stack.router_url + "/", headers=headers)
            elapsed = time.monotonic() - t
            if r.status_code != 200:
                raise RuntimeError(f"cycle {i}: router answered {r.status_code}: {r.text[:300]}")
            if i < warmup:
                continue
            result = await temporal.get_workflow_handle(f"actor/{ATESPACE}/{ACTOR}").result()
            rows[kind].append(elapsed)
            hits[kind].append(bool(result.get("snapshot_cache_hit")) if isinstance(result, dict) else False)
            if (i - warmup + 1) % 10 == 0:
                log(f"activation-object-store: {i - warmup + 1}/{cycles} cycles")
    finally:
        await floor.close()
        await api.aclose()
        await proxy.aclose()
    return {"rows": rows, "hits": hits, "floor": floor.rows}


def run(cycles: int = 20, warmup: int = 2, keep: bool = False, log: Log = print) -> dict[str, Any]:
    stack = stack_mod.start(workers=1, keep=keep, log=log, extra=("--object-store", "--object-store-port", str(S3_PORT)))
    try:
        setup(stack.api_url, stack.token, ATESPACE, [ACTOR], COUNTER)
        data = asyncio.run(_cycles(stack, cycles, warmup, log))
    finally:
        stack.stop()
    warm, cold = summary(data["rows"]["warm"]), summary(data["rows"]["cold"])
    floor = {k: summary(v) for k, v in data["floor"].items()}
    out = [f"activation from object storage (SeaweedFS on loopback), {len(data['rows']['warm'])} warm and "
           f"{len(data['rows']['cold'])} cold cycles (ms)"]  # fmt: skip
    hdr = ["path", "p50", "p95", "p99", "mean", "max"]
    body = [
        ["ours, warm cache: router GET of a suspended actor", *(ms(warm[k]) for k in ("p50", "p95", "p99", "mean", "max"))],
        ["ours, cold cache: download + check + restore", *(ms(cold[k]) for k in ("p50", "p95", "p99", "mean", "max"))],
        ["floor: raw download + runsc restore + first GET", *(ms(floor["total"][k]) for k in ("p50", "p95", "p99", "mean", "max"))],
        ["  of which raw download", *(ms(floor["download"][k]) for k in ("p50", "p95", "p99", "mean", "max"))],
        ["  of which runsc restore + first GET",
         *(ms(floor["restore"][k] + floor["first_get"][k]) for k in ("p50", "p95", "p99", "mean", "max"))],
    ]  # fmt: skip
    out.append(table(hdr, body))
    out.append(f"cache hits: warm {sum(data['hits']['warm'])}/{len(data['hits']['warm'])}, "
               f"cold {sum(data['hits']['cold'])}/{len(data['hits']['cold'])}")  # fmt: skip
    ratio_warm = warm["p95"] / floor["total"]["p95"] if floor["total"]["p95"] else 0.0
    ratio_cold = cold["p95"] / floor["total"]["p95"] if floor["total"]["p95"] else 0.0
    key = (
        f"KEY activation-object-store p50/p95 ms: warm {ms(warm['p50']):.0f}/{ms(warm['p95']):.0f}"
        f" cold {ms(cold['p50']):.0f}/{ms(cold['p95']):.0f}"
        f" floor {ms(floor['total']['p50']):.0f}/{ms(floor['total']['p95']):.0f}"
        f" ratio p95 warm {ratio_warm:.2f}x cold {ratio_cold:.2f}x"
    )
    out.append(key)
    text = "\n".join(out)
    result = {
        "benchmark": "activation-object-store",
        "machine": machine(),
        "warm": warm,
        "cold": cold,
        "floor": floor,
        "hits": data["hits"],
        "raw": data,
        "text": text,
    }
    path = write_result("activation-object-store", result)
    print(text.replace("\nKEY", f"\nresults: {path}\nKEY"))
    return result
