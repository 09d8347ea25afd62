"""What a descheduler's start costs kube-apiserver and etcd at scale, ours (LIST, WatchList) against the
Kubernetes descheduler (client-go informers), then what our idle cycles send (issue 40).

    python -m benchmarks.server_cost --nodes 5000 --pods 150000

One cluster is loaded once (the loader of ``kwok_scale``, pods bound to their nodes with ``spec.nodeName``;
kwok is stopped once the nodes are Ready, so the pods stay Pending and nothing patches them). The
controllers and kube-scheduler are then stopped so the server serves only the client measured. Each row
gets a freshly restarted kube-apiserver (etcd keeps its data): its peak RSS and CPU are its own and its
watch cache is rebuilt from etcd before the client starts. Per row: the server's peak RSS and growth, CPU
seconds during the sync, the sync's seconds, and etcd's reads (etcd's own ``etcd_mvcc_range_total``, and the
server's ``etcd_requests_total`` for list operations). Then, on the same cluster, ``descheduler run
--dry-run`` with usage from Prometheus (nothing hot) for a few idle cycles; the audit log gives its
requests per cycle. Writes ``benchmarks/data/server-cost-DATE.json``. Not part of CI (it needs the
control-plane binaries, the peer and most of an hour at 150,000 pods).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks.audit import parse_audit, request_kind
from benchmarks.common import summary_line
from benchmarks.kwok_scale import (
    BENCH_NAMESPACE,
    DESCHEDULER_SA,
    LOADER_SA,
    Client,
    LeanExporter,
    LogTail,
    cycle_ends,
    descheduler_config,
    exporter_handler,
    load_cluster,
    loader_only_policy,
    plan_cluster,
    proc_cpu_rss,
    prom_value,
    setup_accounts,
    start_prometheus,
    wait_until,
)
from benchmarks.peers import audit_policy, peer_process
from benchmarks.watch_list_sync import ServerSample, measure

if TYPE_CHECKING:
    from tests.controlplane.cluster import ControlPlane

PEER_ROW = "peer"
LEAN_ROW = "lean"
LEAN_RESOURCES = ("pods", "nodes", "namespaces")
"""The ``lean`` row: ours (WatchList) syncing only what the peer's informers hold (less its PVCs), so the
cost of the objects our safety checks rest on (workloads, PDBs) is told apart from the client's own."""
PROTOBUF_ROW = "protobuf"
"""The ``lean`` row with pods and nodes asked for in protobuf (``watchCache.encoding: protobuf``), as the
peer's client-go asks for them."""
ROWS = ("off", "on", LEAN_ROW, PROTOBUF_ROW, PEER_ROW)
PEER_SYNCED = "Resetting pod evictor counters"
"""The Kubernetes descheduler's first log line of a cycle (``-v=3``): it comes after every informer synced
(``WaitForCacheSync`` in ``bootstrapDescheduler``)."""
NOOP_POLICY: dict[str, Any] = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [
        {
            "name": "noop",
            "pluginConfig": [
                {"name": "DefaultEvictor", "args": {}},
                {"name": "RemoveFailedPods", "args": {}},
            ],
            "plugins": {"deschedule": {"enabled": ["RemoveFailedPods"]}},
        }
    ],
}
"""Evicts nothing here (no pod has failed), yet starts the informers every cycle rests on."""
ETCD_RANGES = re.compile(r"^etcd_(?:debugging_)?mvcc_range_total(?:\{[^}]*\})? (\S+)$", re.M)
APISERVER_ETCD = re.compile(r'^etcd_requests_total\{[^}]*operation="([^"]*)"[^}]*\} (\S+)$', re.M)


class PeerNotBuilt(RuntimeError):
    """The peer row was asked for but the Kubernetes descheduler is not in the cache."""


def peer_binary() -> Path:
    """The cached Kubernetes descheduler, or a clear error saying how to build it (never a build here)."""
    from tests.controlplane import build

    peer = build.PEER_DESCHEDULER
    if not peer.is_built():
        raise PeerNotBuilt(
            f"the Kubernetes descheduler (peer row) is not built: no {peer.binary('descheduler')}; run "
            "`python -m tests.controlplane.build --peers` first, or leave 'peer' out of --rows"
        )
    return peer.binary("descheduler")


def etcd_reads(plane: ControlPlane) -> dict[str, float]:
    """etcd's range requests served (its own counter) and kube-apiserver's list calls to etcd so far."""
    etcd_url = plane.component("etcd").health_url.removesuffix("/health") + "/metrics"
    with urllib.request.urlopen(etcd_url, timeout=10) as response:
        etcd_text = response.read().decode()
    tls = ssl.create_default_context(cafile=str(plane.pki.ca_crt))
    tls.load_cert_chain(str(plane.pki.admin_crt), str(plane.pki.admin_key))
    with urllib.request.urlopen(f"{plane.server}/metrics", timeout=30, context=tls) as response:
        api_text = response.read().decode()
    reads: dict[str, float] = {"etcd_ranges": sum(float(v) for v in ETCD_RANGES.findall(etcd_text))}
    for operation, value in APISERVER_ETCD.findall(api_text):
        key = f"apiserver_etcd_{operation}"
        reads[key] = reads.get(key, 0.0) + float(value)
    return reads


def build_done() -> bool:
    from tests.controlplane import build

    return build.PEER_DESCHEDULER.is_built()


def fresh_apiserver(plane: ControlPlane, settle_s: float = 120.0) -> int:
    """Restart kube-apiserver (same flags, etcd's data kept) and wait until its watch cache is rebuilt:
    two quiet seconds (under 0.2 s of CPU). Its pid."""
    plane.restart("kube-apiserver", deadline_s=300)
    pid = plane.component("kube-apiserver").process.pid  # type: ignore[union-attr]
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        before = proc_cpu_rss(pid)[0]
        time.sleep(2)
        if proc_cpu_rss(pid)[0] - before < 0.2:
            break
    return pid


def peer_sync(
    plane: ControlPlane, kubeconfig: Path, workdir: Path, pid: int, timeout: float
) -> dict[str, Any]:
    """The Kubernetes descheduler from exec to its first cycle (every informer synced), then stopped."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv, env = peer_process(plane, peer_binary(), NOOP_POLICY, kubeconfig, 3600, workdir)
    argv = [{"--v=1": "--v=3", "--leader-elect=true": "--leader-elect=false"}.get(a, a) for a in argv]
    log_path = workdir / "peer.log"
    with log_path.open("wb") as log, ServerSample(pid) as server:
        started = time.monotonic()
        popen = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(
                "the peer's first cycle",
                lambda: PEER_SYNCED in log_path.read_text(errors="replace") or popen.poll() is not None,
                timeout,
                interval=0.1,
            )
            seconds = time.monotonic() - started
            peer_cpu, _, peer_rss = proc_cpu_rss(popen.pid) if popen.poll() is None else (float("nan"),) * 3
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, 15)
            popen.wait(timeout=30)
    if PEER_SYNCED not in log_path.read_text(errors="replace"):
        raise RuntimeError(f"the peer exited before its first cycle:\n{log_path.read_text()[-2000:]}")
    return {"mode": PEER_ROW, **server.figures(), "sync_s": round(seconds, 2), "our_rss_mib": None,
            "peer_rss_mib": round(peer_rss, 1), "peer_cpu_total_s": round(peer_cpu, 2)}  # fmt: skip


@contextlib.contextmanager
def apiserver_profile(plane: ControlPlane, seconds: float, path: Path | None) -> Iterator[None]:
    """A CPU profile of kube-apiserver (its ``/debug/pprof/profile``, as the admin) over the first
    ``seconds`` of the block, written to ``path`` (None: no profile). Read it with ``go tool pprof -top``."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = f"/debug/pprof/profile?seconds={max(1, round(seconds))}"
    argv = [str(plane.kubectl_path), "--kubeconfig", str(plane.kubeconfig), "get", "--raw", raw]
    with path.open("wb") as sink:
        profiler = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
        try:
            yield
        finally:
            _, err = profiler.communicate(timeout=seconds + 60)
    if profiler.returncode != 0:
        raise RuntimeError(f"the profile of kube-apiserver failed: {err.decode(errors='replace')[-500:]}")


def sync_row(
    plane: ControlPlane,
    row: str,
    kubeconfig: Path,
    workdir: Path,
    timeout: float,
    wait_for_peer: float = 0,
    profile: tuple[Path, float] | None = None,
) -> dict[str, Any]:
    """One row on a freshly restarted kube-apiserver, with etcd's reads counted around it (and, with
    ``profile`` (folder, seconds), a CPU profile of the server from the client's start)."""
    pid = fresh_apiserver(plane)
    before = etcd_reads(plane)
    folder, seconds = profile if profile is not None else (None, 0.0)
    with apiserver_profile(plane, seconds, folder / f"apiserver-{row}.pb.gz" if folder else None):
        if row == PEER_ROW:
            with contextlib.suppress(TimeoutError):
                wait_until("the peer's build", build_done, wait_for_peer, interval=10)
            figures = peer_sync(plane, kubeconfig, workdir / "peer", pid, timeout)
        elif row == LEAN_ROW:
            figures = {**measure(kubeconfig, "on", pid, LEAN_RESOURCES), "mode": LEAN_ROW}
        elif row == PROTOBUF_ROW:
            figures = {**measure(kubeconfig, "on", pid, LEAN_RESOURCES, "protobuf"), "mode": PROTOBUF_ROW}
        else:
            figures = measure(kubeconfig, row, pid)
    after = etcd_reads(plane)
    figures.update({k: v - before.get(k, 0.0) for k, v in after.items()})
    figures["apiserver_hwm_mib"] = round(proc_cpu_rss(pid)[2], 1)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return figures


def idle_cycles(
    plane: ControlPlane, plan: Any, kubeconfig: Path, args: argparse.Namespace, workdir: Path,
    stack: contextlib.ExitStack,
) -> dict[str, Any]:  # fmt: skip
    """``descheduler run --dry-run`` for warm-up and idle cycles (usage from Prometheus, nothing hot):
    our requests per cycle between the ends of the idle cycles, from the audit log."""
    from tests.support.service import REPO, descheduler_command, serve_http, subprocess_env

    exporter = LeanExporter(plan, time.time() - 3600)
    target = stack.enter_context(serve_http(exporter_handler(exporter, [])))
    prom_url, _ = start_prometheus(workdir / "prometheus", target, args.scrape, stack)
    wait_until(
        "Prometheus rate() for every pod",
        lambda: (
            prom_value(prom_url, f"count(rate(container_cpu_usage_seconds_total[{args.window}]))")
            == plan.pods
        ),
        600,
        interval=2.0,
    )
    from tests.controlplane.cluster import free_port

    config = workdir / "descheduler.yaml"
    config.write_text(yaml.safe_dump(descheduler_config(prom_url, (free_port(), free_port()), args)))
    log_path = workdir / "descheduler.log"
    argv = descheduler_command(
        "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--dry-run", "--log-format", "json"
    )
    want = 2 + args.cycles
    with log_path.open("wb") as log:
        popen = subprocess.Popen(argv, cwd=REPO, env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
        tail = LogTail(log_path)
        try:
            cycles = wait_until(
                f"{want} cycles",
                lambda: (ends := cycle_ends(tail.poll())) and len(ends) >= want and ends,
                args.timeout,
                interval=0.5,
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, 15)
            popen.wait(timeout=30)
    time.sleep(1.0)  # the audit log's buffered writer
    since, until = cycles[1][0], cycles[want - 1][0]
    user = f"system:serviceaccount:{BENCH_NAMESPACE}:{DESCHEDULER_SA}"
    assert plane.audit_log is not None
    with plane.audit_log.open() as lines:
        events = [e for e in parse_audit(lines) if e.user == user and since < e.received <= until]
    summaries = [r for r in tail.records if r.get("event") == "cycle_summary"][2:want]
    ran = want - 2
    by_kind = Counter(request_kind(e) for e in events)
    return {
        "cycles": ran,
        "interval_s": args.interval,
        "evictions": sum(sum((s.get("evictions") or {}).values()) for s in summaries),
        "per_cycle": {k: round(v / ran, 2) for k, v in sorted(by_kind.items())},
        "besides_lease_per_cycle": round(sum(v for k, v in by_kind.items() if k != "lease") / ran, 2),
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from tests.controlplane import build
    from tests.controlplane.cluster import ControlPlane

    rows_wanted = args.rows.split(",")
    if PEER_ROW in rows_wanted and not args.wait_for_peer:
        peer_binary()  # fail before minutes of loading
    plan = plan_cluster(args.nodes, args.pods, hot_fraction=0.0, seed=args.seed)
    binaries = build.ensure_all()
    out: dict[str, Any] = {"nodes": args.nodes, "pods": plan.pods, "load_average_start": os.getloadavg()}
    with contextlib.ExitStack() as stack:
        user = f"system:serviceaccount:{BENCH_NAMESPACE}:{DESCHEDULER_SA}"
        plane = ControlPlane.start(
            workdir / "controlplane",
            binaries,
            audit_policy=audit_policy([user]),
            profiling=args.profile is not None,
        )
        stack.callback(plane.stop)
        kubeconfigs = setup_accounts(plane, workdir)
        token = json.loads(kubeconfigs[LOADER_SA].read_text())["users"][0]["user"]["token"]
        client = Client(plane.server, plane.pki.ca_crt, token)
        plane.apply(loader_only_policy(f"system:serviceaccount:{BENCH_NAMESPACE}:{LOADER_SA}"))
        time.sleep(3)  # the admission policy takes effect
        started = time.monotonic()
        load_cluster(client, plane, plan, args.workers, args.load_timeout, pods_running=False)
        out["load_s"] = round(time.monotonic() - started)
        print(f"loaded {len(plan.nodes)} nodes, {plan.pods} pods in {out['load_s']}s", flush=True)
        for doc in reversed(loader_only_policy("")):
            kind = doc["kind"].lower() + "s"
            plane.kubectl(
                "delete", f"{kind}.admissionregistration.k8s.io", doc["metadata"]["name"], check=False
            )
        time.sleep(5)  # the controllers settle on the new objects, then only the measured client is left
        for name in ("kube-controller-manager", "kube-scheduler"):
            plane.component(name).stop()
        out["rows"] = []
        for row in rows_wanted:
            profile = (args.profile, args.profile_seconds) if args.profile is not None else None
            figures = sync_row(
                plane, row, kubeconfigs[DESCHEDULER_SA], workdir, args.timeout, args.wait_for_peer, profile
            )
            out["rows"].append(figures)
            print(json.dumps(figures), flush=True)
            save(out, args)
        if args.cycles:
            out["idle"] = idle_cycles(plane, plan, kubeconfigs[DESCHEDULER_SA], args, workdir, stack)
            print(json.dumps(out["idle"]), flush=True)
            save(out, args)
    return out


def save(result: dict[str, Any], args: argparse.Namespace) -> None:
    """Write what is measured so far (a late failure keeps the rows before it)."""
    result["date"] = datetime.now(UTC).isoformat(timespec="seconds")
    if not args.no_data:
        out = args.out or Path(__file__).parent / "data" / f"server-cost-{result['date'][:10]}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")


LABELS = {
    "off": "LIST",
    "on": "WatchList",
    LEAN_ROW: "WL lean",
    PROTOBUF_ROW: "WL proto",
    PEER_ROW: "Go peer",
}


def table(result: dict[str, Any]) -> str:
    peer = next((r for r in result["rows"] if r["mode"] == PEER_ROW), None)
    lines = [
        f"{result['nodes']} nodes, {result['pods']} pods",
        f"{'row':<10}{'peak RSS':>10}{'growth':>9}{'CPU s':>8}{'etcd ranges':>13}{'etcd lists':>12}"
        f"{'sync s':>9}{'RSS/peer':>10}{'client CPU s':>14}",
    ]
    for r in result["rows"]:
        ratio = r["apiserver_peak_rss_mib"] / peer["apiserver_peak_rss_mib"] if peer else float("nan")
        lines.append(
            f"{LABELS.get(r['mode'], r['mode']):<10}{r['apiserver_peak_rss_mib']:>10.0f}"
            f"{r['apiserver_rss_growth_mib']:>9.0f}{r['apiserver_cpu_s']:>8.1f}{r['etcd_ranges']:>13.0f}"
            f"{r.get('apiserver_etcd_list', 0):>12.0f}{r['sync_s']:>9.1f}{ratio:>10.2f}"
            f"{r.get('our_cpu_s', r.get('peer_cpu_total_s', float('nan'))):>14.2f}"
        )
    if "idle" in result:
        lines.append(f"idle cycles: {json.dumps(result['idle'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--load-timeout", type=float, default=3600.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a sync or the cycles may take")
    parser.add_argument(
        "--rows",
        default=f"off,on,{PEER_ROW}",
        help=f"rows in order: off (LIST), on (WatchList), {LEAN_ROW} (WatchList of "
        f"{', '.join(LEAN_RESOURCES)} only), {PROTOBUF_ROW} ({LEAN_ROW} with pods and nodes in protobuf), "
        f"{PEER_ROW}",
    )
    parser.add_argument("--cycles", type=int, default=4, help="idle cycles measured (0: none)")
    parser.add_argument("--interval", type=float, default=10.0, help="our cycle interval, s")
    parser.add_argument("--window", default="1m")
    parser.add_argument("--scrape", type=float, default=15.0)
    parser.add_argument(
        "--wait-for-peer", type=float, default=0, help="seconds the peer row waits for a build under way"
    )
    parser.add_argument("--no-data", action="store_true", help="do not write benchmarks/data/")
    parser.add_argument(
        "--out", type=Path, default=None, help="the data file (default benchmarks/data/server-cost-DATE.json)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="a folder for a CPU profile of kube-apiserver per row (apiserver-ROW.pb.gz: go tool pprof -top)",
    )
    parser.add_argument("--profile-seconds", type=float, default=15.0, help="how long each profile runs, s")
    args = parser.parse_args(argv)
    unknown = [row for row in args.rows.split(",") if row not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; known: {', '.join(ROWS)}")
    try:
        with tempfile.TemporaryDirectory(prefix="server-cost-") as tmp:
            result = run(args, Path(tmp))
    except PeerNotBuilt as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + table(result))
    rows = {r["mode"]: r for r in result["rows"]}
    values = {
        f"{LABELS.get(k, k).replace(' ', '_').lower()}_server_cpu": f"{r['apiserver_cpu_s']}s"
        for k, r in rows.items()
    }
    if "idle" in result:
        values["idle_requests"] = f"{result['idle']['besides_lease_per_cycle']}"
    print(summary_line(values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
