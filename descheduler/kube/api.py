"""The one HTTP client to the API server: auth and TLS from the official client, JSON decoding of our own.

The official ``kubernetes`` package supplies the transport (its configured urllib3 pool: TLS, client
certificates, proxies) and the credentials (bearer tokens with their refresh hooks). Bodies are decoded
with ``json.loads`` and handed to our parsers, or handed over as bytes (``request_bytes``,
``WatchStream.lines``) to the watch cache's own decoder: the client's model deserialization is many times
slower on large lists and keeps every field. Every request passes one client-side token bucket
(``qps``/``burst``).
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack
from urllib.parse import quote, urlencode

import urllib3

from descheduler import __version__
from descheduler.cluster.protoparse import status_of
from descheduler.kube.errors import (
    ApiConnectionError,
    ApiStatusError,
    ApiTimeoutError,
    ClientThrottledError,
    DecodeError,
)
from descheduler.kube.flowcontrol import FlowControlLedger
from descheduler.kube.ratelimit import TokenBucket

DEFAULT_USER_AGENT = f"load-aware-descheduler/{__version__}"
QueryValue = str | int | float | bool | None
# Connection failures are retried (the request never reached the server); read failures and statuses
# are not: a POST that timed out may have been applied, and the callers decide what a status means.
_RETRIES = urllib3.Retry(total=2, connect=2, read=False, redirect=False, status=0, raise_on_status=False)


def _innermost(error: BaseException | None) -> BaseException | None:
    """The root cause urllib3 wrapped (its messages nest the OS error several levels deep)."""
    seen = 0
    while error is not None and seen < 10:
        inner = error.__cause__ or error.__context__
        if inner is None:
            return error
        error, seen = inner, seen + 1
    return error


def transport_error(
    what: str, reason: BaseException | None, seconds: float
) -> ApiTimeoutError | ApiConnectionError:
    """Name the failure as an operator needs it: connection refused, DNS, TLS, timeout or a broken
    connection. Order matters: urllib3's ``NewConnectionError`` (and its ``NameResolutionError``)
    subclass ``ConnectTimeoutError``, so a refused connection must be recognised before a timeout."""
    exc = urllib3.exceptions
    root = _innermost(reason)
    if isinstance(reason, exc.NameResolutionError) or isinstance(root, socket.gaierror):
        return ApiConnectionError(f"{what}: DNS lookup failed: {root or reason}", sent=False, cause="dns")
    if isinstance(reason, exc.SSLError) or isinstance(root, ssl.SSLError):
        return ApiConnectionError(f"{what}: TLS failure: {root or reason}", sent=False, cause="tls")
    if isinstance(reason, exc.NewConnectionError) or isinstance(root, ConnectionRefusedError):
        if isinstance(root, ConnectionRefusedError):
            detail = "connection refused (nothing listens on that address and port)"
        else:
            detail = f"cannot connect: {root or reason}"
        return ApiConnectionError(f"{what}: {detail}", sent=False, cause="refused")
    if isinstance(reason, exc.ConnectTimeoutError):
        return ApiTimeoutError(
            f"{what}: timed out connecting after {seconds:.1f}s", sent=False, cause="timeout"
        )
    if isinstance(reason, exc.TimeoutError | socket.timeout):
        return ApiTimeoutError(f"{what}: no answer within {seconds:.1f}s", cause="timeout")
    return ApiConnectionError(f"{what}: connection broken: {root or reason}", cause="broken")


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    data: bytes


def path_segment(value: str) -> str:
    """Quote one path segment (names are DNS labels in practice, but never trust input)."""
    return quote(value, safe="")


def _query_string(query: Mapping[str, QueryValue] | None) -> str:
    if not query:
        return ""
    pairs = []
    for key, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        pairs.append((key, str(value)))
    return "?" + urlencode(pairs) if pairs else ""


def _retry_after(headers: Mapping[str, str], body: Mapping[str, Any] | None) -> float | None:
    header = headers.get("Retry-After")
    if header:
        with suppress(ValueError):
            return max(0.0, float(header))
    details = body.get("details") if body else None
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and seconds > 0:
            return float(seconds)
    return None


def status_error(method: str, path: str, response: Response) -> ApiStatusError:
    """Build the error for a non-2xx answer from its Status body, or from its text."""
    body: Mapping[str, Any] | None = None
    message = ""
    reason = ""
    try:
        decoded = json.loads(response.data) if response.data else None
    except ValueError:
        decoded = status_of(response.data)  # asked for protobuf: the Status came in it
    if isinstance(decoded, Mapping) and decoded.get("kind") == "Status":
        body = decoded
        message = str(decoded.get("message") or "")
        reason = str(decoded.get("reason") or "")
    if not message:
        message = response.data.decode("utf-8", errors="replace").strip()[:500] or "(empty body)"
    return ApiStatusError(
        response.status,
        message,
        reason=reason,
        body=body,
        retry_after=_retry_after(response.headers, body),
        method=method,
        path=path,
    )


def decode_json(method: str, path: str, data: bytes) -> Any:
    """``json.loads`` of an answer; ``DecodeError`` naming the request when it is not JSON."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise DecodeError(f"{method} {path}: answer is not JSON: {data[:200]!r}") from exc


PROTOBUF = "application/vnd.kubernetes.protobuf"
"""Kubernetes' protobuf media type (``cluster/protoparse.py`` reads it); JSON stays acceptable in every
Accept we send, so a server or resource without protobuf answers in JSON."""
PROTOBUF_ACCEPT = f"{PROTOBUF}, application/json"
PROTOBUF_WATCH_ACCEPT = f"{PROTOBUF};stream=watch, application/json"

MAX_EVENT_BYTES = 64 * 2**20
"""The longest watch event line accepted: etcd stores objects of at most 1.5 MiB by default, so a line this
long is not an object of a sane cluster; reading it whole would hold memory without bound."""


class RequestOptions(TypedDict, total=False):
    """The keyword options of ``KubeApi.request_raw``, shared by ``request``."""

    query: Mapping[str, QueryValue] | None
    body: Any
    timeout: float | None
    deadline: float | None
    content_type: str


class WatchStream:
    """An open WATCH response: iterate for decoded events; ``close()`` from any thread ends it."""

    def __init__(self, response: Any, path: str) -> None:
        self._response = response
        self._path = path
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self.lines():
            yield self.decode(line)

    @property
    def protobuf(self) -> bool:
        """The server answered in protobuf (length-prefixed frames), not JSON lines."""
        headers = getattr(self._response, "headers", None) or {}
        return str(headers.get("Content-Type", "")).startswith(PROTOBUF)

    def lines(self) -> Iterator[bytes]:
        """The events as the server wrote them, one JSON document a line, for a decoder of one's own
        (the cache's fast path); ``decode`` is the exact one."""
        return self._guarded(self._lines())

    def frames(self) -> Iterator[bytes]:
        """The events of a protobuf watch: each a 4-byte big-endian length, then a ``WatchEvent``
        (yielded without the length)."""
        return self._guarded(self._frames())

    def _guarded(self, events: Iterator[bytes]) -> Iterator[bytes]:
        """The reader's transport failures as our errors (none once ``close()`` was called)."""
        try:
            yield from events
        except urllib3.exceptions.TimeoutError as exc:
            if not self._closed:
                raise ApiTimeoutError(f"watch {self._path}: no data within the read timeout") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if not self._closed:
                raise ApiConnectionError(f"watch {self._path}: connection broken: {exc}") from exc

    def _lines(self) -> Iterator[bytes]:
        buffer = bytearray()
        for chunk in self._chunks():
            searched = len(buffer)  # the bytes before had no newline: never scanned twice
            buffer += chunk
            begin = 0
            end = buffer.find(b"\n", searched)
            while end != -1:
                line = bytes(buffer[begin:end])
                begin = end + 1
                if line.strip():
                    yield line
                end = buffer.find(b"\n", begin)
            del buffer[:begin]
            self._bounded(len(buffer))
        if buffer.strip() and not self._closed:
            yield bytes(buffer)

    def _frames(self) -> Iterator[bytes]:
        buffer = bytearray()
        for chunk in self._chunks():
            buffer += chunk
            begin = 0
            while len(buffer) - begin >= 4:
                size = int.from_bytes(buffer[begin : begin + 4], "big")
                self._bounded(size)
                if len(buffer) - begin - 4 < size:
                    break
                yield bytes(buffer[begin + 4 : begin + 4 + size])
                begin += 4 + size
            del buffer[:begin]
        if buffer and not self._closed:
            raise DecodeError(f"watch {self._path}: the stream ended inside an event")

    def _bounded(self, size: int) -> None:
        if size > MAX_EVENT_BYTES:
            raise DecodeError(
                f"watch {self._path}: an event longer than {MAX_EVENT_BYTES} bytes: watch dropped"
            )

    def _chunks(self) -> Iterator[bytes]:
        response = self._response
        if response.chunked and response.supports_chunked_reads():
            yield from response.read_chunked(decode_content=True)
            return
        reader = getattr(response, "read1", None)
        while not self._closed:
            data = reader(65536) if reader is not None else response.read(65536)
            if not data:
                return
            yield data

    def decode(self, line: bytes) -> dict[str, Any]:
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise DecodeError(f"watch {self._path}: event is not JSON: {line[:200]!r}") from exc
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise DecodeError(f"watch {self._path}: event has no object: {line[:200]!r}")
        return event

    def close(self) -> None:
        """Interrupt a blocked reader (socket shutdown) and release the connection."""
        self._closed = True
        connection = getattr(self._response, "connection", None) or getattr(
            self._response, "_connection", None
        )
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with suppress(Exception):
            self._response.close()
        with suppress(Exception):
            self._response.release_conn()


class KubeApi:
    """Thread-safe. Raises ``KubeError`` subclasses; returns decoded JSON."""

    def __init__(
        self,
        configuration: Any,
        *,
        qps: float,
        burst: int,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connect_timeout: float = 10.0,
        default_timeout: float = 30.0,
    ) -> None:
        import kubernetes.client

        # Watches hold one connection each for minutes; keep room for them plus ordinary requests.
        configuration.connection_pool_maxsize = max(int(configuration.connection_pool_maxsize or 0), 32)
        self.configuration = configuration
        api_client: Any = kubernetes.client.ApiClient
        self._client: Any = api_client(configuration)
        self._pool: Any = self._client.rest_client.pool_manager
        self.host = str(configuration.host).rstrip("/")
        self.user_agent = user_agent
        self.limiter = TokenBucket(qps, burst, clock=clock, sleep=sleep)
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._default_timeout = default_timeout
        self.flow_control = FlowControlLedger()
        """Every 429 of the server's flow control, by the FlowSchema and priority level that refused us."""

    def close(self) -> None:
        with suppress(Exception):
            self._client.close()

    def _headers(self, content_type: str | None, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": self.user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        # auth_settings() runs the refresh hook (service-account token rotation, exec plugins).
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    def _timeout(self, timeout: float | None, deadline: float | None) -> float:
        value = self._default_timeout if timeout is None else timeout
        if deadline is not None:
            value = min(value, deadline - self._clock())
        if value <= 0:
            raise ClientThrottledError("no time left before the deadline: request not sent")
        return value

    def request_raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Response:
        """One request, any status. Raises only for transport failures and client-side throttling."""
        if not self.limiter.acquire(deadline):
            raise ClientThrottledError(
                f"{method} {path}: client-side rate limit (qps={self.limiter.qps:g}) would pass the deadline"
            )
        seconds = self._timeout(timeout, deadline)
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        url = self.host + path + _query_string(query)
        try:
            raw = self._pool.request(
                method,
                url,
                body=payload,
                headers=self._headers(content_type if payload is not None else None, accept),
                timeout=urllib3.Timeout(connect=min(self._connect_timeout, seconds), read=seconds),
                retries=_RETRIES,
                preload_content=True,
                redirect=False,
            )
        except urllib3.exceptions.MaxRetryError as exc:
            # Only connection failures are retried (read=False): such a reason never reached the server.
            raise transport_error(f"{method} {path}", exc.reason, seconds) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise transport_error(f"{method} {path}", exc, seconds) from exc
        answer = Response(raw.status, dict(raw.headers), raw.data or b"")
        if answer.status == 429:
            self._rejected(method, path, answer)
        return answer

    def _rejected(self, method: str, path: str, response: Response) -> ApiStatusError:
        """A 429: counted if it is the server's flow control (not a disruption budget's refusal)."""
        error = status_error(method, path, response)
        self.flow_control.note(error, response.headers, self._clock(), f"{method} {path}")
        return error

    def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Any:
        """A request whose 2xx body is JSON; non-2xx raises ``ApiStatusError``. Options as ``request_raw``."""
        response = self.request_raw(method, path, **options)
        if not 200 <= response.status < 300:
            raise status_error(method, path, response)
        if not response.data:
            return None
        return decode_json(method, path, response.data)

    def request_bytes(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        accept: str = "application/json",
    ) -> bytes:
        """A request's 2xx body as sent, for a decoder of one's own (the cache's LIST pages); non-2xx
        raises ``ApiStatusError``. ``accept``: e.g. ``PROTOBUF_ACCEPT`` (the body then tells which came)."""
        response = self.request_raw(method, path, query=query, accept=accept)
        if not 200 <= response.status < 300:
            raise status_error(method, path, response)
        return response.data

    def get(
        self, path: str, *, query: Mapping[str, QueryValue] | None = None, timeout: float | None = None
    ) -> Any:
        return self.request("GET", path, query=query, timeout=timeout)

    def watch(
        self,
        path: str,
        query: Mapping[str, QueryValue],
        *,
        read_timeout: float,
        accept: str = "application/json",
    ) -> WatchStream:
        """Open a WATCH. The caller must ``close()`` the stream (use it as an iterator, then close).
        ``accept``: e.g. ``PROTOBUF_WATCH_ACCEPT`` (``WatchStream.protobuf`` tells which came)."""
        self.limiter.acquire()
        url = self.host + path + _query_string({**query, "watch": True})
        try:
            raw = self._pool.request(
                "GET",
                url,
                headers=self._headers(None, accept),
                timeout=urllib3.Timeout(connect=self._connect_timeout, read=read_timeout),
                retries=_RETRIES,
                preload_content=False,
                redirect=False,
            )
        except urllib3.exceptions.MaxRetryError as exc:
            raise transport_error(f"watch {path}", exc.reason, self._connect_timeout) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise transport_error(f"watch {path}", exc, self._connect_timeout) from exc
        if raw.status != 200:
            try:
                data = raw.read() or b""
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            answer = Response(raw.status, dict(raw.headers), data)
            raise (
                self._rejected("GET", path, answer)
                if raw.status == 429
                else status_error("GET", path, answer)
            )
        return WatchStream(raw, path)
