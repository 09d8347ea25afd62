"""Can a flood of requests starve the kubelet's liveness probe? (issue 37, point 18)

Run from the repository root::

    python -m benchmarks.health_flood                                  # the three floods, this tree
    python -m benchmarks.health_flood --path /debug/cache --clients 80 --seconds 15
    mkdir /tmp/before && git archive 8f3b0d7 descheduler | tar -x -C /tmp/before
    python -m benchmarks.health_flood --tree /tmp/before                # the same, before the fix

The server runs in its own process with ``/debug/cache`` enabled and a digest as costly as a 20,000-pod
cache's, and 5,000 series on ``/metrics`` (``tests/support/flood.py``); ``clients`` threads in another
process request one path on fresh connections for ``seconds``; meanwhile a kubelet-like probe GETs
``/healthz`` every 0.5 s with a 1 s timeout. Figures: flood requests served, probes answered 200 within
the timeout, and the probes' latency. The bound: every probe answered.
"""

from __future__ import annotations

import argparse

from benchmarks.common import median, summary_line, verdict
from tests.support import flood

FLOODS = [("/debug/cache", 80), ("/healthz", 100), ("/metrics", 80)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--path", help="flood only this path (default: the three floods of issue 37)")
    parser.add_argument("--clients", type=int, default=80, help="flooding clients with --path (80)")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds each flood lasts (15)")
    parser.add_argument("--tree", default="", help="a directory holding another descheduler package")
    parser.add_argument("--pods", type=int, default=flood.ROWS, help="pods the cache digest covers (20000)")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds < 3:
        parser.error("--clients must be >= 1 and --seconds >= 3")
    floods = [(args.path, args.clients)] if args.path else FLOODS
    flood.ROWS = args.pods
    print(f"descheduler from: {args.tree or 'this tree'}; a cache digest over {args.pods} pods")
    missed_total = 0
    worst = 0.0
    for path, clients in floods:
        with flood.server(args.tree) as port:
            probes, served = flood.flooded(port, path, clients, args.seconds)
        missed = [p for p in probes if not p.answered]
        latencies = [p.seconds for p in probes]
        missed_total += len(missed)
        worst = max(worst, *latencies)
        print(
            f"{path} x{clients} for {args.seconds:g}s: {served} flood requests answered (any status); "
            f"/healthz answered {len(probes) - len(missed)}/{len(probes)}, "
            f"median {median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; "
            f"missed: {', '.join(p.status for p in missed) or 'none'}"
        )
    print(f"bound (every probe answered 200 within 1 s): {verdict(missed_total == 0)}")
    print(summary_line({"probes_missed": f"{missed_total}x", "probe_max": f"{worst:.3f}s"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
