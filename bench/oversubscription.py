"""`python -m bench oversubscription`: many actors on few workers, nobody calling suspend.

Issue 27's measurement. A real `ate dev --workers N` (runsc, Temporal, Postgres, the router)
and the example counter (`examples/counter/template.yaml`, one sandbox per worker). `--actors`
actors are requested through the router (`ate-target-actor`) in a pattern with think time, a
bounded number in flight at once (`--concurrency`), for `--seconds`, twice in the same run:

- **policy off** (the baseline, the behaviour before issue 27): the plain counter template. The
  first actors to arrive keep their workers for good; every other actor's request waits out the
  router's park budget (5 s) and gets 503 `no worker has room`.
- **policy on**: the same template with the idle policy `--idle` (default `Freeze:2,Suspend:10`,
  i.e. `idle: [{afterSeconds: 2, action: Freeze}, {afterSeconds: 10, action: Suspend}]`) and
  `suspendUnderPressure: true`. Why this policy for this pattern: an actor here is busy for a
  fraction of a second and then thinks for seconds to minutes. Freezing after 2 s costs
  milliseconds either way (a follow-up within the next seconds thaws it in place, memory and all)
  and it makes the actor the first choice when a newcomer needs its worker (pressure takes frozen
  actors first); suspending after 10 s of silence frees the worker before anyone asks, so in a
  quiet spell the next newcomer's resume does not also pay for a pressure suspend. Pressure then
  covers the rest: with 50 actors per worker nearly every request finds both workers taken.
  Nobody calls suspend in either mode (the bench suspends the baseline's actors between the two
  modes, untimed, only to hand the workers over).

The pattern: every actor starts at a random time in the first `min(--seconds, mean think)`
seconds; after each answer it thinks, with probability `--repeat` briefly (0.2-6 s, a follow-up:
it finds the actor RUNNING or FROZEN unless pressure moved it) and otherwise for an exponential
time whose mean makes the whole pattern average `--rate` requests per second. So each actor is
active a small fraction of the time (a request of ~0.1-1 s in tens of seconds).

Per request: the actor's state just before it (GET of the actor: RUNNING, FROZEN, PAUSED,
SUSPENDED; `new` for an actor's first request, restored from the template's golden snapshot;
`<STATE>*` when an operation held the actor at that moment, e.g. an idle freeze in flight), the
router's status and latency (send to last byte, waiting for a place in `--concurrency` not
included), and whether its memory is intact: the counter answers `memory_count` and `file_count`,
and both must be exactly one more than the actor's previous answer (a failed request must leave
them as they were). Reported per mode: requests served/failed (failures by status), p50/p95 per
tier, the pressure suspends (the Temporal worker's `ate_pressure_suspends_total`, and the actors'
histories: operations whose reason starts `pressure:`), idle actions (the API's
`ate_idle_actions_total`, and reasons `idle for ...`), the router's resume calls by outcome and
its parked requests (gauges sampled every 0.5 s, all and those for lack of room), the operations'
times from the histories, and actors per worker (nominal, and how many distinct actors each worker served, from the
ResumeActor records). A last line `KEY oversubscription: ...` compares both modes. Goal (issue
27): every request served with its memory intact at 50 actors per worker.

Nothing leaves the machine: the API, the router and the metrics are on 127.0.0.1, the workers in
the stack's own network namespaces (node `atebenchov`, subnet 10.77.0.0/16, outside the range
`ate dev` derives its defaults from, 10.88-10.187).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from bench import stack as stack_mod
from bench.actors import COUNTER
from bench.common import Log, machine, ms, summary, table, write_result

NODE = "atebenchov"
SUBNET = "10.77.0.0/16"
MODES = {"off": "ovoff", "on": "ovon"}
"""Mode -> its atespace (each with a counter template of its own)."""
FOLLOW_UP = (0.2, 6.0)
"""A brief think time (s): uniform in this range."""
REQUEST_TIMEOUT = 60.0


def parse_policy(text: str) -> list[dict[str, Any]]:
    """`Freeze:2,Suspend:10` -> the template's `idle` list; `off` or empty -> []."""
    if text.strip().lower() in ("", "off", "none"):
        return []
    steps = []
    for part in text.split(","):
        action, _, seconds = part.strip().partition(":")
        steps.append({"afterSeconds": float(seconds), "action": action.strip().capitalize()})
    return steps


def policy_text(steps: list[dict[str, Any]]) -> str:
    return ", ".join(f"{s['action']} {s['afterSeconds']:g} s" for s in steps) or "off"


@dataclass
class Sample:
    """One request of the pattern."""

    mode: str
    actor: str
    tier: str
    t: float
    """Seconds since the mode started, at send."""
    seconds: float
    status: int
    """HTTP status; 0 when no answer (connection error, timeout)."""
    outcome: str
    """served, memory (served, counts not +1), or the failure (`503`, `timeout`, ...)."""
    detail: str = ""


def _prom(text: str, name: str) -> dict[str, float]:
    """Samples of metric `name` (with or without `_total`) in a Prometheus text page: labels -> value."""
    out: dict[str, float] = {}
    pattern = re.compile(rf"^{re.escape(name)}(?:_total)?(\{{[^}}]*\}})?\s+(\S+)")
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            out[m.group(1) or ""] = out.get(m.group(1) or "", 0.0) + float(m.group(2))
    return out


async def _scrape(client: httpx.AsyncClient, stack: stack_mod.Stack) -> dict[str, dict[str, float]]:
    """The counters a mode is judged by: pressure suspends (Temporal worker), idle actions (API),
    the router's resume calls by outcome."""
    pages: dict[str, str] = {}
    for key, url, headers in (
        ("worker", stack.worker_metrics, {}),
        ("api", stack.api_url + "/metrics", stack.headers),
        ("router", stack.router_metrics, {}),
    ):
        try:
            pages[key] = (await client.get(url, headers=headers, timeout=10)).text
        except httpx.HTTPError:
            pages[key] = ""
    return {
        "pressure_suspends": _prom(pages["worker"], "ate_pressure_suspends"),
        "idle_actions": _prom(pages["api"], "ate_idle_actions"),
        "router_resumes": _prom(pages["router"], "ate_router_resumes"),
    }


async def _parked(client: httpx.AsyncClient, stack: stack_mod.Stack) -> tuple[float, float]:
    """The router's gauges now: requests parked for their actor, and of those, for lack of room."""
    try:
        page = (await client.get(stack.router_metrics, timeout=5)).text
    except httpx.HTTPError:
        return (0.0, 0.0)
    return (
        sum(_prom(page, "ate_router_parked_requests").values()),
        sum(_prom(page, "ate_router_parked_no_room_requests").values()),
    )


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def _labels(key: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', key))


def setup(stack: stack_mod.Stack, actors: int, policy: list[dict[str, Any]], log: Log) -> None:
    """Both modes' atespaces, templates (golden snapshots) and actors."""
    from ate.cli.client import ApiClient
    from ate.cli.manifest import load_template_spec

    with ApiClient(stack.api_url, timeout=300, token=stack.token) as api:
        for mode, atespace in MODES.items():
            spec = load_template_spec(COUNTER)
            if mode == "on":
                spec["idle"] = policy
                spec["suspendUnderPressure"] = True
            api.create_atespace(atespace)
            started = time.monotonic()
            tpl = api.create_template(atespace, "counter", spec, wait=True)
            if tpl.get("phase") != "Ready":
                raise RuntimeError(f"template {atespace}/counter not Ready: {tpl}")
            for i in range(actors):
                api.create_actor(atespace, f"a{i}", "counter", {})
            log(f"setup {mode}: template Ready and {actors} actors in {time.monotonic() - started:.1f} s")


async def _tier(api: httpx.AsyncClient, atespace: str, name: str, first: bool) -> str:
    if first:
        return "new"
    try:
        r = await api.get(f"/v1/atespaces/{atespace}/actors/{name}", timeout=10)
        body = r.json()
    except (httpx.HTTPError, ValueError):
        return "?"
    return str(body.get("state", "?")) + ("*" if body.get("operation") else "")


async def _phase(
    stack: stack_mod.Stack,
    mode: str,
    actors: int,
    seconds: float,
    concurrency: int,
    rate: float,
    repeat: float,
    seed: int,
    log: Log,
) -> dict[str, Any]:
    """Run the pattern against one mode's actors for `seconds`; returns its samples and counters."""
    atespace = MODES[mode]
    rng = random.Random(seed)
    mean_think = actors / rate
    short_mean = sum(FOLLOW_UP) / 2
    long_mean = max((mean_think - repeat * short_mean) / (1 - repeat), short_mean) if repeat < 1 else short_mean
    api = httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=30)
    proxy = httpx.AsyncClient(
        timeout=REQUEST_TIMEOUT, limits=httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=0)
    )
    metrics = httpx.AsyncClient()
    gate = asyncio.Semaphore(concurrency)
    samples: list[Sample] = []
    counts: dict[str, tuple[int, int]] = {}
    before = await _scrape(metrics, stack)
    wall_start = datetime.now(UTC)
    start = time.monotonic()
    end = start + seconds

    def think() -> float:
        if rng.random() < repeat:
            return rng.uniform(*FOLLOW_UP)
        return rng.expovariate(1.0 / long_mean)

    async def one(name: str) -> None:
        await asyncio.sleep(rng.uniform(0, min(seconds, mean_think)))
        while time.monotonic() < end:
            async with gate:
                if time.monotonic() >= end:
                    return
                tier = await _tier(api, atespace, name, name not in counts)
                sent = time.monotonic()
                status, outcome, detail = 0, "", ""
                try:
                    r = await proxy.get(stack.router_url + "/", headers={"ate-target-actor": f"{atespace}/{name}"})
                    status = r.status_code
                    if status == 200:
                        body = r.json()
                        got = (int(body["memory_count"]), int(body["file_count"]))
                        last = counts.get(name, (0, 0))
                        if got == (last[0] + 1, last[1] + 1):
                            outcome = "served"
                        else:
                            outcome, detail = "memory", f"{got} after {last}"
                            log(f"{mode} {name}: counts {got} after {last}: memory not intact")
                        counts[name] = got
                    else:
                        outcome, detail = str(status), r.text[:200]
                except httpx.TimeoutException:
                    outcome = "timeout"
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    outcome, detail = type(exc).__name__, str(exc)[:200]
                done = time.monotonic()
                samples.append(Sample(mode, name, tier, sent - start, done - sent, status, outcome, detail))
            await asyncio.sleep(min(think(), max(end - time.monotonic(), 0.0)))

    gauges: list[tuple[float, float]] = []

    async def progress() -> None:
        reported = start
        while time.monotonic() < end:
            await asyncio.sleep(0.5)
            gauges.append(await _parked(metrics, stack))
            if time.monotonic() - reported >= 10:
                reported = time.monotonic()
                served = sum(s.outcome == "served" for s in samples)
                log(f"{mode}: {reported - start:.0f} s, {len(samples)} requests, {served} served")

    ticker = asyncio.create_task(progress())
    try:
        await asyncio.gather(*(one(f"a{i}") for i in range(actors)))
    finally:
        ticker.cancel()
    wall_end = datetime.now(UTC)
    after = await _scrape(metrics, stack)
    histories = await _histories(api, atespace, actors, wall_start, wall_end)
    await api.aclose()
    await proxy.aclose()
    await metrics.aclose()
    return {
        "mode": mode,
        "seconds": time.monotonic() - start,
        "think_mean": mean_think,
        "think_long_mean": long_mean,
        "samples": samples,
        "metrics": {k: _delta(before[k], after[k]) for k in before},
        "parked": {
            "samples": len(gauges),
            "max": max((g[0] for g in gauges), default=0.0),
            "mean": sum(g[0] for g in gauges) / len(gauges) if gauges else 0.0,
            "no_room_max": max((g[1] for g in gauges), default=0.0),
            "no_room_mean": sum(g[1] for g in gauges) / len(gauges) if gauges else 0.0,
        },
        "history": histories,
    }


async def _histories(
    api: httpx.AsyncClient, atespace: str, actors: int, since: datetime, until: datetime
) -> dict[str, Any]:
    """From the actors' operation records started during the mode: operations by kind, outcome and
    reason class, and the distinct actors each worker served (ResumeActor records)."""
    ops: Counter[str] = Counter()
    durations: dict[str, list[float]] = defaultdict(list)
    per_worker: dict[str, set[str]] = defaultdict(set)
    truncated = 0
    for i in range(actors):
        name = f"a{i}"
        r = await api.get(f"/v1/atespaces/{atespace}/actors/{name}/operations", params={"limit": 100})
        items = r.json().get("items", []) if r.status_code == 200 else []
        truncated += len(items) == 100
        for op in items:
            started = datetime.fromisoformat(op["started_at"])
            if not since <= started <= until:
                continue
            reason = op.get("reason") or ""
            why = "pressure" if reason.startswith("pressure:") else "idle" if reason.startswith("idle for") else "asked"
            ops[f"{op['operation']} {op.get('outcome')} ({why})"] += 1
            if op.get("outcome") == "ok" and op.get("duration_seconds") is not None:
                durations[f"{op['operation']} ({why})"].append(float(op["duration_seconds"]))
            if op["operation"] == "ResumeActor" and op.get("outcome") == "ok" and op.get("worker"):
                per_worker[op["worker"].split(" ")[0]].add(name)
    return {
        "operations": dict(sorted(ops.items())),
        "actors_per_worker": {w: len(a) for w, a in sorted(per_worker.items())},
        "durations": {k: summary(v) for k, v in sorted(durations.items())},
        "truncated_histories": truncated,
    }


async def _free_workers(stack: stack_mod.Stack, atespace: str, log: Log) -> None:
    """Suspend the baseline's actors still on a worker (untimed; hands the workers to the next mode)."""
    async with httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=120) as api:
        workers = (await api.get("/v1/workers")).json()["items"]
        held = [h for w in workers for h in w.get("actors", []) if h.startswith(atespace + "/")]
        for holder in held:
            name = holder.split("/", 1)[1]
            r = await api.post(f"/v1/atespaces/{atespace}/actors/{name}/suspend", json={})
            if r.status_code != 200:
                log(f"suspend {holder}: {r.status_code} {r.text[:200]}")
        log(f"between modes: suspended {len(held)} baseline actors holding workers")


def _report(result: dict[str, Any]) -> dict[str, Any]:
    samples: list[Sample] = result["samples"]
    served = [s for s in samples if s.outcome == "served"]
    tiers: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        tiers[s.tier].append(s)
    return {
        "requests": len(samples),
        "served": len(served),
        "memory_broken": sum(s.outcome == "memory" for s in samples),
        "failed": dict(Counter(s.outcome for s in samples if s.outcome not in ("served",))),
        "latency_served": summary([s.seconds for s in served]),
        "latency_all": summary([s.seconds for s in samples]),
        "tiers": {
            tier: {
                "n": len(xs),
                "served": sum(s.outcome == "served" for s in xs),
                "served_latency": summary([s.seconds for s in xs if s.outcome == "served"]),
            }
            for tier, xs in sorted(tiers.items())
        },
    }


def _fraction(rep: dict[str, Any]) -> str:
    return (
        f"{100.0 * rep['served'] / rep['requests']:.1f}% ({rep['served']}/{rep['requests']})"
        if rep["requests"]
        else "n/a"
    )


def run(
    actors: int,
    workers: int,
    seconds: float,
    concurrency: int,
    rate: float,
    repeat: float,
    idle: str,
    seed: int,
    keep: bool,
    log: Log,
) -> None:
    """Runs both modes on one stack and prints the tables and the KEY line (see the module doc)."""
    policy = parse_policy(idle)
    stack = stack_mod.start(workers=workers, keep=keep, log=log, extra=("--node", NODE, "--subnet", SUBNET))
    results: dict[str, dict[str, Any]] = {}
    try:
        setup(stack, actors, policy, log)
        for i, mode in enumerate(("off", "on")):
            log(f"mode {mode}: {actors} actors, {seconds:g} s, concurrency {concurrency}, ~{rate:g} requests/s")
            results[mode] = asyncio.run(_phase(stack, mode, actors, seconds, concurrency, rate, repeat, seed + i, log))
            if mode == "off":
                asyncio.run(_free_workers(stack, MODES["off"], log))
    finally:
        stack.stop()
    reports = {mode: _report(r) for mode, r in results.items()}
    lines = [
        f"bench oversubscription: {actors} actors on {workers} workers ({actors / workers:g} per worker), "
        f"{seconds:g} s per mode, concurrency {concurrency}, ~{rate:g} requests/s (mean think "
        f"{results['on']['think_mean']:.1f} s; follow-ups {repeat:.0%} at {FOLLOW_UP[0]}-{FOLLOW_UP[1]} s)",
        f"policy on: idle {policy_text(policy)}, suspendUnderPressure: true; policy off: neither",
        "",
        table(
            ["mode", "requests", "served", "failed", "memory broken", "p50 ms", "p95 ms", "max ms", "failures"],
            [
                [
                    mode,
                    rep["requests"],
                    rep["served"],
                    rep["requests"] - rep["served"],
                    rep["memory_broken"],
                    ms(rep["latency_served"]["p50"]),
                    ms(rep["latency_served"]["p95"]),
                    ms(rep["latency_served"]["max"]),
                    ", ".join(f"{k} x{v}" for k, v in rep["failed"].items()) or "-",
                ]
                for mode, rep in reports.items()
            ],
        ),
        "(latency of served requests; a failed request's time is in the JSON)",
    ]
    for mode, rep in reports.items():
        lines += ["", f"policy {mode}: latency by the tier the actor came from (served requests)"]
        lines.append(table(
            ["tier", "requests", "served", "p50 ms", "p95 ms", "max ms"],
            [[tier, t["n"], t["served"], ms(t["served_latency"]["p50"]), ms(t["served_latency"]["p95"]),
              ms(t["served_latency"]["max"])] for tier, t in rep["tiers"].items()],
        ))  # fmt: skip
        m = results[mode]["metrics"]
        h = results[mode]["history"]
        pressure = ", ".join(f"{_labels(k).get('action', '?')} {_labels(k).get('outcome', '?')} x{v:g}"
                             for k, v in m["pressure_suspends"].items()) or "none"  # fmt: skip
        idle_m = ", ".join(f"{_labels(k).get('action', '?')} {_labels(k).get('outcome', '?')} x{v:g}"
                           for k, v in m["idle_actions"].items()) or "none"  # fmt: skip
        parked = results[mode]["parked"]
        resumes = ", ".join(f"{_labels(k).get('outcome', '?')} x{v:g}" for k, v in m["router_resumes"].items())
        lines.append(
            f"pressure suspends (worker metric): {pressure}; idle actions (API metric): {idle_m}; "
            f"router resume calls: {resumes or 'none'}"
        )
        lines.append(
            f"requests parked (router gauge, every 0.5 s): max {parked['max']:g}, mean {parked['mean']:.2f}; "
            f"of which for lack of room: max {parked['no_room_max']:g}, mean {parked['no_room_mean']:.2f}"
        )
        lines.append(
            "operations (histories): " + (", ".join(f"{k} x{v}" for k, v in h["operations"].items()) or "none")
        )
        if h["durations"]:
            lines.append(
                "operation time (histories, ok, p50/p95 ms): "
                + ", ".join(f"{k} {ms(v['p50']):.0f}/{ms(v['p95']):.0f}" for k, v in h["durations"].items())
            )
        per = h["actors_per_worker"]
        lines.append(f"actors per worker: {actors / workers:g} nominal; distinct actors served per worker: "
                     + (", ".join(f"{w} {n}" for w, n in per.items()) or "none")
                     + (f" (histories cut at 100 for {h['truncated_histories']} actors)" if h["truncated_histories"]
                        else ""))  # fmt: skip
    on, off = reports["on"], reports["off"]
    intact = "memory intact" if on["memory_broken"] == 0 else f"memory broken x{on['memory_broken']}"
    pressure_n = sum(v for k, v in results["on"]["metrics"]["pressure_suspends"].items()
                     if _labels(k).get("outcome") == "ok")  # fmt: skip
    key = (
        f"KEY oversubscription: {actors} actors / {workers} workers ({actors / workers:g} per worker), {seconds:g} s: "
        f"idle policy + pressure served {_fraction(on)}, {intact}, p50/p95 {ms(on['latency_served']['p50']):.0f}/"
        f"{ms(on['latency_served']['p95']):.0f} ms, {pressure_n:g} pressure suspends; policy off served "
        f"{_fraction(off)}, p50/p95 {ms(off['latency_served']['p50']):.0f}/{ms(off['latency_served']['p95']):.0f} ms "
        f"(goal: every request served, memory intact, at 50 actors per worker)"
    )
    data = {
        "machine": machine(),
        "args": {"actors": actors, "workers": workers, "seconds": seconds, "concurrency": concurrency, "rate": rate,
                 "repeat": repeat, "idle": policy, "seed": seed},
        "reports": reports,
        "modes": {mode: {**{k: v for k, v in r.items() if k != "samples"},
                         "samples": [asdict(s) for s in r["samples"]]} for mode, r in results.items()},
    }  # fmt: skip
    path = write_result("oversubscription", data)
    print("\n".join([*lines, "", f"results: {path}", key]))
