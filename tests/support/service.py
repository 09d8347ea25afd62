"""What the service tests on any API server share: a real Prometheus scraping simulated kubelets (the
usage backend), a configuration file, and ``descheduler run`` as a subprocess with bounded waits.

Usage is live, not canned: :class:`SimulatedNodes` serves node-exporter and cAdvisor series computed from
the pods the test placed (node busy cores = base + the pods running there), a real Prometheus scrapes it
every second, and the descheduler queries that Prometheus. So a test makes a hotspot *appear* by raising
one pod's load, and when the pod is evicted the load leaves the node, as it would when the kubelet stops
the container. Samples are always fresh (at most a second old). Benchmarks use it too, so it lives outside
``tests/integration``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from tests.support.ports import free_port
from tests.support.prometheus import require_binary, terminate
from tests.support.sampling import sampling

REPO = Path(__file__).resolve().parents[2]


MANIFESTS = REPO / "manifests"


GI = 2**30


MI = 2**20


SCRAPE_INTERVAL = 1.0


NAMESPACE = "load-aware-descheduler"
"""Where the manifests run the descheduler, and so where its Lease lives."""


LEASE = "load-aware-descheduler"
"""The Lease name the shipped Role grants (``manifests/base/role.yaml``)."""


@dataclass
class _Node:
    base_cores: float
    """Load outside the pods (system daemons)."""
    base_memory: float
    cpus: int
    mem_total: float
    busy_seconds: float = 9e4
    idle_seconds: float = 5e5


@dataclass
class _Pod:
    node: str
    cores: float
    rss: float
    cpu_seconds: float = 0.0


class PodStore(Protocol):
    """What the kubelets read of an API server: whether a pod still exists."""

    def get(self, resource: str, namespace: str, name: str) -> object: ...


class SimulatedNodes:
    """node-exporter and cAdvisor for every node, in one exposition, with counters that integrate the
    current load over wall-clock time (so ``rate()`` in Prometheus returns exactly the load set here)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._last = clock()

    # -- the model -----------------------------------------------------------------------------------
    def add_node(
        self, name: str, *, base_cores: float = 0.2, base_memory: float = 2 * GI, cpus: int = 4,
        mem_total: float = 16 * GI,
    ) -> None:  # fmt: skip
        with self._lock:
            self._advance()
            self._nodes[name] = _Node(base_cores, base_memory, cpus, mem_total)

    def add_pod(self, namespace: str, name: str, node: str, cores: float, rss: float = 256 * MI) -> None:
        with self._lock:
            self._advance()
            self._pods[(namespace, name)] = _Pod(node, cores, rss)

    def set_loads(self, base: Mapping[str, float], pods: Mapping[tuple[str, str], float]) -> None:
        """Set many nodes' own load and pods' CPU use at once (one integration step, not one per change)."""
        with self._lock:
            self._advance()
            for name, cores in base.items():
                if name in self._nodes:
                    self._nodes[name].base_cores = cores
            for key, cores in pods.items():
                if key in self._pods:
                    self._pods[key].cores = cores

    def busy_cores(self) -> dict[str, float]:
        """Every node's CPU use now (cores), in one pass."""
        with self._lock:
            on_node: dict[str, float] = {}
            for pod in self._pods.values():
                on_node[pod.node] = on_node.get(pod.node, 0.0) + pod.cores
            return {
                n: min(node.cpus, node.base_cores + on_node.get(n, 0.0)) for n, node in self._nodes.items()
            }

    def set_pod_cores(self, namespace: str, name: str, cores: float) -> None:
        """Change one pod's CPU use from now on: how a test makes a hotspot appear."""
        with self._lock:
            self._advance()
            self._pods[(namespace, name)].cores = cores

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._advance()
            self._pods.pop((namespace, name), None)

    def pods(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._pods)

    def cpu_percent(self, name: str) -> float:
        """The node's CPU use now, in percent of its cores."""
        with self._lock:
            return 100.0 * self._busy(name) / self._nodes[name].cpus

    def _busy(self, name: str) -> float:
        node = self._nodes[name]
        return min(node.cpus, node.base_cores + sum(p.cores for p in self._pods.values() if p.node == name))

    def _advance(self) -> None:
        """Add the load since the last change to every counter (called under the lock)."""
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        on_node: dict[str, float] = {}
        for pod in self._pods.values():
            on_node[pod.node] = on_node.get(pod.node, 0.0) + pod.cores
        for name, node in self._nodes.items():
            busy = min(node.cpus, node.base_cores + on_node.get(name, 0.0))
            node.busy_seconds += busy * elapsed
            node.idle_seconds += (node.cpus - busy) * elapsed
        for pod in self._pods.values():
            pod.cpu_seconds += pod.cores * elapsed

    # -- the exposition --------------------------------------------------------------------------------
    def exposition(self) -> str:
        """Prometheus text format, labelled as node-exporter (``instance`` host:9100) and cAdvisor do."""
        with self._lock:
            self._advance()
            lines = ["# TYPE node_cpu_seconds_total counter"]
            for name, node in sorted(self._nodes.items()):
                instance = f'instance="{name}:9100",job="node-exporter"'
                for cpu in range(node.cpus):
                    for mode, total in (("user", node.busy_seconds), ("idle", node.idle_seconds)):
                        labels = f'{instance},cpu="{cpu}",mode="{mode}"'
                        lines.append(f"node_cpu_seconds_total{{{labels}}} {total / node.cpus!r}")
            lines.append("# TYPE node_memory_MemTotal_bytes gauge")
            lines += [
                f'node_memory_MemTotal_bytes{{instance="{n}:9100",job="node-exporter"}} {node.mem_total!r}'
                for n, node in sorted(self._nodes.items())
            ]
            lines.append("# TYPE node_memory_MemAvailable_bytes gauge")
            for name, node in sorted(self._nodes.items()):
                used = node.base_memory + sum(p.rss for p in self._pods.values() if p.node == name)
                lines.append(
                    f'node_memory_MemAvailable_bytes{{instance="{name}:9100",job="node-exporter"}} '
                    f"{max(0.0, node.mem_total - used)!r}"
                )
            cpu_lines = ["# TYPE container_cpu_usage_seconds_total counter"]
            rss_lines = ["# TYPE container_memory_rss gauge"]
            for (namespace, pod_name), pod in sorted(self._pods.items()):
                base = (
                    f'namespace="{namespace}",pod="{pod_name}",node="{pod.node}",'
                    f'instance="{pod.node}:10250",job="kubelet"'
                )
                # The container, and the pod-level aggregate (container="") the queries must leave out.
                for container in ("app", ""):
                    labels = f'{base},container="{container}"'
                    cpu_lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {pod.cpu_seconds!r}")
                    rss_lines.append(f"container_memory_rss{{{labels}}} {pod.rss!r}")
            return "\n".join(lines + cpu_lines + rss_lines) + "\n"

    def following(self, server: PodStore, interval: float = 0.1) -> contextlib.AbstractContextManager[None]:
        """Play the kubelet: a pod deleted from the API server (evicted) stops using its node."""

        def check() -> None:
            for namespace, name in self.pods():
                if server.get("pods", namespace, name) is None:
                    self.remove_pod(namespace, name)

        return sampling(check, "kubelets", interval)

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def usage(self) -> dict[str, tuple[float, float, list[tuple[str, str, float, float]]]]:
        """Per node: its own (system) cores and memory, and each pod on it as (namespace, name, cores,
        rss): the numbers the exposition is made of, for a peer that reads usage another way."""
        with self._lock:
            out = {name: (node.base_cores, node.base_memory, []) for name, node in self._nodes.items()}
            for (namespace, name), pod in sorted(self._pods.items()):
                if pod.node in out:
                    out[pod.node][2].append((namespace, name, pod.cores, pod.rss))
            return out


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)
    """Its command line: ``restart`` runs it again on the same port and TSDB."""

    def restart(self, timeout: float = 60.0) -> float:
        """Stop (SIGTERM, as a redeploy does) and start again; seconds until it answers ready."""
        started = time.monotonic()
        self.stop()
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(self.argv, stdout=sink, stderr=subprocess.STDOUT)
        if not _wait(
            functools.partial(_answers, self), timeout=timeout, stop=functools.partial(_exited, self.process)
        ):
            raise RuntimeError(f"prometheus did not come back:\n{self.log.read_text()[-3000:]}")
        return time.monotonic() - started

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        terminate(self.process)


class UsageBackend:
    """One exporter and one real Prometheus scraping it every second, shared by the session's tests.

    Prometheus takes about 5 s to scrape a new target for the first time (its discovery updates are
    throttled), so it is started once; each test installs its own :class:`SimulatedNodes` (with node
    and pod names of its own, so no counter of one test continues another's).
    """

    def __init__(self) -> None:
        self.model = SimulatedNodes()
        self._stack = contextlib.ExitStack()
        self.prometheus: Prometheus | None = None

    @property
    def url(self) -> str:
        assert self.prometheus is not None, "backend not started"
        return self.prometheus.url

    def start(self, workdir: Path) -> UsageBackend:
        target = self._stack.enter_context(self._serving())
        self.prometheus = self._stack.enter_context(_scraping_prometheus(target, workdir))
        return self

    def close(self) -> None:
        self._stack.close()

    def install(self, model: SimulatedNodes, *, full_window: bool = False, timeout: float = 20.0) -> None:
        """Serve ``model`` from now on; return once Prometheus has ``rate()`` for all its nodes and pods.

        A new series' ``rate()`` under-reports until the series covers the whole 5 s window (Prometheus
        extrapolates only half an interval before a series' first sample). ``full_window`` waits for
        that too, for tests that need exact usage from the first cycle on.
        """
        self.model = model
        nodes = "|".join(model.node_names())
        pods = "|".join(name for _, name in model.pods())
        node_series = f'node_cpu_seconds_total{{mode="user",cpu="0",instance=~"({nodes}):9100"}}'
        pod_series = f'container_cpu_usage_seconds_total{{container="app",pod=~"{pods}"}}'
        if full_window:  # six samples within 6 s: the oldest is at least 5 s old
            queries = [f"count(count_over_time({q}[6s]) >= 6)" for q in (node_series, pod_series)]
        else:
            queries = [f"count(rate({q}[5s]))" for q in (node_series, pod_series)]
        want = [len(model.node_names()), len(model.pods())]
        ok = _wait(lambda: [self._count(q) for q in queries] == want, timeout=timeout)
        if not ok:
            pytest.fail(f"prometheus did not scrape {want} nodes/pods within {timeout}s")

    def _count(self, promql: str) -> int:
        assert self.prometheus is not None
        try:
            result = self.prometheus.query(promql)
        except OSError:
            return -1
        return int(float(result[0]["value"][1])) if result else 0

    def _serving(self) -> contextlib.AbstractContextManager[str]:
        """Serve the current model's ``/metrics`` on 127.0.0.1:<free port>; yields ``host:port``."""
        return serve_exposition(lambda: self.model)


@contextlib.contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1:<free port> in a daemon thread; yields ``host:port``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def serve_exposition(
    model: Callable[[], SimulatedNodes], down: threading.Event | None = None
) -> Iterator[str]:
    """Serve ``model()``'s ``/metrics`` on 127.0.0.1:<free port>, answering 503 while ``down`` is set (a
    target down, as Prometheus sees it); yields ``host:port``."""

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if down is not None and down.is_set():
                self.send_error(503)
                return
            body = model().exposition().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serve_http(Exporter) as target:
        yield target


@contextlib.contextmanager
def _scraping_prometheus(target: str, workdir: Path, *, scrapes: int = 2) -> Iterator[Prometheus]:
    """A real Prometheus on 127.0.0.1 scraping ``target`` every second (``honor_labels`` keeps the
    exporters' own ``instance`` labels); yields once it has scraped the target ``scrapes`` times (0: once
    it answers, for a caller with other work to do meanwhile: it applies its targets on a 5 s tick)."""
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {
                    "scrape_interval": f"{SCRAPE_INTERVAL:g}s",
                    "scrape_timeout": f"{SCRAPE_INTERVAL:g}s",
                    "evaluation_interval": "1m",
                },
                "scrape_configs": [
                    {"job_name": "simulated", "honor_labels": True, "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    log = workdir / "prometheus.log"
    prometheus: Prometheus | None = None
    for _ in range(3):  # the free port may be taken between choosing it and binding it
        port = free_port()
        argv = [str(binary), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        candidate = Prometheus(f"http://127.0.0.1:{port}", process, log, argv)
        if _wait(
            functools.partial(_answers, candidate), timeout=30, stop=functools.partial(_exited, process)
        ):
            prometheus = candidate
            break
        candidate.stop()
    if prometheus is None:
        pytest.fail(f"prometheus did not become ready:\n{log.read_text()[-3000:]}")
    try:
        if not _wait(lambda: _scrapes(prometheus) >= scrapes, timeout=30):
            pytest.fail(f"prometheus did not scrape the exporter within 30s:\n{log.read_text()[-3000:]}")
        yield prometheus
    finally:
        prometheus.stop()


def _exited(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is not None


def _answers(prometheus: Prometheus) -> bool:
    try:
        with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _scrapes(prometheus: Prometheus) -> int:
    try:
        result = prometheus.query('count_over_time(up{job="simulated"}[1m])')
    except OSError:
        return 0
    return int(float(result[0]["value"][1])) if result else 0


def _wait(
    check: Callable[[], bool],
    *,
    timeout: float,
    stop: Callable[[], bool] = lambda: False,
    interval: float = 0.1,
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        if stop():
            return False
        time.sleep(interval)
    return check()


@dataclass(frozen=True)
class Ports:
    healthz: int
    metrics: int

    @classmethod
    def free(cls) -> Ports:
        healthz = free_port()
        metrics = free_port()
        while metrics == healthz:
            metrics = free_port()
        return cls(healthz, metrics)


def service_config(
    *,
    prometheus_url: str,
    ports: Ports,
    dry_run: bool = False,
    lease_name: str = LEASE,
    lease_namespace: str = NAMESPACE,
    node_selector: Any = None,
    consecutive_abnormalities: int = 2,
    interval: str = "1s",
) -> dict[str, Any]:
    """A complete configuration for a fast service: 1 s cycles, 2 s leases, thresholds cpu 40/70 and
    memory 60/85 percent, a hotspot after two cycles over, usage from Prometheus (5 s window)."""
    doc: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "dryRun": dry_run,
        "deschedulingInterval": interval,
        "leaderElection": {
            "leaderElect": True,
            "leaseDuration": "2s",
            "renewDeadline": "1500ms",
            "retryPeriod": "500ms",
            "resourceName": lease_name,
            "resourceNamespace": lease_namespace,
        },
        "healthzBindAddress": f"127.0.0.1:{ports.healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.metrics}",
        "metricsProviders": [
            {
                "source": "Prometheus",
                "prometheus": {
                    "url": prometheus_url,
                    "window": "5s",
                    "timeout": "2s",
                    "nodeLabel": "instance",
                    "nodeRelabel": {"regex": "(.*):[0-9]+", "replacement": "$1"},
                },
            }
        ],
        "profiles": [
            {
                "name": "load-aware",
                "plugins": {
                    "balance": {"enabled": [{"name": "LowNodeLoad"}]},
                    "evict": {"enabled": [{"name": "MigrationController"}]},
                    "filter": {"enabled": [{"name": "MigrationController"}]},
                },
                "pluginConfig": [
                    {
                        "name": "LowNodeLoad",
                        "args": {
                            "apiVersion": "descheduler/v1alpha2",
                            "kind": "LowNodeLoadArgs",
                            "lowThresholds": {"cpu": 40, "memory": 60},
                            "highThresholds": {"cpu": 70, "memory": 85},
                            "anomalyCondition": {"consecutiveAbnormalities": consecutive_abnormalities},
                            "evictableNamespaces": {"exclude": ["kube-system", NAMESPACE]},
                            "nodeMetricExpirationSeconds": 30,
                        },
                    },
                    {
                        "name": "MigrationController",
                        "args": {
                            "apiVersion": "descheduler/v1alpha2",
                            "kind": "MigrationControllerArgs",
                            "evictQPS": "5",
                            "evictBurst": 1,
                            # a short window: a new leader waits it out before its first eviction
                            "objectLimiters": {"workload": {"duration": "2s"}},
                        },
                    },
                ],
            }
        ],
    }
    if node_selector is not None:
        doc["nodeSelector"] = node_selector
    return doc


def written_config(path: Path, prometheus_url: str, **options: Any) -> tuple[Path, Ports]:
    """``service_config`` (with ``options``) on free ports, written to ``path``: the file to run and the
    ports it serves on, what most service tests start from."""
    ports = Ports.free()
    return write_config(path, service_config(prometheus_url=prometheus_url, ports=ports, **options)), ports


def one_eviction_per_workload(doc: dict[str, Any], window: float) -> dict[str, Any]:
    """Limit ``doc`` to one eviction per node per cycle and one per workload per ``window`` seconds, with
    no other workload limit: the restart tests count evictions against exactly that."""
    doc["maxNoOfPodsToEvictPerNode"] = 1
    mc = doc["profiles"][0]["pluginConfig"][1]["args"]
    mc["objectLimiters"] = {"workload": {"duration": f"{window:g}s", "maxMigrating": 1}}
    mc["maxMigratingPerWorkload"] = 0
    mc["maxUnavailablePerWorkload"] = 0
    return doc


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two places twice: the descheduler refuses YAML aliases (issue 25)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_config(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(yaml.dump(dict(doc), Dumper=_PlainDumper, sort_keys=False))
    return path


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """Status and body of a GET; HTTP errors are answers too. Connection failures return status 0."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError as error:
        return 0, str(error)


def descheduler_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "descheduler", *arguments]


def subprocess_env() -> dict[str, str]:
    """The test's environment minus anything that could point the process at another cluster."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_command(*arguments: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``descheduler ARGUMENTS`` run to its end from the repository, its output captured as text; the
    exit code is the caller's to check (most tests assert on a failing one)."""
    return subprocess.run(
        descheduler_command(*arguments), cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


@dataclass
class Descheduler:
    """One ``descheduler run`` subprocess; its stderr (the log) and stdout go to files in ``workdir``."""

    process: subprocess.Popen[bytes]
    stderr_path: Path
    stdout_path: Path
    ports: Ports
    name: str
    exit_code: int | None = None
    exit_seconds: float | None = None
    """How long the process took to exit after SIGTERM."""
    _closed: list[Any] = field(default_factory=list)

    @property
    def identity(self) -> str:
        """The leader-election identity (and User-Agent comment) of this process."""
        return f"{socket.gethostname()}_{self.process.pid}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def log_lines(self) -> list[str]:
        return [line for line in self.stderr().splitlines() if line.strip()]

    def records(self) -> list[dict[str, Any]]:
        """Every log line that parses as a JSON object (the others are reported by ``non_json_lines``)."""
        out: list[dict[str, Any]] = []
        for line in self.log_lines():
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    out.append(value)
        return out

    def non_json_lines(self) -> list[str]:
        bad: list[str] = []
        for line in self.log_lines():
            try:
                value = json.loads(line)
            except ValueError:
                bad.append(line)
                continue
            if not isinstance(value, dict):
                bad.append(line)
        return bad

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == name]

    def wait_for(
        self,
        check: Callable[[], Any],
        *,
        timeout: float,
        what: str,
        interval: float = 0.05,
        naming: Sequence[str] = (),
    ) -> Any:
        """Poll ``check`` until truthy; fail with the log tail if the process dies or time runs out, and
        with every earlier log line containing one of ``naming`` (so CI's log alone tells what led there)."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.process.returncode} while waiting for {what}:\n"
                    f"{self._lines_naming(naming)}{self.stderr()[-4000:]}"
                )
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what} ({self.name}); "
                    f"{self._lines_naming(naming)}log tail:\n{self.stderr()[-4000:]}"
                )
            time.sleep(interval)

    def _lines_naming(self, words: Sequence[str], most: int = 40) -> str:
        if not words:
            return ""
        found = [line[:600] for line in self.log_lines() if any(w in line for w in words)]
        return "lines naming " + ", ".join(words) + ":\n" + "\n".join(found[-most:]) + "\n"

    def url(self, path: str) -> str:
        port = self.ports.metrics if path == "/metrics" else self.ports.healthz
        return f"http://127.0.0.1:{port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.url(path))

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.wait_for(lambda: self.get("/readyz")[0] == 200, timeout=timeout, what="/readyz to answer 200")

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM; wait (bounded) for the exit; returns the exit code (kills and fails on a hang)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait (bounded) for an exit already asked for; ``exit_seconds`` counts from this call."""
        started = time.monotonic()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s:\n{self.stderr()[-4000:]}"
            ) from None
        if self.exit_seconds is None:
            self.exit_seconds = time.monotonic() - started
        self.exit_code = self.process.returncode
        return self.exit_code

    def kill(self) -> None:
        """SIGKILL: a crash, no chance to release the lease."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def cleanup(self) -> None:
        self.kill()
        for handle in self._closed:
            handle.close()


@contextlib.contextmanager
def run_descheduler(
    config: Path,
    kubeconfig: Path,
    ports: Ports,
    workdir: Path,
    name: str = "descheduler",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[Descheduler]:
    """Start ``descheduler run`` (JSON logs); the process is killed at the end of the block if still alive.
    ``env`` adds to the environment (e.g. ``PYTHONTZPATH`` for a made-up time zone), ``args`` to the
    command line (``--debug-cache``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stderr_path = workdir / f"{name}.stderr"
    stdout_path = workdir / f"{name}.stdout"
    err = stderr_path.open("wb")
    out = stdout_path.open("wb")
    process = subprocess.Popen(
        descheduler_command(
            "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--log-format", "json", *args
        ),
        cwd=REPO,
        env={**subprocess_env(), **(env or {})},
        stdout=out,
        stderr=err,
        stdin=subprocess.DEVNULL,
    )
    proc = Descheduler(process, stderr_path, stdout_path, ports, name, _closed=[err, out])
    try:
        yield proc
    finally:
        proc.cleanup()


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Samples of one metric in Prometheus text format, parsed with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[tuple[dict[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out.append((dict(sample.labels), float(sample.value)))
    return out
