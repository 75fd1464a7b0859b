"""`python -m bench <name> [options]`: run one benchmark, print its table, write bench/results/*.json."""

from __future__ import annotations

import argparse
import sys
import time


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="name", required=True)
    a = sub.add_parser("activation", help="router GET of a suspended FULL counter vs runsc restore floor")
    a.add_argument("--cycles", type=int, default=50)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument(
        "--ballast-mb", type=int, default=0,
        help="MiB of memory the counter holds (BALLAST_MB; half random, half text per page); default 0",
    )  # fmt: skip
    a.add_argument(
        "--microvm-cycles", type=int, default=10,
        help="cycles of the microvm row (the counter as a microvm template vs a raw QEMU restore); 0: none",
    )  # fmt: skip
    o = sub.add_parser(
        "activation-object-store",
        help="router GET of a suspended counter from S3, warm and cold cache, vs raw download + runsc restore",
    )
    o.add_argument("--cycles", type=int, default=20)
    o.add_argument("--warmup", type=int, default=2)
    t = sub.add_parser("temporal-floor", help="ResumeActor (hollow) vs a bare 3-local-activity workflow")
    t.add_argument("--cycles", type=int, default=100)
    p = sub.add_parser("throughput", help="resume+suspend cycles/s (hollow workers) vs bare-Temporal ceiling")
    p.add_argument("--actors", type=int, default=200)
    p.add_argument("--workers", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--no-profile", action="store_true")
    s = sub.add_parser("scale", help="resume and list latency at 10^4 and 10^6 actor rows")
    s.add_argument("--sizes", default="10000,1000000")
    s.add_argument("--cycles", type=int, default=30)
    d = sub.add_parser("density", help="memory per RUNNING counter sandbox vs bare runsc, disk/rows per idle actor")
    d.add_argument("--running", type=int, default=30, help="RUNNING actors (and workers)")
    d.add_argument("--idle", type=int, default=200, help="more actors, resumed and suspended once each")
    d.add_argument("--concurrency", type=int, default=4, help="resumes/suspends in flight")
    d.add_argument("--cpu-seconds", type=float, default=20.0, help="idle CPU window, then the request window")
    pl = sub.add_parser(
        "placement", help="placement and whole-resume time with 10, 1,000 and 10,000 registered workers"
    )
    pl.add_argument("--sizes", default="10,1000,10000", help="registered workers, the first is the baseline")
    pl.add_argument("--cycles", type=int, default=200)
    x = sub.add_parser("proxy", help="the router's data path vs nginx vs direct, wrk at 1/8/64 connections")
    x.add_argument("--seconds", type=float, default=8.0, help="length of each wrk run")
    x.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each is reported")
    fz = sub.add_parser("freeze", help="Thaw + GET of a frozen gVisor counter vs GET of a running one (one node)")
    fz.add_argument("--cycles", type=int, default=50)
    fz.add_argument("--warmup", type=int, default=3)
    fz.add_argument("--through-router", action="store_true", help="end to end on a real ate dev, through the router")
    eg = sub.add_parser("egress", help="an actor's request through the node's egress proxy vs direct, same upstream")
    eg.add_argument("--cycles", type=int, default=100)
    eg.add_argument("--warmup", type=int, default=5)
    mv = sub.add_parser("microvm", help="microvm VM restore vs cold boot on QEMU (TCG here), checkpoint, RAM copy")
    mv.add_argument("--cycles", type=int, default=5)
    ov = sub.add_parser(
        "oversubscription", help="many counters with an idle policy on few workers, think time, no manual suspend"
    )
    ov.add_argument("--actors", type=int, default=100)
    ov.add_argument("--workers", type=int, default=2)
    ov.add_argument("--seconds", type=float, default=60.0, help="length of each mode (policy off, then on)")
    ov.add_argument("--concurrency", type=int, default=0, help="requests in flight at most; 0: 2 per worker")
    ov.add_argument("--rate", type=float, default=1.5, help="requests/s the pattern averages over all actors")
    ov.add_argument("--repeat", type=float, default=0.3, help="chance that an actor's next request is a follow-up")
    ov.add_argument("--idle", default="Freeze:2,Suspend:10", help="the policy-on template's idle steps")
    ov.add_argument("--seed", type=int, default=27)
    for sp in (a, o, t, p, s, d, pl, x, ov):
        sp.add_argument("--keep", action="store_true", help="keep the stack's data dir")
    args = parser.parse_args(argv)
    if args.name == "activation":
        from bench import activation

        activation.run(cycles=args.cycles, warmup=args.warmup, keep=args.keep, log=log, ballast_mb=args.ballast_mb,
                       microvm_cycles=args.microvm_cycles)
    elif args.name == "egress":
        from bench import egress

        egress.run(cycles=args.cycles, warmup=args.warmup, log=log)
    elif args.name == "activation-object-store":
        from bench import activation_object_store

        activation_object_store.run(cycles=args.cycles, warmup=args.warmup, keep=args.keep, log=log)
    elif args.name == "temporal-floor":
        from bench import controlplane

        controlplane.run_latency(cycles=args.cycles, keep=args.keep, log=log)
    elif args.name == "throughput":
        from bench import controlplane

        controlplane.run_throughput(
            actors=args.actors,
            workers=args.workers,
            concurrency=args.concurrency,
            seconds=args.seconds,
            profile=not args.no_profile,
            keep=args.keep,
            log=log,
        )
    elif args.name == "scale":
        from bench import scale

        scale.run(sizes=[int(x) for x in args.sizes.split(",")], cycles=args.cycles, keep=args.keep, log=log)
    elif args.name == "placement":
        from bench import placement

        placement.run(sizes=[int(x) for x in args.sizes.split(",")], cycles=args.cycles, keep=args.keep, log=log)
    elif args.name == "density":
        from bench import density

        density.run(
            running=args.running,
            idle=args.idle,
            concurrency=args.concurrency,
            cpu_seconds=args.cpu_seconds,
            keep=args.keep,
            log=log,
        )
    elif args.name == "freeze":
        from bench import freeze

        if args.through_router:
            freeze.run_through_router(cycles=args.cycles, warmup=args.warmup, log=log)
        else:
            freeze.run(cycles=args.cycles, warmup=args.warmup, log=log)
    elif args.name == "microvm":
        from bench import microvm

        microvm.run(cycles=args.cycles, log=log)
    elif args.name == "oversubscription":
        from bench import oversubscription

        oversubscription.run(
            actors=args.actors,
            workers=args.workers,
            seconds=args.seconds,
            concurrency=args.concurrency or 2 * args.workers,
            rate=args.rate,
            repeat=args.repeat,
            idle=args.idle,
            seed=args.seed,
            keep=args.keep,
            log=log,
        )
    elif args.name == "proxy":
        from bench import proxy

        proxy.run(seconds=args.seconds, rounds=args.rounds, keep=args.keep, log=log)
