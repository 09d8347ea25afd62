"""A living cluster (issue 32): hours of churn, moving load and real component failures on the real control
plane, with safety checks and the measures load-aware rebalancing is judged by.

One run: etcd, kube-apiserver (audit log of the descheduler's requests), the controllers, kube-scheduler and
kwok; ``--nodes`` kwok nodes in four groups, Deployments and StatefulSets with PodDisruptionBudgets, seven
pods a node; usage from simulated kubelets that follow where the pods run, scraped by a real Prometheus.
Two replicas of the descheduler (leader election) run while a driver applies the seeded schedule of
``soak_model.make_schedule``: drift across the node groups, bursts that must never cause an eviction,
sustained steps that must be cured, churn (scale, rollouts, namespaces, PDB edits, nodes added, cordoned,
drained and removed) and faults (kube-apiserver, etcd and kwok killed and restarted, Prometheus restarted,
the leader SIGKILLed and started again). Everything is measured outside the descheduler: evictions from
the audit log, usage from the exporter's own model, budgets from the PDBs' status, the watch cache against
a fresh LIST (``/debug/cache``), memory, CPU, threads and file descriptors from ``/proc``.

    python -m benchmarks.soak --nodes 200 --duration 3600 --seed 1 --json run.json --png run.png
    python -m benchmarks.soak --descheduler k8s-descheduler --nodes 200 --duration 3600 --seed 1 ...

Exit status 1 when a safety check of our descheduler failed (the CI test runs a short version).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks import soak_model as m
from benchmarks.audit import parse_audit
from benchmarks.peers import (
    ACCOUNTS,
    BENCH_NAMESPACE,
    GROUP_LABEL,
    KOORD,
    OURS,
    OURS_TAINT,
    PEER,
    Settings,
    audit_policy,
    cycle_times,
    is_eviction,
    koord_config,
    ours_config,
    peer_policy,
    peer_process,
    proc_figures,
    setup_accounts,
)

if TYPE_CHECKING:
    from descheduler.kube.api import KubeApi
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import UsageBackend

GROUP = "soak"
"""The value of ``GROUP_LABEL`` on every soak node; the deschedulers select these nodes only."""
NAMESPACE_PREFIX = "soak-"
LEASE_S = (8.0, 5.0, 1.0)
"""Our lease duration, renew deadline and retry period: a takeover within ~10 s of the leader's death."""
LEASE_FLAGS = ("lease-duration", "renew-deadline", "retry-period")
RECOVERY_CYCLES = 10
"""A fault is recovered once a healthy cycle runs within this many intervals of the component being back
(for the leader's death: of the Lease expiring)."""
WINDOW_CYCLES = 10
"""Our per-workload window (``objectLimiters.workload``), in intervals, with ``maxMigrating: 1``."""
PER_NODE = 2
"""``maxNoOfPodsToEvictPerNode`` (per cycle), for every descheduler."""


# --- the usage model ---------------------------------------------------------------------------------------


@dataclass
class PodLife:
    uid: str
    name: str
    workload: str
    created: float
    node: str = ""
    running: float | None = None
    gone: float | None = None


def churned(done: Sequence[Mapping[str, Any]]) -> list[tuple[float, str, str]]:
    """(time, kind, target) of every event applied but drains (``drained`` says whom a drain touched)."""
    return [(d["at"], d["kind"], d["target"]) for d in done if d["kind"] != "node-drain"]


def drained(done: Sequence[Mapping[str, Any]], lives: Sequence[PodLife]) -> list[tuple[float, str, str]]:
    """A drain once per workload with a pod on the drained node when it began: only those workloads'
    PDBs does the drain explain."""
    out = []
    for d in done:
        if d["kind"] == "node-drain":
            at = d["at"]
            hit = {
                life.workload
                for life in lives
                if life.node == d["target"]
                and life.running is not None
                and life.running <= at
                and (life.gone is None or life.gone >= at)
            }
            out += [(at, "node-drain", workload) for workload in sorted(hit)]
    return out


class SoakUsage:
    """Simulated kubelets for the soak's nodes: every pod in a ``soak-*`` namespace that kwok runs uses
    ``POD_CORES`` (``BUSY_CORES`` during a step) times its node group's drift; each node adds its base load
    and any burst. A busy pod that goes (evicted, deleted) hands its load to the next new pod of its
    workload, so moving it moves the load. Also the record of every pod's life (for pending seconds and
    for the node an evicted pod ran on)."""

    def __init__(self, api: KubeApi, plan: m.Plan, events: Sequence[m.Event], t0: float) -> None:
        from descheduler.kube.cache import ClusterCache
        from tests.support.service import GI, SimulatedNodes

        self.plan, self.events, self.t0 = plan, events, t0
        self.model = SimulatedNodes()
        self.gi = GI
        self.cache = ClusterCache(
            api,
            resources=("pods", "nodes"),
            node_selector=f"{GROUP_LABEL}={GROUP}",
            watch_timeout=30,
            backoff_initial=0.2,
            backoff_max=1.0,
        )
        self.lock = threading.Lock()
        self.nodes: set[str] = set()
        """Nodes the API server has now (a removed node leaves the model's exposition idle)."""
        self.lives: dict[str, PodLife] = {}
        """uid -> the pod's life."""
        self.by_name: dict[str, list[PodLife]] = {}
        self.running: dict[str, PodLife] = {}
        """uid -> life of the pods the model has now."""
        self.busy: dict[str, m.Event] = {}
        """uid -> the step that made the pod busy."""
        self.handed: dict[str, list[m.Event]] = {}
        """workload -> steps whose busy pods left it and await a new pod of it."""
        self.bursting: dict[str, float] = {}

    def now(self) -> float:
        return time.time() - self.t0

    def start_step(self, step: m.Event) -> int:
        with self.lock:
            pods = [life for life in self.running.values() if life.node == step.target]
            for life in pods:
                self.busy[life.uid] = step
            return len(pods)

    def sync(self) -> None:
        snap = self.cache.snapshot()
        t = self.now()
        with self.lock:
            self.nodes = {n.name for n in snap.nodes}
            for name in self.nodes - set(self.model.node_names()):
                self.model.add_node(name, base_cores=m.BASE_CORES, cpus=m.NODE_CPUS, mem_total=16 * self.gi)
            mine = [p for p in snap.pods if p.namespace.startswith(NAMESPACE_PREFIX) and "app" in p.labels]
            seen = {
                p.uid
                for p in mine
                if p.phase == "Running" and not p.terminating and p.node_name in self.nodes
            }
            for uid in set(self.running) - seen:  # first, as a StatefulSet's new pod has the old one's name
                life = self.running.pop(uid)
                life.gone = t
                self.model.remove_pod(life.workload.split("/")[0], life.name)
                step = self.busy.pop(uid, None)
                if step is not None and step.t + step.duration_s > t:
                    self.handed.setdefault(life.workload, []).append(step)
            for pod in mine:
                life = self.lives.get(pod.uid)
                if life is None:
                    life = PodLife(
                        pod.uid, pod.name, f"{pod.namespace}/{pod.labels['app']}", pod.created - self.t0
                    )
                    self.lives[pod.uid] = life
                    self.by_name.setdefault(pod.name, []).append(life)
                    handed = self.handed.get(life.workload)
                    while handed:
                        step = handed.pop(0)
                        if step.t + step.duration_s > t:
                            self.busy[pod.uid] = step
                            break
                if pod.uid in seen and pod.uid not in self.running:
                    life.node, life.running = pod.node_name, life.running if life.running is not None else t
                    self.running[pod.uid] = life
                    self.model.add_pod(pod.namespace, pod.name, pod.node_name, m.POD_CORES)
            self._set_loads(t)

    def _set_loads(self, t: float) -> None:
        """The drift, the steps and the bursts at ``t`` (under the lock)."""
        bursts = {e.target: e.value for e in m.active(self.events, "burst", t)}
        self.bursting = bursts
        base = {n: m.BASE_CORES + bursts.get(n, 0.0) for n in self.model.node_names()}
        pods: dict[tuple[str, str], float] = {}
        for uid, life in self.running.items():
            step = self.busy.get(uid)
            cores = step.value if step is not None and step.t + step.duration_s > t else m.POD_CORES
            if step is not None and cores == m.POD_CORES:
                del self.busy[uid]
            pods[(life.workload.split("/")[0], life.name)] = cores * m.drift(
                m.group_of(life.node), t, self.plan.drift_period_s
            )
        self.model.set_loads(base, pods)

    def sample(self) -> dict[str, tuple[float, float]]:
        """Every present node's true usage and its usage without bursts, in percent."""
        busy = self.model.busy_cores()
        with self.lock:
            out = {}
            for node in self.nodes:
                if node in busy:
                    total = 100.0 * busy[node] / m.NODE_CPUS
                    calm = 100.0 * (busy[node] - self.bursting.get(node, 0.0)) / m.NODE_CPUS
                    out[node] = (total, calm)
            return out

    def node_at(self, name: str, t: float) -> tuple[str, str]:
        """The node and workload of the pod called ``name`` that ran at ``t`` (a StatefulSet's pods reuse
        their names)."""
        with self.lock:
            lives = [
                life for life in self.by_name.get(name, []) if life.running is not None and life.running <= t
            ]
        if not lives:
            return "", ""
        life = max(lives, key=lambda life: life.running or 0.0)
        return life.node, life.workload

    @contextlib.contextmanager
    def following(self, interval: float = 0.2) -> Iterator[SoakUsage]:
        self.cache.start()
        if not self.cache.wait_synced(60):
            raise RuntimeError("the usage exporter's cache did not sync in 60 s")
        self.sync()
        from tests.support.sampling import sampling

        try:
            with sampling(self.sync, "kubelets", interval):
                yield self
        finally:
            self.cache.stop()


# --- the cluster -------------------------------------------------------------------------------------------


def statefulset(name: str, replicas: int) -> dict[str, Any]:
    from tests.controlplane import objects

    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": objects.pod_template(name, GROUP, cpu="100m", memory="128Mi"),
        },
    }


def workload_docs(name: str, replicas: int) -> list[dict[str, Any]]:
    from tests.controlplane import objects

    kind = (
        statefulset(name, replicas)
        if name.startswith("sts-")
        else objects.deployment(name, GROUP, replicas=replicas, cpu="100m", memory="128Mi")
    )
    return [kind, objects.pdb(name, name, max_unavailable=1)]


def namespace(plane: ControlPlane, name: str) -> None:
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
    plane.wait_for(
        f"ServiceAccount default in {name}",
        lambda: plane.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        timeout_s=60,
    )


def soak_node(name: str) -> dict[str, Any]:
    from tests.controlplane import objects

    doc = objects.node(name, GROUP)
    doc["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"g{m.group_of(name)}"
    return doc


def build_cluster(plane: ControlPlane, plan: m.Plan) -> int:
    """Nodes, the two namespaces and every workload with its PDB; returns the pod count once all run."""
    nodes = m.node_names(plan.nodes)
    plane.apply([soak_node(n) for n in nodes])
    workloads = m.apps(plan.nodes)
    for ns in sorted({ns for ns, _, _ in workloads}):
        namespace(plane, ns)
        docs = [d for n, app, r in workloads if n == ns for d in workload_docs(app, r)]
        plane.apply(docs, namespace=ns)
    total = sum(r for _, _, r in workloads)

    def running() -> int:
        pods = plane.get_json("pods", "-A", "-l", "app")["items"]
        count = sum(p.get("status", {}).get("phase") == "Running" for p in pods)
        return count if count >= total else 0

    return int(plane.wait_for(f"{total} pods Running", running, timeout_s=600, interval_s=3))


# --- the deschedulers --------------------------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    healthz: int | None = None
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    """Every log this replica's processes wrote (a restart starts a new one)."""

    def start(self) -> None:
        path = self.log.with_name(f"{self.log.stem}.{len(self.logs)}.log")
        self.logs.append(path)
        with path.open("wb") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def terminate(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs if p.exists())


def ours_doc(tool: str, prometheus_url: str, ports: Any, plan: m.Plan, taint: bool) -> dict[str, Any]:
    """``peers.ours_config`` (thresholds 40/70, Prometheus, leader election) with the soak's limits: one
    eviction per workload per ``WINDOW_CYCLES`` intervals, ``PER_NODE`` per node per cycle, a short Lease."""
    settings = Settings(plan.interval_s, plan.consecutive, WINDOW_CYCLES * plan.interval_s, taint=taint)
    doc = ours_config(GROUP, prometheus_url, ports, settings)
    doc["leaderElection"].update(
        {
            "leaseDuration": f"{LEASE_S[0]:g}s",
            "renewDeadline": f"{LEASE_S[1]:g}s",
            "retryPeriod": f"{LEASE_S[2]:g}s",
        }
    )
    doc["maxNoOfPodsToEvictPerNode"] = PER_NODE
    doc["profiles"][0]["pluginConfig"][1]["args"]["objectLimiters"]["workload"]["maxMigrating"] = 1
    return doc


def ours_process(package: Path | None) -> tuple[dict[str, str], Path]:
    """Environment and working directory of our replicas: ``package`` (a folder holding another
    ``descheduler`` package, e.g. an older commit's) goes first on PYTHONPATH and is the working directory,
    since ``python -m`` puts the working directory before PYTHONPATH; the repo stays for everything else."""
    from tests.support.service import REPO, subprocess_env

    env = subprocess_env()
    if package is None:
        return env, REPO
    env["PYTHONPATH"] = os.pathsep.join((str(package.resolve()), env["PYTHONPATH"]))
    return env, package.resolve()


def replicas(
    tool: str,
    workdir: Path,
    kubeconfig: Path,
    plane: ControlPlane,
    backend: UsageBackend,
    plan: m.Plan,
    taint: bool,
    binary: Path | None,
    package: Path | None = None,
) -> list[Replica]:
    """Two replicas (one for Koordinator, whose configuration turns leader election off)."""
    from tests.support.service import Ports, descheduler_command

    out: list[Replica] = []
    for i in range(1 if tool == KOORD else 2):
        folder = workdir / f"replica-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        ports = Ports.free()
        if tool in (OURS, OURS_TAINT):
            config = folder / "config.yaml"
            config.write_text(yaml.safe_dump(ours_doc(tool, backend.url, ports, plan, taint)))
            argv = descheduler_command(
                "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--log-format", "json",
                "--debug-cache",  # /debug/cache: opt-in, the digest of the last cycle's start
            )  # fmt: skip
            env, cwd = ours_process(package)
            out.append(Replica(f"replica-{i}", argv, env, cwd, folder / "descheduler", ports.healthz))
        elif tool == KOORD:
            from benchmarks import koordinator

            assert binary is not None
            settings = Settings(plan.interval_s, plan.consecutive, WINDOW_CYCLES * plan.interval_s)
            config = folder / "koord.yaml"
            config.write_text(yaml.safe_dump(koord_config(kubeconfig, GROUP, ports, settings)))
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            out.append(
                Replica(f"replica-{i}", koordinator.command(binary, config), env, folder, folder / "koord")
            )
        else:
            assert binary is not None
            doc = peer_policy(GROUP, backend.url)
            doc["maxNoOfPodsToEvictPerNode"] = PER_NODE
            argv, env = peer_process(plane, binary, doc, kubeconfig, plan.interval_s, folder)
            # Its defaults (137 s lease, 26 s retry) would leave it without a leader for minutes after
            # the leader's death; it gets the Lease timings ours has.
            argv += [
                f"--leader-elect-{flag}={value:g}s" for flag, value in zip(LEASE_FLAGS, LEASE_S, strict=True)
            ]
            out.append(Replica(f"replica-{i}", argv, env, folder, folder / "peer"))
    return out


def cycles_of(tool: str, text: str, year: int) -> list[tuple[float, bool]]:
    """(time, healthy) of every cycle in a replica's log: ours says ``usage_errors`` on each summary; the
    peers' cycle lines say nothing of the kind (every cycle counts)."""
    if tool in (PEER, KOORD):
        return [(t, True) for t in cycle_times(text, peer=tool == PEER, koord=tool == KOORD, year=year)]
    out = []
    for line in text.splitlines():
        if '"cycle_summary"' not in line:
            continue
        with contextlib.suppress(ValueError, KeyError, TypeError):
            record = json.loads(line)
            ok = not record.get("usage_errors") and not record.get("aborted")
            out.append((datetime.fromisoformat(record["timestamp"]).timestamp(), ok))
    return sorted(out)


def leader(tool: str, group: Sequence[Replica], year: int) -> Replica:
    """The replica whose log has the latest cycle (only the leader runs cycles)."""

    def last(r: Replica) -> float:
        if r.process is None or r.process.poll() is not None:
            return -1.0
        found = cycles_of(tool, r.logs[-1].read_text(errors="replace"), year)
        return found[-1][0] if found else 0.0

    return max(group, key=last)


# --- the checks that need the live cluster -----------------------------------------------------------------

UID_KINDS = ("pods", "replicasets", "deployments", "statefulsets", "replicationcontrollers")
"""Resources whose parsed type keeps the UID (``descheduler.kube.cache.identity_of``)."""


def list_digest(api: KubeApi, name: str, selectors: Mapping[str, str]) -> tuple[int, str]:
    """Count and digest of a fresh LIST, computed from the server's JSON as the cache computes its own."""
    from descheduler.kube.cache import RESOURCES, digest_rows

    (spec,) = [s for s in RESOURCES if s.name == name]
    query = "&".join(f"{k}={urllib.parse.quote(v)}" for k, v in selectors.items())
    items = api.get(spec.path + (f"?{query}" if query else ""))["items"]
    rows = []
    for obj in items:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if spec.namespaced else meta["name"]
        row = [key, meta.get("uid", "") if name in UID_KINDS else ""]
        if name == "pods":
            status = obj.get("status") or {}
            row += [
                (obj.get("spec") or {}).get("nodeName") or "",
                status.get("phase") or "Running",
                "terminating" if meta.get("deletionTimestamp") else "",
            ]
        rows.append(tuple(row))
    return len(rows), digest_rows(rows)


def cache_check(api: KubeApi, replica: Replica, tries: int = 20) -> dict[str, Any]:
    """The replica's cache (``/debug/cache``, published at the start of each cycle) against fresh LISTs:
    equal once a LIST before and one after the dump agree (nothing changed meanwhile) and a cycle has
    started since. Retried for ~tries seconds while the cluster moves."""
    assert replica.healthz is not None
    last: dict[str, Any] = {}
    for _ in range(tries):
        try:
            before = _lists(api, _dump(replica))
            dump = _dump(replica)
            after = _lists(api, dump)
        except (OSError, ValueError, KeyError) as exc:
            last = {"error": str(exc)}
            time.sleep(1.0)
            continue
        mine = {k: (v["count"], v["digest"]) for k, v in dump.items() if k in before}
        if before == after:
            last = {
                "equal": mine == before,
                "counts": {k: v[0] for k, v in before.items()},
                "differ": sorted(k for k in before if mine.get(k) != before[k]),
                "interner": dump.get("interner", {}).get("count"),
            }
            if last["equal"]:
                return last
        time.sleep(1.0)
    return last or {"equal": False}


def _dump(replica: Replica) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.healthz}/debug/cache", timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def _lists(api: KubeApi, dump: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    return {
        name: list_digest(
            api, name, {k: v for k, v in entry.items() if k in ("labelSelector", "fieldSelector")}
        )
        for name, entry in dump.items()
        if name != "interner"
    }


def proc_sample(pid: int) -> dict[str, float]:
    """RSS (MiB), CPU seconds, threads and open file descriptors of a live process, from /proc."""
    rss, cpu = proc_figures(pid)
    status = Path(f"/proc/{pid}/status").read_text()
    rss_now = next(int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    threads = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:"))
    return {
        "rss_mib": rss_now,
        "peak_rss_mib": rss,
        "cpu_s": cpu,
        "threads": threads,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


# --- the driver --------------------------------------------------------------------------------------------


@dataclass
class Record:
    """What happened to each event: when it ran and how long a fault's component took to come back."""

    done: list[dict[str, Any]] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


class Driver:
    def __init__(
        self,
        plane: ControlPlane,
        api: KubeApi,
        backend: UsageBackend,
        usage: SoakUsage,
        group: list[Replica],
        tool: str,
        plan: m.Plan,
    ) -> None:
        self.plane, self.api, self.backend, self.usage = plane, api, backend, usage
        self.group, self.tool, self.plan = group, tool, plan
        self.record = Record()
        self.drains: list[threading.Thread] = []
        self.year = time.localtime().tm_year

    def run(self, events: Sequence[m.Event], t0: float, stop: threading.Event) -> None:
        for event in events:
            wait = t0 + event.t - time.time()
            if wait > 0 and stop.wait(wait):
                return
            started = time.time() - t0
            try:
                note = self.apply(event)
            except Exception as exc:  # a churn step failing (API down) is noted, not fatal
                note = f"failed: {exc}"[:300]
            self.record.done.append({**asdict(event), "at": round(started, 2), "note": note})
            print(f"[{started:7.1f}s] {event.kind} {event.target} {note}", flush=True)
        for thread in self.drains:
            thread.join(timeout=120)

    def apply(self, e: m.Event) -> str:
        k = self.plane.kubectl
        if e.kind == "burst":
            return "on"  # the usage model reads the schedule
        if e.kind == "step":
            return f"{self.usage.start_step(e)} pods busy"
        if e.kind == "scale":
            ns, app = e.target.split("/")
            kind = "statefulset" if app.startswith("sts-") else "deployment"
            k("scale", kind, app, "-n", ns, f"--replicas={int(e.value)}")
            return ""
        if e.kind == "rollout":
            ns, app = e.target.split("/")
            k("rollout", "restart", "statefulset" if app.startswith("sts-") else "deployment", app, "-n", ns)
            return ""
        if e.kind == "pdb-edit":
            ns, app = e.target.split("/")
            k(
                "patch",
                "pdb",
                app,
                "-n",
                ns,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"maxUnavailable": int(e.value)}}),
            )
            return ""
        if e.kind == "namespace-create":
            namespace(self.plane, e.target)
            self.plane.apply(workload_docs(f"tmp-{e.target.rsplit('-', 1)[1]}", 3), namespace=e.target)
            return ""
        if e.kind == "namespace-delete":
            k("delete", "namespace", e.target, "--wait=false")
            return ""
        if e.kind == "node-add":
            self.plane.apply([soak_node(e.target)])
            return ""
        if e.kind in ("node-cordon", "node-uncordon"):
            k(e.kind.removeprefix("node-"), e.target, check=False)
            return ""
        if e.kind == "node-drain":
            thread = threading.Thread(target=self._drain, args=(e.target,), daemon=True)
            thread.start()
            self.drains.append(thread)
            return "draining"
        if e.kind == "checkpoint":
            return self.checkpoint(e)
        return self.fault(e)

    def _drain(self, node: str) -> None:
        self.plane.kubectl(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s", check=False
        )
        self.plane.kubectl("delete", "node", node, "--wait=false", check=False)

    def checkpoint(self, e: m.Event) -> str:
        if self.tool not in (OURS, OURS_TAINT):
            return "no cache route"
        results = {}
        for replica in self.group:
            if replica.process is not None and replica.process.poll() is None:
                results[replica.name] = cache_check(self.api, replica)
        self.record.checkpoints.append({"t": e.t, **results})
        return json.dumps({k: v.get("equal") for k, v in results.items()})

    def fault(self, e: m.Event) -> str:
        t0 = self.usage.t0
        start = time.time() - t0
        if e.kind == "restart-prometheus":
            assert self.backend.prometheus is not None
            self.backend.prometheus.restart()
        elif e.kind == "kill-leader":
            victim = leader(self.tool, self.group, self.year)
            victim.kill()
            victim.start()
        else:
            name = {"kill-apiserver": "kube-apiserver", "kill-etcd": "etcd", "restart-kwok": "kwok"}[e.kind]
            self.plane.kill(name)
            time.sleep(e.duration_s)
            self.plane.restart(name)
            if name == "etcd":  # the API server is back only once it reaches etcd again
                from tests.controlplane.cluster import wait_healthy

                wait_healthy(
                    self.plane.component("kube-apiserver"), self.plane.component("kube-apiserver").tls, 120
                )
        back = time.time() - t0
        self.record.faults.append({"kind": e.kind, "t": round(start, 2), "back": round(back, 2)})
        return f"back after {back - start:.1f}s"


# --- the run -----------------------------------------------------------------------------------------------


@dataclass
class Sampler:
    """The soak's outside view, sampled in a thread: true usage every second, PDBs every half second,
    the replicas' processes every five."""

    api: KubeApi
    usage: SoakUsage
    group: list[Replica]
    timeline: m.Timeline = field(default_factory=m.Timeline)
    pdb_samples: int = 0
    pdb_low: list[tuple[float, str]] = field(default_factory=list)
    procs: list[dict[str, Any]] = field(default_factory=list)

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        stop = threading.Event()

        def usage() -> None:
            while not stop.wait(m.SAMPLE_S):
                self.timeline.add(round(self.usage.now(), 2), self.usage.sample())

        def budgets() -> None:
            while not stop.wait(0.5):
                with contextlib.suppress(Exception):
                    items = self.api.get("/apis/policy/v1/poddisruptionbudgets")["items"]
                    self.pdb_samples += 1
                    t = self.usage.now()
                    for pdb in items:
                        meta, status = pdb["metadata"], pdb.get("status") or {}
                        if not meta["namespace"].startswith(NAMESPACE_PREFIX):
                            continue
                        if int(status.get("currentHealthy", 0)) < int(status.get("desiredHealthy", 0)):
                            self.pdb_low.append((t, f"{meta['namespace']}/{meta['name']}"))

        def procs() -> None:
            while not stop.wait(5.0):
                for r in self.group:
                    if r.process is not None and r.process.poll() is None:
                        with contextlib.suppress(OSError, StopIteration):
                            sample = {
                                "t": round(self.usage.now(), 1),
                                "replica": r.name,
                                "pid": r.process.pid,
                                **proc_sample(r.process.pid),
                            }
                            if r.healthz is not None:
                                with contextlib.suppress(OSError, ValueError):
                                    sample["interner"] = _dump(r).get("interner", {}).get("count")
                            self.procs.append(sample)

        threads = [threading.Thread(target=f, daemon=True) for f in (usage, budgets, procs)]
        for t in threads:
            t.start()
        try:
            yield self
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)


def run(
    tool: str,
    plan: m.Plan,
    events: list[m.Event],
    workdir: Path,
    koord_source: Path | None = None,
    ours_package: Path | None = None,
) -> dict[str, Any]:
    """Start the control plane, build the cluster, run ``tool`` through ``events``; every figure."""
    from descheduler.kube.connection import connect
    from tests.controlplane import build
    from tests.controlplane.cluster import ControlPlane
    from tests.support.service import UsageBackend

    comps = build.CONTROL_PLANE + ((build.PEER_DESCHEDULER,) if tool == PEER else ())
    binaries = build.ensure_all(comps)
    binary = binaries.get("descheduler")
    if tool == KOORD:
        from benchmarks import koordinator

        binary = koordinator.build(koord_source).binary
    policy = audit_policy([f"system:serviceaccount:{BENCH_NAMESPACE}:{ACCOUNTS[tool]}"])
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs", flush=True)
    plane = ControlPlane.start(workdir / "controlplane", binaries, audit_policy=policy)
    backend = UsageBackend()
    api = connect(str(plane.kubeconfig), qps=1000, burst=1000)
    group: list[Replica] = []
    try:
        backend.start(workdir / "prometheus")
        kubeconfigs = setup_accounts(plane, workdir)
        if tool == KOORD:
            from benchmarks import koordinator

            for crd in koordinator.crd_paths(koord_source):
                plane.kubectl("apply", "--server-side", "-f", str(crd))
        built = time.monotonic()
        pods = build_cluster(plane, plan)
        print(f"{plan.nodes} nodes, {pods} pods Running in {time.monotonic() - built:.0f}s", flush=True)
        t0 = time.time()
        """Time 0 of the schedule: the exporter starts now, the replicas within the warm-up."""
        usage = SoakUsage(api, plan, events, t0)
        with usage.following():
            backend.install(usage.model, full_window=True, timeout=120)
            group = replicas(
                tool,
                workdir,
                kubeconfigs[tool],
                plane,
                backend,
                plan,
                tool == OURS_TAINT,
                binary,
                ours_package,
            )
            feeder: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if tool == KOORD:
                from benchmarks.koordinator_agreement import feeding

                feeder = feeding(api, usage.model)
            sampler = Sampler(api, usage, group)
            driver = Driver(plane, api, backend, usage, group, tool, plan)
            stop = threading.Event()
            with feeder, sampler.running():
                for r in group:
                    r.start()
                thread = threading.Thread(target=driver.run, args=(events, t0, stop), daemon=True)
                thread.start()
                deadline = t0 + plan.duration_s
                while time.time() < deadline and thread.is_alive():
                    time.sleep(1.0)
                    for r in group:
                        if (
                            r.process is not None
                            and r.process.poll() is not None
                            and r.process.returncode != -9
                        ):
                            print(f"{r.name} exited with {r.process.returncode}; started again", flush=True)
                            r.start()
                stop.set()
                thread.join(timeout=180)
                final = [
                    proc_sample(r.process.pid)
                    for r in group
                    if r.process is not None and r.process.poll() is None
                ]
            for r in group:
                r.terminate()
            stop_t = time.time()
        time.sleep(1.0)
        assert plane.audit_log is not None
        audit = parse_audit(plane.audit_log.read_text(errors="replace").splitlines())
        return analyse(tool, plan, events, usage, sampler, driver.record, group, audit, t0, stop_t, final)
    finally:
        for r in group:
            r.kill()
        api.close()
        backend.close()
        plane.stop()


def analyse(
    tool: str,
    plan: m.Plan,
    events: list[m.Event],
    usage: SoakUsage,
    sampler: Sampler,
    record: Record,
    group: list[Replica],
    audit: list[Any],
    t0: float,
    stop_t: float,
    final: list[dict[str, float]],
) -> dict[str, Any]:
    """Every figure and check of the run, as one JSON-able dict."""
    user = f"system:serviceaccount:{BENCH_NAMESPACE}:{ACCOUNTS[tool]}"
    mine = [e for e in audit if e.user == user and t0 <= e.received <= stop_t]
    done = [e for e in mine if is_eviction(e) and e.code == 201 and not e.dry_run]
    evictions = []
    for e in done:
        node, workload = usage.node_at(e.name, e.received - t0)
        evictions.append(m.Eviction(round(e.received - t0, 2), e.name, node, workload))
    year = time.localtime(t0).tm_year
    cycles = sorted(c for r in group for c in cycles_of(tool, r.text(), year))
    cycles_rel = [(t - t0, ok) for t, ok in cycles]
    healthy = [t for t, ok in cycles_rel if ok]
    recoveries = []
    for fault in record.faults:
        allow = RECOVERY_CYCLES * plan.interval_s + (LEASE_S[0] if fault["kind"] == "kill-leader" else 0.0)
        took = m.recovered(fault["back"], healthy, allow)
        recoveries.append({**fault, "recovered_s": took, "within_s": allow})
    # Replacements: a pod of an evicted pod's workload created within 30 s after the eviction.
    pending = 0.0
    claimed: set[str] = set()
    lives = sorted(usage.lives.values(), key=lambda life: life.created)
    for ev in evictions:
        for life in lives:
            if (
                life.workload == ev.workload
                and ev.t - 1 <= life.created <= ev.t + 30
                and life.uid not in claimed
            ):
                claimed.add(life.uid)
                pending += (life.running if life.running is not None else stop_t - t0) - life.created
                break
    pdb_mine = m.pdb_breaches(
        sampler.pdb_low,
        evictions,
        [(f["kind"], f["t"], f["back"]) for f in record.faults],
        [*churned(record.done), *drained(record.done, lives)],
    )
    window = WINDOW_CYCLES * plan.interval_s
    ours = tool in (OURS, OURS_TAINT)
    violations = {
        "window": [asdict(e) for e in m.window_breaches(evictions, window, 1)] if ours else [],
        "per_node": [asdict(e) for e in m.node_breaches(evictions, plan.interval_s, PER_NODE)],
        "pdb": pdb_mine,
        "unconfirmed": [
            asdict(e) for e in m.unconfirmed(sampler.timeline, evictions, plan.interval_s, plan.consecutive)
        ]
        if ours
        else [],
        "burst": [
            asdict(e)
            for e in m.burst_caused(
                sampler.timeline,
                evictions,
                [e for e in events if e.kind == "burst"],
                plan.interval_s,
                plan.consecutive,
            )
        ]
        if ours
        else [],
        "cache": [
            c
            for c in record.checkpoints
            if any(isinstance(v, dict) and not v.get("equal") for v in c.values())
        ],
        "not_recovered": [r for r in recoveries if r["recovered_s"] is None],
        "unknown_node": [asdict(e) for e in evictions if not e.node],
    }
    warm = plan.warmup_s + 0.2 * plan.duration_s
    resources = m.resource_trends(sampler.procs, [t for t, _ in cycles_rel], warm)
    resources["final"] = final
    measures = m.measures(sampler.timeline, evictions, events, pending, plan.interval_s, plan.consecutive)
    return {
        "descheduler": tool,
        "plan": asdict(plan),
        "schedule_digest": m.schedule_digest(events),
        "schedule": [asdict(e) for e in events],
        "done": record.done,
        "cycles": len(cycles_rel),
        "healthy_cycles": len(healthy),
        "faults_injected": len(record.faults),
        "faults_recovered": sum(r["recovered_s"] is not None for r in recoveries),
        "recoveries": recoveries,
        "checkpoints": record.checkpoints,
        "pdb_samples": sampler.pdb_samples,
        "pdb_low_samples": len(sampler.pdb_low),
        "measures": measures,
        "violations": violations,
        "violation_count": sum(len(v) for v in violations.values()),
        "resources": resources,
        "evictions": [asdict(e) for e in evictions],
        "requests": len(mine),
        "timeline": {"times": sampler.timeline.times[:: max(1, len(sampler.timeline.times) // 2000)]},
        "_timeline": sampler.timeline,
    }


def render_png(svg: str, path: Path) -> None:
    """The SVG to PNG with headless Chromium (installed for the HTML report's tests)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    svg_path = path.with_suffix(".svg")
    svg_path.write_text(svg)
    if binary is None:
        print(f"no chromium: wrote {svg_path} only", flush=True)
        return
    subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={path}",
            "--window-size=1200,560",
            svg_path.as_uri(),
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )


def summary(result: Mapping[str, Any]) -> str:
    ms, rs = result["measures"], result["resources"]
    fmt = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
    lines = [
        f"descheduler {result['descheduler']}, schedule {result['schedule_digest']}: "
        f"{result['cycles']} cycles "
        f"({result['healthy_cycles']} healthy), faults injected {result['faults_injected']} recovered "
        f"{result['faults_recovered']}, evictions {ms['evictions']}",
        f"hot-node-seconds {ms['hot_node_seconds']:.0f}; steps {ms['steps']} (hot {ms['steps_hot']}, cured "
        f"{ms['steps_cured']}); cure p50/p95 {fmt(ms['cure_s_p50'])}/{fmt(ms['cure_s_p95'])} s; "
        "evictions per "
        f"cured hotspot {fmt(ms['evictions_per_cured_hotspot'])}; ping-pong {ms['ping_pong_share']:.2f}; "
        f"replacement pending {ms['replacement_pending_s']:.0f} s; burst evictions {ms['burst_evictions']}; "
        f"unconfirmed evictions {ms['unconfirmed_evictions']}; "
        f"usage CV mean {fmt(ms['cv_mean'], '.3f')}, max-min mean {fmt(ms['range_mean'])}",
        f"RSS {fmt(rs.get('rss_start_mib'))} -> {fmt(rs.get('rss_end_mib'))} MiB (slope "
        f"{fmt(rs.get('rss_mib_slope_per_hour'))}/h), CPU per cycle slope "
        f"{fmt(rs.get('cpu_per_cycle_slope_per_hour'), '.4f')} s/h, threads {rs.get('threads_first_last')}, "
        f"fds {rs.get('fds_first_last')}, interner {rs.get('interner_first_last')}",
        "violations: "
        + (", ".join(f"{k} {len(v)}" for k, v in result["violations"].items()) or "none")
        + f" (total {result['violation_count']})",
    ]
    return "\n".join(lines)


def table(results: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown row per run: the measures, then the safety and resource figures. A run labelled with a
    ``system`` (runs of one descheduler from different packages, side by side) shows it and its seed."""
    head = [
        "descheduler", "nodes / s", "cycles (healthy)", "faults injected / recovered", "evictions",
        "hot-node-s", "steps cured / hot", "cure p50 / p95 s", "evictions per cure", "ping-pong",
        "pending s", "burst evictions", "unconfirmed", "usage CV", "max-min %", "RSS start -> end MiB",
        "violations",
    ]  # fmt: skip
    fmt = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ms, rs, plan = r["measures"], r["resources"], r["plan"]
        label = f"{r['system']}, seed {plan['seed']}" if "system" in r else r["descheduler"]
        cells = [
            label, f"{plan['nodes']} / {plan['duration_s']:.0f}",
            f"{r['cycles']} ({r['healthy_cycles']})",
            f"{r['faults_injected']} / {r['faults_recovered']}", str(ms["evictions"]),
            f"{ms['hot_node_seconds']:.0f}", f"{ms['steps_cured']} / {ms['steps_hot']}",
            f"{fmt(ms['cure_s_p50'], '.0f')} / {fmt(ms['cure_s_p95'], '.0f')}",
            fmt(ms["evictions_per_cured_hotspot"]), f"{ms['ping_pong_share']:.2f}",
            f"{ms['replacement_pending_s']:.0f}", str(ms["burst_evictions"]),
            str(ms.get("unconfirmed_evictions", "-")),
            fmt(ms["cv_mean"], ".3f"), fmt(ms["range_mean"], ".0f"),
            f"{fmt(rs.get('rss_start_mib'), '.0f')} -> {fmt(rs.get('rss_end_mib'), '.0f')}",
            str(r["violation_count"]),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_cures(measures: Mapping[str, Any]) -> list[float] | None:
    """A run's cure times. Runs from before ``cures_s`` was kept give them back only when at most two steps
    were cured: ``percentile`` then makes p50 the shorter and p95 the longer."""
    if "cures_s" in measures:
        return list(measures["cures_s"])
    if measures["steps_cured"] > 2:
        return None
    return sorted({measures["cure_s_p50"], measures["cure_s_p95"]} - {None})[: measures["steps_cured"]]


def run_needed(run: Mapping[str, Any]) -> list[int]:
    """Per step a run evicted from: ``evictions_needed`` at the node's first eviction in the step, for
    every pod the step made busy (the count its note gives)."""
    out = []
    for step in (e for e in run["done"] if e["kind"] == "step" and e["note"].endswith(" pods busy")):
        start, end = step["t"], step["t"] + step["duration_s"]
        first = [e["t"] for e in run["evictions"] if e["node"] == step["target"] and start <= e["t"] <= end]
        if first:
            busy = int(step["note"].split()[0])
            out.append(m.evictions_needed(busy, step["target"], min(first), run["plan"]["drift_period_s"]))
    return out


def pooled(results: Sequence[Mapping[str, Any]]) -> str:
    """One line per labelled ``system`` (two steps a run are too few for a p95)."""
    systems = dict.fromkeys(r["system"] for r in results if "system" in r)
    return "\n".join(system_line(s, [r for r in results if r.get("system") == s]) for s in systems)


def system_line(system: str, runs: Sequence[Mapping[str, Any]]) -> str:
    """The runs' cures pooled into one p50/p95, evictions per cure over every cure, safety counts summed."""
    cures = [run_cures(r["measures"]) for r in runs]
    known = [c for got in cures if got is not None for c in got]
    per_cure = [
        (r["measures"]["evictions_per_cured_hotspot"], r["measures"]["steps_cured"])
        for r in runs
        if r["measures"]["evictions_per_cured_hotspot"] is not None
    ]
    mean = sum(v * n for v, n in per_cure) / sum(n for _, n in per_cure) if per_cure else None
    needed = [k for r in runs for k in run_needed(r)]
    fmt = lambda v, spec=".0f": "-" if v is None else format(v, spec)  # noqa: E731
    total = lambda key: sum(r["measures"][key] for r in runs)  # noqa: E731
    return (
        f"{system}: {len(runs)} runs (seeds {', '.join(str(r['plan']['seed']) for r in runs)}), steps "
        f"cured {total('steps_cured')} / hot {total('steps_hot')}, cure p50 / p95 "
        f"{fmt(m.percentile(known, 0.5))} / {fmt(m.percentile(known, 0.95))} s over {len(known)} cures"
        f"{'' if None not in cures else ' (a run without its cure times left out)'}, evictions per cure "
        f"{fmt(mean, '.1f')} (needed {fmt(statistics.mean(needed) if needed else None, '.1f')}), burst "
        f"{total('burst_evictions')}, unconfirmed "
        f"{total('unconfirmed_evictions')}, violations {sum(r['violation_count'] for r in runs)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of the schedule")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--interval", type=float, default=3.0, help="descheduling interval, s")
    parser.add_argument("--consecutive", type=int, default=5, help="consecutiveAbnormalities")
    parser.add_argument("--descheduler", choices=(OURS, PEER, KOORD), default=OURS)
    parser.add_argument("--no-taint", action="store_true", help="ours without hotspotTaint")
    parser.add_argument("--koord-source", type=Path, default=None)
    parser.add_argument(
        "--ours-package",
        type=Path,
        default=None,
        help="folder whose descheduler package our replicas run (e.g. an older commit's); default the repo",
    )
    parser.add_argument("--fault-every", type=float, default=180.0, help="one fault this often, s")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule and run nothing")
    parser.add_argument(
        "--summarise",
        type=Path,
        nargs="+",
        default=None,
        help="print the table of these --json files (a run, or a list of runs) and run nothing",
    )
    args = parser.parse_args(argv)
    if args.summarise:
        loaded = [json.loads(path.read_text()) for path in args.summarise]
        runs = [run for item in loaded for run in (item if isinstance(item, list) else [item])]
        print(table(runs))
        if any("system" in r for r in runs):
            print("\n" + pooled(runs))
        return 0
    if args.descheduler == OURS and not args.no_taint:
        args.descheduler = OURS_TAINT
    if args.descheduler == KOORD and args.koord_source is None:
        parser.error("--descheduler koordinator needs --koord-source")
    plan = m.Plan(
        args.seed, args.duration, args.nodes, args.interval, args.consecutive, fault_every_s=args.fault_every
    )
    events = m.make_schedule(plan)
    if args.schedule_only:
        for e in events:
            print(json.dumps(asdict(e)))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.ours_package is not None and not (args.ours_package / "descheduler" / "__main__.py").is_file():
        parser.error(f"--ours-package {args.ours_package}: no descheduler/__main__.py in it")
    result = run(args.descheduler, plan, events, workdir, args.koord_source, args.ours_package)
    if args.ours_package is not None:
        result["ours_package"] = str(args.ours_package)
    timeline = result.pop("_timeline")
    print(summary(result), flush=True)
    if args.png is not None:
        title = f"{result['descheduler']}: {plan.nodes} nodes, {plan.duration_s:.0f} s, seed {plan.seed}"
        render_png(
            m.svg_plot(timeline, [m.Eviction(**e) for e in result["evictions"]], events, title), args.png
        )
    if args.json is not None:
        cvs, ranges = m.spread(timeline)
        step = max(1, len(cvs) // 2000)
        result["timeline"] = {"times": timeline.times[::step], "cv": cvs[::step], "range": ranges[::step]}
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    ours = result["descheduler"] in (OURS, OURS_TAINT)
    return 1 if ours and result["violation_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
