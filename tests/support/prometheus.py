"""Helpers that run the real thing: a Prometheus server on a TSDB the test writes, plus small HTTP stand-ins.

Series are generated in node-exporter and cAdvisor shapes, written as OpenMetrics text, turned into TSDB
blocks with ``promtool tsdb create-blocks-from openmetrics`` and served by ``prometheus`` on 127.0.0.1 with
a random free port. Everything that waits is bounded in count and time so a broken setup fails instead of
hanging. A missing binary fails the test (CI installs the Debian ``prometheus`` package); it never skips.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.ports import free_port

Point = tuple[float, float]
"""(timestamp in epoch seconds, value)."""

STEP = 15.0
"""Scrape interval of every generated series."""

TEST_USER = "descheduler"
TEST_PASSWORD = "s3cret-for-tests"
TEST_PASSWORD_BCRYPT = "$2b$04$qQwbW9fRwiIhIat8XVIK7uiJMHrLhG4o/68MImwoLCTCMH.dfpO.."
"""bcrypt (cost 4, so Prometheus checks it fast) of TEST_PASSWORD; made once with libxcrypt's crypt(3)."""


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    points: Sequence[Point]


def require_binary(name: str) -> str:
    """The path of a Prometheus tool, or a failed test that says how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name!r} is not on PATH: install the Debian package 'prometheus' (apt-get install prometheus)"
        )
    return path


def sample_times(start: float, end: float, step: float = STEP) -> list[float]:
    """Scrape times from ``start`` to ``end`` inclusive, ``step`` apart."""
    count = math.floor((end - start) / step + 1e-9) + 1
    return [start + i * step for i in range(count)]


def gauge(times: Sequence[float], value: float) -> list[Point]:
    return [(t, value) for t in times]


def counter(
    times: Sequence[float], rate: float, *, start_value: float = 0.0, reset_at: float | None = None
) -> list[Point]:
    """A counter growing at ``rate`` per second that restarts from zero right after ``reset_at``.

    The restart happens exactly at the scrape ``reset_at``, so the first sample after it holds one full
    step of growth: Prometheus' ``rate()`` then sees no lost increase and the true rate is exact.
    """
    points: list[Point] = []
    base_time, base_value = times[0], start_value
    for t in times:
        if reset_at is not None and t > reset_at and base_time <= reset_at:
            base_time, base_value = reset_at, 0.0
        points.append((t, base_value + rate * (t - base_time)))
    return points


Level = float | Callable[[float], float]
"""A gauge's value: constant, or a function of the scrape time."""

CPU_MODES = ("user", "system", "nice", "irq", "softirq", "iowait", "steal", "idle")


def _level(level: Level, t: float) -> float:
    return level(t) if callable(level) else level


def node_exporter(
    instance: str,
    times: Sequence[float],
    *,
    cpus: int,
    mode_rates: Mapping[str, float],
    mem_total: Level,
    mem_available: Level,
    mem_free: Level,
    cached: Level,
    buffers: Level = 0.0,
    reset_at: float | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> list[Series]:
    """node-exporter's CPU counters (per cpu and mode) and meminfo gauges for one node.

    ``mode_rates`` are seconds per second per cpu; missing modes run at 0. ``reset_at`` restarts every
    counter (node-exporter itself restarting does not, but a node reboot does).
    """
    labels = {"instance": instance, "job": "node-exporter", **(extra_labels or {})}
    series: list[Series] = []
    for cpu in range(cpus):
        for offset, mode in enumerate(CPU_MODES):
            rate = mode_rates.get(mode, 0.0)
            points = counter(times, rate, start_value=50_000.0 + 1_000 * offset, reset_at=reset_at)
            series.append(Series("node_cpu_seconds_total", {**labels, "cpu": str(cpu), "mode": mode}, points))
    for name, level in (
        ("node_memory_MemTotal_bytes", mem_total),
        ("node_memory_MemAvailable_bytes", mem_available),
        ("node_memory_MemFree_bytes", mem_free),
        ("node_memory_Cached_bytes", cached),
        ("node_memory_Buffers_bytes", buffers),
    ):
        series.append(Series(name, labels, [(t, _level(level, t)) for t in times]))
    return series


@dataclass(frozen=True)
class Container:
    cpu: float
    """Cores (rate of container_cpu_usage_seconds_total)."""
    rss: float
    cache: float = 0.0
    """Page cache charged to the container: in usage_bytes (and partly working set), never in rss."""
    reset_at: float | None = None


PAUSE = Container(cpu=0.002, rss=512 * 1024)


def cadvisor(
    namespace: str, pod: str, node: str, times: Sequence[float], containers: Mapping[str, Container]
) -> list[Series]:
    """cAdvisor series for one pod as the kubelet exposes them, including the pause container
    (``container="POD"``) and the pod-level aggregate (``container=""``) a correct query must leave out."""
    every = {**containers, "POD": PAUSE}
    base = {
        "namespace": namespace,
        "pod": pod,
        "node": node,
        "instance": f"{node}:10250",
        "job": "kubelet",
        "metrics_path": "/metrics/cadvisor",
    }
    series: list[Series] = []

    def add(container: str, usage: Container) -> None:
        labels = {**base, "container": container, "id": f"/kubepods/{namespace}/{pod}/{container}"}
        series.append(
            Series(
                "container_cpu_usage_seconds_total",
                labels,
                counter(times, usage.cpu, reset_at=usage.reset_at),
            )
        )
        series.append(Series("container_memory_rss", labels, gauge(times, usage.rss)))
        series.append(Series("container_memory_cache", labels, gauge(times, usage.cache)))
        series.append(Series("container_memory_usage_bytes", labels, gauge(times, usage.rss + usage.cache)))
        series.append(
            Series("container_memory_working_set_bytes", labels, gauge(times, usage.rss + usage.cache / 2))
        )

    for name, usage in every.items():
        add(name, usage)
    add("", Container(cpu=sum(c.cpu for c in every.values()), rss=sum(c.rss for c in every.values()),
                      cache=sum(c.cache for c in every.values())))  # fmt: skip
    return series


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    escaped = (
        f'{key}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for key, value in sorted(labels.items())
    )
    return "{" + ",".join(escaped) + "}"


def openmetrics(series: Sequence[Series]) -> str:
    """OpenMetrics text: each metric family contiguous, each series in time order, ``# EOF`` last."""
    by_family: dict[str, list[Series]] = {}
    for one in series:
        by_family.setdefault(one.name, []).append(one)
    lines: list[str] = []
    for name, members in by_family.items():
        lines.append(f"# TYPE {name} unknown")
        for one in members:
            label_text = _format_labels(one.labels)
            for t, value in sorted(one.points):
                lines.append(f"{name}{label_text} {_format_value(value)} {t:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def build_tsdb(series: Sequence[Series], directory: Path) -> Path:
    """Write the series as TSDB blocks under ``directory/data`` and return that path."""
    promtool = require_binary("promtool")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "series.om.txt"
    source.write_text(openmetrics(series))
    data = directory / "data"
    result = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"promtool could not build the TSDB:\n{result.stdout}\n{result.stderr}")
    return data


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        terminate(self.process)


def terminate(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM a server we started, SIGKILL it if it is still there after ``timeout``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def _wait_ready(
    process: subprocess.Popen[bytes], url: str, context: ssl.SSLContext | None, deadline_s: float
) -> bool:
    """Poll ``/-/ready`` until 200, the process dies, or the deadline passes (checked every 0.1 s)."""
    deadline = time.monotonic() + deadline_s
    request = urllib.request.Request(f"{url}/-/ready")
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(request, timeout=1, context=context) as response:
                if response.status == 200:
                    return True
        except urllib.error.HTTPError as error:
            if error.code == 401:  # basic auth is on: the server is up and answering
                return True
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.1)
    return False


def start_prometheus(
    data: Path,
    workdir: Path,
    *,
    web_config: str | None = None,
    ready_context: ssl.SSLContext | None = None,
    attempts: int = 3,
) -> PrometheusServer:
    """Start ``prometheus`` on ``data`` at 127.0.0.1:<free port>; retried if the port was taken meanwhile."""
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # no scrape jobs: the TSDB holds everything
    arguments = [f"--config.file={config}", f"--storage.tsdb.path={data}", "--log.level=warn"]
    scheme = "http"
    if web_config is not None:
        web = workdir / "web.yml"
        web.write_text(web_config)
        arguments.append(f"--web.config.file={web}")
        scheme = "https" if "tls_server_config" in web_config else "http"
    log = workdir / "prometheus.log"
    for _ in range(attempts):
        port = free_port()
        url = f"{scheme}://127.0.0.1:{port}"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [binary, *arguments, f"--web.listen-address=127.0.0.1:{port}"],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        server = PrometheusServer(url=url, process=process, log=log)
        if _wait_ready(process, url, ready_context, deadline_s=30):
            return server
        server.stop()
    pytest.fail(f"prometheus did not become ready after {attempts} attempts:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def running_prometheus(
    series: Sequence[Series],
    workdir: Path,
    *,
    web_config: str | None = None,
    ready_context: ssl.SSLContext | None = None,
) -> Iterator[PrometheusServer]:
    """A Prometheus serving ``series`` for the duration of the ``with`` block."""
    data = build_tsdb(series, workdir)
    server = start_prometheus(data, workdir, web_config=web_config, ready_context=ready_context)
    try:
        yield server
    finally:
        server.stop()


# --- certificates -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path
    """A CA that signed nothing here: trusting only it must fail verification."""


def _openssl(*arguments: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("'openssl' is not on PATH: install the Debian package 'openssl'")
    result = subprocess.run([openssl, *arguments], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        pytest.fail(f"openssl {' '.join(arguments)} failed:\n{result.stderr}")


def _make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "2", "-subj", f"/CN={name}")  # fmt: skip
    return cert, key


def _make_leaf(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"
    )
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return cert, key


def make_pki(directory: Path) -> Pki:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, made with ``openssl``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(directory, "test-ca")
    other_ca, _ = _make_ca(directory, "other-ca")
    server = _make_leaf(
        directory, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    client = _make_leaf(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    return Pki(ca[0], server[0], server[1], client[0], client[1], other_ca)


# --- small HTTP stand-ins -----------------------------------------------------------------------------------


@dataclass
class LocalHttpServer:
    """A threaded HTTP server on 127.0.0.1 that is shut down by ``close``."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def _serve(handler: type[BaseHTTPRequestHandler], release: threading.Event) -> LocalHttpServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return LocalHttpServer(server, thread, release)


def canned_server(
    status: int = 200,
    body: bytes = b'{"status":"success","data":{"resultType":"vector","result":[]}}',
    *,
    delay_s: float = 0.0,
    content_type: str = "application/json",
) -> LocalHttpServer:
    """Answers every request with the same response, after ``delay_s`` (cut short when closed).

    With a delay it is an overloaded Prometheus; with an odd body, a proxy or a different server.
    """
    release = threading.Event()

    class Canned(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if delay_s:
                release.wait(delay_s)
            with contextlib.suppress(OSError):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    return _serve(Canned, release)


def bearer_proxy(upstream: str, token_file: Path) -> LocalHttpServer:
    """A reverse proxy that forwards to ``upstream`` only with ``Authorization: Bearer <token in file>``.

    Prometheus itself has no bearer-token check, so this stands where an oauth proxy or
    kube-rbac-proxy stands in real clusters. The token is re-read per request so tests can rotate it.
    """
    release = threading.Event()

    class Proxy(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            expected = f"Bearer {token_file.read_text().strip()}"
            if self.headers.get("Authorization") != expected:
                self._reply(401, b"Unauthorized\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length) if length else None
            request = urllib.request.Request(f"{upstream}{self.path}", data=payload, method=self.command)
            if payload is not None:
                request.add_header(
                    "Content-Type", self.headers.get("Content-Type", "application/octet-stream")
                )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    self._reply(response.status, response.read(), response.headers.get("Content-Type", ""))
            except urllib.error.HTTPError as error:
                self._reply(error.code, error.read(), error.headers.get("Content-Type", ""))

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    return _serve(Proxy, release)


def tls_web_config(pki: Pki, *, basic_auth: bool, require_client_cert: bool) -> str:
    """Prometheus ``--web.config.file`` content: TLS with ``pki``, optional client certs and basic auth."""
    lines = [
        "tls_server_config:",
        f"  cert_file: {pki.server_cert}",
        f"  key_file: {pki.server_key}",
    ]
    if require_client_cert:
        lines += ["  client_auth_type: RequireAndVerifyClientCert", f"  client_ca_file: {pki.ca_cert}"]
    if basic_auth:
        lines += ["basic_auth_users:", f"  {TEST_USER}: '{TEST_PASSWORD_BCRYPT}'"]
    return "\n".join(lines) + "\n"
