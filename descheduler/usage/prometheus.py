"""Node and pod usage from Prometheus: node-exporter for nodes, cAdvisor for pods.

A cycle fetches in two steps: the four node queries (usage, newest-sample time, samples in the window:
a window with fewer than lately overlaps a scrape gap, ``samples.ScrapeGaps``) for every node, then the
three pod queries only for the nodes whose pods the planner may move (``fetch_pods`` takes their
names), matched on the pod series' node label, with the names split over at most ``MAX_POD_BATCHES``
queries each. So the queries per cycle are bounded whatever the cluster size (4 + 3 x MAX_POD_BATCHES at
most), and Prometheus evaluates, and we decode, only the series that matter: on a large cluster the pod
series are almost all of the work. All queries of a cycle are evaluated at one instant so the numbers agree.
Every problem ends up as a per-node reason in ``UsageSnapshot.node_errors``; nothing here raises for bad
data or an unavailable server, because one bad cycle must skip nodes, not stop the descheduler.
"""

from __future__ import annotations

import ast
import json
import re
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.exceptions import InsecureRequestWarning
from urllib3.util.retry import Retry

from descheduler.cluster.types import Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.providers import PrometheusSettings, Relabel
from descheduler.units import format_duration
from descheduler.usage.samples import ScrapeGaps, build_sample, join_reasons, node_snapshot, trusted_sample

__all__ = ["QUERY_NAMES", "PrometheusSource", "relabel_function"]

QUERY_NAMES = (
    "nodeCpu",
    "nodeMemory",
    "nodeSampleTime",
    "nodeSampleCount",
    "podCpu",
    "podMemory",
    "podSampleTime",
)
"""In this order: the node queries every cycle, the pod queries once per batch of nodes needing pod usage."""

MAX_POD_BATCHES = 4
"""Node names are split over at most this many queries per pod query, whatever their number."""

NODES_PER_BATCH = 200
"""Below this many names per query a matcher is short enough (a few KiB): no need to split further."""

ALL_PODS_SHARE = 0.5
"""Above this share of the cluster's nodes, one unfiltered query is cheaper than long matchers."""

_NODE_QUERIES = {"cpu": "nodeCpu", "memory": "nodeMemory", "time": "nodeSampleTime"}
_POD_QUERIES = {"cpu": "podCpu", "memory": "podMemory", "time": "podSampleTime"}
_MAX_REASON = 300

Vector = dict[str, list[float]]
"""Query result: object key (node name or ``namespace/pod``) to the values of every series mapped to it."""

_REFERENCE = re.compile(r"\$(?:(\$)|\{(\w+)\}|(\w+))")
_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def node_matcher(label: str, names: Collection[str]) -> str:
    """``, label=~"a|b"`` for a PromQL selector: names are regex-escaped (RE2), then string-escaped."""
    alternatives = "|".join(_REGEX_SPECIAL.sub(r"\\\1", name) for name in sorted(names))
    quoted = alternatives.replace("\\", "\\\\").replace('"', '\\"')
    return f', {label}=~"{quoted}"'


def batches(names: Collection[str], count: int) -> list[list[str]]:
    """``names`` (sorted) split into at most ``count`` batches of near-equal size."""
    ordered = sorted(names)
    if not ordered:
        return []
    parts = min(count, len(ordered))
    size, extra = divmod(len(ordered), parts)
    out: list[list[str]] = []
    start = 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(ordered[start:end])
        start = end
    return out


def relabel_function(relabel: Relabel | None) -> Callable[[str], str]:
    """Prometheus' ``replace``: anchored regex, ``$1``/``${name}`` references; no match keeps the value."""
    if relabel is None:
        return lambda value: value
    pattern = re.compile(f"^(?:{relabel.regex})$")
    template = relabel.replacement

    def expand(match: re.Match[str]) -> str:
        def reference(ref: re.Match[str]) -> str:
            if ref.group(1):
                return "$"
            name = ref.group(2) or ref.group(3)
            try:
                group = match.group(int(name) if name.isdigit() else name)
            except IndexError:  # Go's Expand turns an unknown group into the empty string
                return ""
            return group or ""

        return _REFERENCE.sub(reference, template)

    # A pure function of the value, asked once per node series and cycle for the same few thousand
    # values: the answers are kept (a table that grows past its limit starts afresh).
    known: dict[str, str] = {}

    def apply(value: str) -> str:
        found = known.get(value)
        if found is None:
            match = pattern.match(value)
            found = expand(match) if match else value
            if len(known) >= _RELABEL_MEMORY:
                known.clear()
            known[value] = found
        return found

    return apply


_RELABEL_MEMORY = 100_000
"""Relabelled values kept per relabel function: far more than the nodes of any cluster."""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def _root_cause(error: BaseException) -> str:
    """The innermost error of a requests/urllib3 chain ("[Errno 111] Connection refused"), not the URL."""
    current: BaseException = error
    for _ in range(10):
        reason = getattr(current, "reason", None)
        first = current.args[0] if current.args else None
        if isinstance(reason, BaseException):
            current = reason
        elif isinstance(first, BaseException):
            current = first
        elif current.__cause__ is not None:
            current = current.__cause__
        else:
            break
    return _short(str(current) or type(current).__name__)


_API_ERROR = re.compile(r"^HTTP Status Code (\d+) \((b['\"].*['\"])\)$", re.DOTALL)


def _api_error(error: PrometheusApiClientException) -> tuple[int | None, str]:
    """Status and a readable message from the client's "HTTP Status Code N (b'body')" exception."""
    match = _API_ERROR.match(str(error))
    if match is None:
        return None, _short(str(error))
    status = int(match.group(1))
    try:
        body = ast.literal_eval(match.group(2)).decode("utf-8", "replace")
    except (ValueError, SyntaxError, AttributeError):
        body = match.group(2)
    try:
        decoded = json.loads(body)
        message = f"{decoded['errorType']}: {decoded['error']}"
    except (ValueError, TypeError, KeyError):
        message = body
    return status, _short(f"HTTP {status}: {message}")


def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            value = handle.read().rstrip("\r\n")
    except OSError as error:
        raise _CredentialError(f"cannot read {what} {path}: {error.strerror or error}") from None
    if not value:
        raise _CredentialError(f"{what} {path} is empty")
    return value


class _CredentialError(Exception):
    pass


class PrometheusSource:
    """Usage from Prometheus through ``prometheus-api-client``.

    ``clock`` gives the evaluation instant of each cycle's queries (epoch seconds); tests pass the time
    their data was written for, production leaves the wall clock.
    """

    def __init__(self, settings: PrometheusSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.queries_sent = 0
        """Instant queries sent since construction (benchmarks check it stays bounded per cycle)."""
        self.samples_touched = 0
        """Samples Prometheus loaded to answer them (``stats=all``: ``totalQueryableSamples``), in total."""
        self.cycle_queries = 0
        self.cycle_samples = 0
        """The same two counts for the current cycle (reset by ``fetch_nodes``)."""
        self._now: float | None = None
        self._transport_error: str | None = None
        self._gaps = ScrapeGaps()
        self._clock = clock
        self._node_name = relabel_function(settings.node_relabel)
        self._decoders = {True: _vector_decoder((settings.node_label,)), False: _vector_decoder(_POD_LABELS)}
        window = f"{int(settings.window)}s"
        declared = settings.queries.model_dump(by_alias=True)
        self.queries: dict[str, str] = {
            name: declared[name].replace("${window}", window).replace("${nodeLabel}", settings.node_label)
            for name in QUERY_NAMES
        }
        session = requests.Session()
        tls = settings.tls
        session.verify = False if tls.insecure_skip_verify else (tls.ca_file or True)
        if tls.cert_file is not None and tls.key_file is not None:
            session.cert = (tls.cert_file, tls.key_file)
        # No retries inside a cycle: the next cycle is the retry, and a retry here would multiply the
        # time a down server costs. read=False re-raises a read timeout as itself, so it is named as one.
        no_retry = Retry(total=0, connect=0, read=False, redirect=0, status=0, raise_on_status=False)
        self._client = PrometheusConnect(
            url=settings.url,
            session=session,
            retry=no_retry,
            timeout=settings.timeout,  # type: ignore[arg-type]
        )

    def close(self) -> None:
        self._client.close()

    def fetch(self, nodes: Sequence[Node], pods: Sequence[Pod]) -> UsageSnapshot:
        """Every node's usage and every pod's (both steps, all pods): for callers that need everything."""
        usage = self.fetch_nodes(nodes)
        return UsageSnapshot(
            nodes=usage.nodes, pods=self.fetch_pods(None, nodes, pods), node_errors=usage.node_errors
        )

    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot:
        """Step one of a cycle: node usage (no pods). Fixes the cycle's evaluation instant and credentials."""
        self._now = now = self._clock()
        self._transport_error = None
        self.cycle_queries = 0
        self.cycle_samples = 0
        try:
            self._apply_credentials()
        except _CredentialError as error:
            self._transport_error = str(error)
            return UsageSnapshot(node_errors={node.name: str(error) for node in nodes})
        results = {name: self._run_query(name, "", now) for name in _NODE_QUERIES.values()}
        counts = self._run_query("nodeSampleCount", "", now)
        self._gaps.forget(node.name for node in nodes)

        def judge(node: Node) -> UsageSample | str:
            sample = self._sample(results, _NODE_QUERIES, node.name, "node", node.allocatable, now)
            found = None if isinstance(counts, str) else counts.get(node.name)
            count = found[0] if found is not None and len(found) == 1 else None
            gap = self._gaps.check(node.name, count, self.settings.window)
            return gap if gap and isinstance(sample, UsageSample) else sample

        return node_snapshot(nodes, judge)

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> Mapping[str, UsageSample]:
        """Step two: usage of the pods on the ``wanted`` nodes (None: every node), at step one's instant.

        Pods without a trustworthy sample are left out. Samples are built when first read.
        """
        if self._now is None:
            self.fetch_nodes(nodes)
        now = self._now
        assert now is not None
        if wanted is not None:
            wanted = set(wanted)
            pods = [p for p in pods if p.node_name in wanted]
        if not pods:
            return {}
        if self._transport_error is not None:
            return {}
        with_pods = {p.node_name for p in pods} if wanted is not None else set()
        total = len(nodes)
        if wanted is None or (total and len(with_pods) > ALL_PODS_SHARE * total):
            matchers = [""]
        else:
            count = min(MAX_POD_BATCHES, -(-len(with_pods) // NODES_PER_BATCH))
            label = self.settings.pod_node_label
            matchers = [node_matcher(label, names) for names in batches(with_pods, count)]
        results: dict[str, Vector | str] = {}
        for name in _POD_QUERIES.values():
            merged: Vector = {}
            for matcher in matchers:
                part = self._run_query(name, matcher, now)
                if isinstance(part, str):
                    results[name] = part
                    break
                for key, values in part.items():
                    merged.setdefault(key, []).extend(values)
            else:
                results[name] = merged
        allocatable = {node.name: node.allocatable for node in nodes}
        return _PodSamples(self, results, {p.key: allocatable.get(p.node_name, {}) for p in pods}, now)

    def _apply_credentials(self) -> None:
        """Re-read secret files every cycle so a rotated token or password is picked up without a restart."""
        token, basic = self.settings.auth_token, self.settings.basic_auth
        if token is not None:
            value = _read_secret(token.bearer_token_file, "bearer token file")
            self._client.headers = {"Authorization": f"Bearer {value}"}
        if basic is not None:
            self._client.auth = (
                basic.username,
                _read_secret(basic.password_file, "basic auth password file"),
            )

    @contextmanager
    def _quiet_insecure(self) -> Iterator[None]:
        """insecureSkipVerify was chosen in the config; a warning per request would only flood the log."""
        with warnings.catch_warnings():
            if self.settings.tls.insecure_skip_verify:
                warnings.simplefilter("ignore", InsecureRequestWarning)
            yield

    def _post(self, query: str, now: float) -> requests.Response:
        """One instant query, POSTed (node matchers can be long) with ``stats=all`` to count samples."""
        client = self._client
        response = client._session.post(
            f"{client.url}/api/v1/query",
            data={"query": query, "time": f"{now:.3f}", "stats": "all"},
            headers=client.headers,
            auth=client.auth,
            verify=client._session.verify,
            cert=client._session.cert,
            timeout=self.settings.timeout,
        )
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP Status Code {response.status_code} ({response.content!r})"
            )
        return response

    def _count_samples(self, touched: object) -> None:
        if isinstance(touched, int):
            self.cycle_samples += touched
            self.samples_touched += touched

    def _typed_vector(self, body: bytes, *, node_level: bool) -> Vector | None:
        """The common case, decoded in C straight into the labels read (``_vector_decoder``): a vector
        answer whose every series has a numeric value. None when anything is off: ``_general_result`` and
        ``_parse_vector`` then read the answer as before and word the problem."""
        try:
            answer = self._decoders[node_level].decode(body)
            data = answer.data
            if data.resultType != "vector":
                return None
            vector: Vector = {}
            if node_level:
                node_name = self._node_name
                for series in data.result:
                    label = series.metric.l0
                    if label is not None:
                        vector.setdefault(node_name(label), []).append(float(series.value[1]))
            else:
                for series in data.result:
                    labels = series.metric
                    namespace, pod = labels.l0, labels.l1
                    if namespace is not None and pod is not None:
                        vector.setdefault(f"{namespace}/{pod}", []).append(float(series.value[1]))
        except (msgspec.MsgspecError, ValueError):
            return None
        stats = data.stats
        self._count_samples(stats.samples.totalQueryableSamples if stats and stats.samples else None)
        return vector

    def _general_result(self, response: requests.Response) -> Any:
        """The answer's ``data.result`` read as plain JSON, for ``_parse_vector`` to check item by item."""
        data = response.json()["data"]
        stats = data.get("stats") if isinstance(data, dict) else None
        samples = (stats or {}).get("samples") or {}
        self._count_samples(samples.get("totalQueryableSamples"))
        return data["result"]

    def _run_query(self, name: str, matcher: str, now: float) -> Vector | str:
        """The query's vector, or why it failed; a transport failure fails the rest of the cycle's queries."""
        if self._transport_error is not None:
            return self._transport_error
        self.queries_sent += 1
        self.cycle_queries += 1
        error: str | None = None
        try:
            with self._quiet_insecure():
                response = self._post(self.queries[name].replace("${podNodeMatcher}", matcher), now)
            node_level = name.startswith("node")
            vector = self._typed_vector(response.content, node_level=node_level)
            if vector is None:
                vector = self._parse_vector(self._general_result(response), node_level=node_level)
            return vector
        except PrometheusApiClientException as failure:
            status, message = _api_error(failure)
            if status not in (401, 403):
                return f"{name} query failed: {message}"
            error = f"prometheus rejected the credentials: {message}"  # every other query would fail alike
        except requests.exceptions.JSONDecodeError as failure:
            return f"{name} query got a response that is not JSON: {_root_cause(failure)}"
        except requests.exceptions.SSLError as failure:
            error = f"prometheus TLS error: {_root_cause(failure)}"
        except requests.exceptions.Timeout:
            error = f"prometheus timed out after {format_duration(self.settings.timeout)}"
        except requests.exceptions.ConnectionError as failure:
            error = f"prometheus unreachable: {_root_cause(failure)}"
        except requests.exceptions.RequestException as failure:
            error = f"prometheus request failed: {_root_cause(failure)}"
        except OSError as failure:  # requests checks the TLS file paths itself and raises a bare OSError
            error = f"prometheus TLS files: {_short(str(failure))}"
        except (ValueError, TypeError, KeyError) as failure:
            return f"{name} query got a malformed response: {_short(str(failure))}"
        self._transport_error = error
        return error

    def _parse_vector(self, raw: Any, *, node_level: bool) -> Vector:
        if not isinstance(raw, list):
            raise ValueError(f"expected a vector result, got {type(raw).__name__}")
        vector: Vector = {}
        for item in raw:
            if not (
                isinstance(item, dict)
                and isinstance(item.get("metric"), dict)
                and isinstance(item.get("value"), list)
                and len(item["value"]) == 2
            ):
                raise ValueError(f"not an instant-vector sample: {str(item)[:80]}")
            labels: Mapping[str, str] = item["metric"]
            if node_level:
                label = labels.get(self.settings.node_label)
                key = None if label is None else self._node_name(label)
            else:
                namespace, pod = labels.get("namespace"), labels.get("pod")
                key = None if namespace is None or pod is None else f"{namespace}/{pod}"
            if key is not None:
                vector.setdefault(key, []).append(float(item["value"][1]))
        return vector

    def _sample(
        self,
        results: Mapping[str, Vector | str],
        queries: Mapping[str, str],
        key: str,
        kind: str,
        allocatable: Mapping[str, int],
        now: float,
    ) -> UsageSample | str:
        """A node's or pod's sample from the cycle's results, or why there is none."""
        # The common case first: one series per query, values that pass every check.
        cpu, memory, timestamp = results[queries["cpu"]], results[queries["memory"]], results[queries["time"]]
        if not isinstance(cpu, str) and not isinstance(memory, str) and not isinstance(timestamp, str):
            cpus, memories, times = cpu.get(key), memory.get(key), timestamp.get(key)
            if cpus and memories and times and len(cpus) == len(memories) == len(times) == 1:
                plain = trusted_sample(
                    cpus[0] * 1000, memories[0], times[0], allocatable=allocatable, now=now
                )
                if plain is not None:
                    return plain
        values: dict[str, float] = {}
        problems: list[str] = []
        missing = 0
        for part, name in queries.items():
            result = results[name]
            what = "sample time" if part == "time" else part
            if isinstance(result, str):
                problems.append(result)
            elif key not in result:
                missing += 1
                problems.append(f"no {what} sample for {kind}")
            elif len(result[key]) > 1:
                problems.append(f"{len(result[key])} series map to this {kind} in {name}")
            else:
                values[part] = result[key][0]
        if missing == len(queries):
            return f"no sample for {kind}"
        if problems:
            return join_reasons(problems)
        amounts = {"cpu": values["cpu"] * 1000, "memory": values["memory"]}
        sample = build_sample(amounts, values["time"], allocatable=allocatable, now=now)
        return sample if isinstance(sample, UsageSample) else join_reasons(sample)


_POD_LABELS = ("namespace", "pod")
"""The labels that name a pod's series."""


class _Samples(msgspec.Struct):
    totalQueryableSamples: int | None = None


class _Stats(msgspec.Struct):
    samples: _Samples | None = None


def _vector_decoder(labels: Sequence[str]) -> msgspec.json.Decoder[Any]:
    """A decoder of an instant query's answer into typed structs that keep, of each series, only the
    ``labels`` read (as fields ``l0``, ``l1``, ... in that order), the value, and the samples touched:
    the other labels of a series are skipped without building a dict, and the shape is checked in C."""
    names = {f"l{i}": label for i, label in enumerate(labels)}
    series_labels = msgspec.defstruct("SeriesLabels", [(f, str | None, None) for f in names], rename=names)
    series = msgspec.defstruct("Series", [("metric", series_labels), ("value", tuple[float, str])])
    listing: Any = list
    data = msgspec.defstruct(
        "VectorData", [("resultType", str), ("result", listing[series]), ("stats", _Stats | None, None)]
    )
    answer = msgspec.defstruct("Answer", [("data", data)])
    return msgspec.json.Decoder(answer)


class _PodSamples(Mapping[str, UsageSample]):
    """Pod samples built on first read: a cycle reads the few candidates' samples, not every pod's."""

    def __init__(
        self,
        source: PrometheusSource,
        results: Mapping[str, Vector | str],
        allocatable: Mapping[str, Mapping[str, int]],
        now: float,
    ) -> None:
        self._source = source
        self._results = results
        self._allocatable = allocatable
        self._now = now
        self._built: dict[str, UsageSample | None] = {}

    def _build(self, key: str) -> UsageSample | None:
        if key in self._built:
            return self._built[key]
        sample: UsageSample | str | None = None
        if key in self._allocatable:
            sample = self._source._sample(
                self._results, _POD_QUERIES, key, "pod", self._allocatable[key], self._now
            )
        built = sample if isinstance(sample, UsageSample) else None
        self._built[key] = built
        return built

    def __getitem__(self, key: str) -> UsageSample:
        sample = self._build(key)
        if sample is None:
            raise KeyError(key)
        return sample

    def get(self, key: str, default: Any = None) -> Any:
        """``Mapping.get`` without a ``KeyError`` raised and caught for every pod without a sample."""
        sample = self._built[key] if key in self._built else self._build(key)
        return default if sample is None else sample

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter([key for key in self._allocatable if self._build(key) is not None])

    def __len__(self) -> int:
        return sum(1 for key in self._allocatable if self._build(key) is not None)
