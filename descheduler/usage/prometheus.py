"""Node and pod usage from Prometheus: node-exporter for nodes, cAdvisor for pods.

A cycle sends the same six instant queries whatever the cluster size (usage and newest-sample time, for
nodes and for pods), all evaluated at one instant so the numbers agree with each other. Every problem
ends up as a per-node reason in ``UsageSnapshot.node_errors``; nothing here raises for bad data or an
unavailable server, because one bad cycle must skip nodes, not stop the descheduler.
"""

from __future__ import annotations

import ast
import json
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.exceptions import InsecureRequestWarning
from urllib3.util.retry import Retry

from descheduler.cluster.types import Node, Pod, UsageSample, UsageSnapshot
from descheduler.units import format_duration
from descheduler.usage.samples import build_sample, join_reasons
from descheduler.usage.settings import PrometheusSettings, Relabel

__all__ = ["QUERY_NAMES", "PrometheusSource", "relabel_function"]

QUERY_NAMES = ("nodeCpu", "nodeMemory", "nodeSampleTime", "podCpu", "podMemory", "podSampleTime")
"""Sent in this order every cycle; ``queries_sent`` grows by ``len(QUERY_NAMES)`` per cycle."""

_NODE_QUERIES = {"cpu": "nodeCpu", "memory": "nodeMemory", "time": "nodeSampleTime"}
_POD_QUERIES = {"cpu": "podCpu", "memory": "podMemory", "time": "podSampleTime"}
_MAX_REASON = 300

Vector = dict[str, list[float]]
"""Query result: object key (node name or ``namespace/pod``) to the values of every series mapped to it."""

_REFERENCE = re.compile(r"\$(?:(\$)|\{(\w+)\}|(\w+))")


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

    def apply(value: str) -> str:
        match = pattern.match(value)
        return expand(match) if match else value

    return apply


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
        """Instant queries sent since construction (benchmarks check it grows by a constant per cycle)."""
        self._clock = clock
        self._node_name = relabel_function(settings.node_relabel)
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
        now = self._clock()
        try:
            self._apply_credentials()
        except _CredentialError as error:
            return UsageSnapshot(node_errors={node.name: str(error) for node in nodes})
        results = self._run_queries(now)
        node_samples: dict[str, UsageSample] = {}
        node_errors: dict[str, str] = {}
        for node in nodes:
            sample = self._sample(results, _NODE_QUERIES, node.name, "node", node.allocatable, now)
            if isinstance(sample, UsageSample):
                node_samples[node.name] = sample
            else:
                node_errors[node.name] = sample
        allocatable = {node.name: node.allocatable for node in nodes}
        pod_samples: dict[str, UsageSample] = {}
        for pod in pods:
            sample = self._sample(
                results, _POD_QUERIES, pod.key, "pod", allocatable.get(pod.node_name, {}), now
            )
            if isinstance(sample, UsageSample):
                pod_samples[pod.key] = sample
        return UsageSnapshot(nodes=node_samples, pods=pod_samples, node_errors=node_errors)

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

    def _run_queries(self, now: float) -> dict[str, Vector | str]:
        """Each query's vector, or why it failed; the first transport failure ends the cycle's queries."""
        results: dict[str, Vector | str] = {}
        transport_error: str | None = None
        for name in QUERY_NAMES:
            if transport_error is not None:
                results[name] = transport_error
                continue
            self.queries_sent += 1
            try:
                with self._quiet_insecure():
                    raw = self._client.custom_query(self.queries[name], params={"time": f"{now:.3f}"})
                results[name] = self._parse_vector(raw, node_level=name.startswith("node"))
            except PrometheusApiClientException as error:
                status, message = _api_error(error)
                if status in (401, 403):  # credentials, not this query: every other query would fail alike
                    transport_error = results[name] = f"prometheus rejected the credentials: {message}"
                else:
                    results[name] = f"{name} query failed: {message}"
            except requests.exceptions.JSONDecodeError as error:
                results[name] = f"{name} query got a response that is not JSON: {_root_cause(error)}"
            except requests.exceptions.SSLError as error:
                transport_error = results[name] = f"prometheus TLS error: {_root_cause(error)}"
            except requests.exceptions.Timeout:
                transport_error = results[name] = (
                    f"prometheus timed out after {format_duration(self.settings.timeout)}"
                )
            except requests.exceptions.ConnectionError as error:
                transport_error = results[name] = f"prometheus unreachable: {_root_cause(error)}"
            except requests.exceptions.RequestException as error:
                transport_error = results[name] = f"prometheus request failed: {_root_cause(error)}"
            except OSError as error:  # requests checks the TLS file paths itself and raises a bare OSError
                transport_error = results[name] = f"prometheus TLS files: {_short(str(error))}"
            except (ValueError, TypeError, KeyError) as error:
                results[name] = f"{name} query got a malformed response: {_short(str(error))}"
        return results

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
