"""What our initial sync costs kube-apiserver: paginated LIST vs WatchList (issue 40), on the real control
plane with kwok nodes and pods placed up front (the loader of ``kwok_scale``).

    python -m benchmarks.watch_list_sync --nodes 1000 --pods 20000

For each mode, in a fresh process, a ``ClusterCache`` (every default resource, pages of 500) syncs as our
own ServiceAccount and exits; meanwhile this process samples kube-apiserver's ``/proc`` every 0.1 s. The
table gives the server's peak RSS above its level before the sync and its CPU seconds during the sync, and
ours: sync time and peak RSS (``VmHWM``). Writes ``benchmarks/data/watch-list-sync-DATE.json``. Not part of
CI (it needs the control-plane binaries and minutes of machine time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import summary_line
from benchmarks.kwok_scale import (
    BENCH_NAMESPACE,
    DESCHEDULER_SA,
    LOADER_SA,
    Client,
    load_cluster,
    loader_only_policy,
    plan_cluster,
    proc_cpu_rss,
    setup_accounts,
)

CHILD = """
import json, sys, time
from pathlib import Path
from descheduler.kube.cache import ClusterCache
from descheduler.kube.connection import connect
api = connect(sys.argv[1], qps=50, burst=100)
resources = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else None
encoding = sys.argv[4] if len(sys.argv) > 4 else "json"
cache = ClusterCache(api, watch_list=sys.argv[2], resources=resources, encoding=encoding)
started = time.monotonic()
cpu0 = time.process_time()
cache.start()
ok = cache.wait_synced(600)
seconds = time.monotonic() - started
cpu = time.process_time() - cpu0
pods = len(cache.snapshot().pods)
hwm = next(int(l.split()[1]) / 1024 for l in Path("/proc/self/status").read_text().splitlines()
           if l.startswith("VmHWM:"))
cache.stop()
print(json.dumps({"synced": ok, "seconds": seconds, "rss_mib": hwm, "pods": pods,
                  "cpu_s": cpu, "cpu_total_s": time.process_time(), "stats": cache.stats()}))
"""


class ServerSample:
    """kube-apiserver's CPU seconds and RSS (MiB) over a span, sampled from ``/proc`` every 0.1 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu0, self.rss0, _ = proc_cpu_rss(pid)
        self.peak = self.rss0
        self.cpu1 = self.cpu0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.1):
            self.peak = max(self.peak, proc_cpu_rss(self.pid)[1])

    def __enter__(self) -> ServerSample:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.cpu1 = proc_cpu_rss(self.pid)[0]

    def figures(self) -> dict[str, float]:
        return {
            "apiserver_cpu_s": round(self.cpu1 - self.cpu0, 2),
            "apiserver_rss_before_mib": round(self.rss0, 1),
            "apiserver_peak_rss_mib": round(self.peak, 1),
            "apiserver_rss_growth_mib": round(self.peak - self.rss0, 1),
        }


def measure(
    kubeconfig: Path, mode: str, apiserver_pid: int, resources: tuple[str, ...] = (), encoding: str = "json"
) -> dict[str, Any]:
    """One sync in a child process (of ``resources``, default every resource the service syncs; pods and
    nodes asked for in ``encoding``); kube-apiserver's CPU and peak RSS sampled while it runs, and ours:
    CPU from the cache's start to synced (``our_cpu_s``) and of the whole process, imports included."""
    command = [sys.executable, "-c", CHILD, str(kubeconfig), mode, ",".join(resources), encoding]
    with ServerSample(apiserver_pid) as server:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} sync failed: {proc.stderr[-2000:]}")
    ours = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "mode": mode,
        **server.figures(),
        "sync_s": round(ours["seconds"], 2),
        "our_rss_mib": round(ours["rss_mib"], 1),
        "our_cpu_s": round(ours["cpu_s"], 2),
        "our_cpu_total_s": round(ours["cpu_total_s"], 2),
        "pods": ours["pods"],
        "synced": ours["synced"],
        "watch_lists": sum(s["watch_lists"] for s in ours["stats"].values()),
        "lists": sum(s["lists"] for s in ours["stats"].values()),
        **{
            key: sum(s.get(key, 0) for s in ours["stats"].values())
            for key in ("protobuf_pages", "protobuf_events", "proto_pages_as_json", "proto_relists")
        },
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from tests.controlplane import build
    from tests.controlplane.cluster import ControlPlane

    plan = plan_cluster(args.nodes, args.pods, seed=args.seed)
    binaries = build.ensure_all()
    with contextlib.ExitStack() as stack:
        plane = ControlPlane.start(workdir / "controlplane", binaries)
        stack.callback(plane.stop)
        kubeconfigs = setup_accounts(plane, workdir)
        token = json.loads(kubeconfigs[LOADER_SA].read_text())["users"][0]["user"]["token"]
        client = Client(plane.server, plane.pki.ca_crt, token)
        plane.apply(loader_only_policy(f"system:serviceaccount:{BENCH_NAMESPACE}:{LOADER_SA}"))
        time.sleep(
            3
        )  # the admission policy takes effect (kwok_scale probes it; a few extra pods don't matter)
        started = time.monotonic()
        load_cluster(client, plane, plan, args.workers, args.load_timeout)
        print(
            f"loaded {len(plan.nodes)} nodes, {plan.pods} pods in {time.monotonic() - started:.0f}s",
            flush=True,
        )
        for doc in reversed(loader_only_policy("")):
            kind = doc["kind"].lower() + "s"
            plane.kubectl(
                "delete", f"{kind}.admissionregistration.k8s.io", doc["metadata"]["name"], check=False
            )
        time.sleep(5)  # let the controllers settle
        pid = plane.component("kube-apiserver").process.pid
        kubeconfig = kubeconfigs[DESCHEDULER_SA]
        rows = []
        for mode in args.modes.split(","):
            rows.append(measure(kubeconfig, mode, pid))
            print(json.dumps(rows[-1]), flush=True)
            time.sleep(3)
    return {"nodes": args.nodes, "pods": plan.pods, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--load-timeout", type=float, default=900.0)
    parser.add_argument("--modes", default="off,on,off,on", help="watchList modes, in order (off = LIST)")
    parser.add_argument("--no-data", action="store_true", help="do not write benchmarks/data/")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="watch-list-sync-") as tmp:
        result = run(args, Path(tmp))
    result["date"] = datetime.now(UTC).isoformat(timespec="seconds")
    header = (
        f"{'sync by':<10}{'server CPU s':>14}{'server peak RSS MiB (+growth)':>32}"
        f"{'our sync s':>12}{'our RSS MiB':>13}"
    )
    print(f"\n{result['nodes']} nodes, {result['pods']} pods\n{header}")
    for row in result["rows"]:
        label = "WatchList" if row["mode"] == "on" else "LIST"
        print(
            f"{label:<10}{row['apiserver_cpu_s']:>14.2f}"
            f"{row['apiserver_peak_rss_mib']:>22.1f} (+{row['apiserver_rss_growth_mib']:.1f})"
            f"{row['sync_s']:>12.2f}{row['our_rss_mib']:>13.1f}"
        )
    if not args.no_data:
        out = Path(__file__).parent / "data" / f"watch-list-sync-{result['date'][:10]}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    last = {r["mode"]: r for r in result["rows"]}
    if "on" in last and "off" in last:
        print(
            summary_line(
                {
                    "list_server_cpu": f"{last['off']['apiserver_cpu_s']}s",
                    "watchlist_server_cpu": f"{last['on']['apiserver_cpu_s']}s",
                    "list_sync": f"{last['off']['sync_s']}s",
                    "watchlist_sync": f"{last['on']['sync_s']}s",
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
