"""Failures talking to the API server, classified the way the callers need to react to them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """Any failure of a request to the Kubernetes API."""


class ApiStatusError(KubeError):
    """The server answered with a non-2xx status (``metav1.Status`` body, or plain text from a filter)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str = "",
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}HTTP {status}{f' {reason}' if reason else ''}: {message}")
        self.status = status
        self.message = message
        self.reason = reason
        self.body = body
        self.retry_after = retry_after

    @property
    def causes(self) -> list[Mapping[str, Any]]:
        details = (self.body or {}).get("details") if isinstance(self.body, Mapping) else None
        causes = details.get("causes") if isinstance(details, Mapping) else None
        return [c for c in causes if isinstance(c, Mapping)] if isinstance(causes, list) else []

    @property
    def details(self) -> Mapping[str, Any]:
        details = (self.body or {}).get("details") if isinstance(self.body, Mapping) else None
        return details if isinstance(details, Mapping) else {}


class _TransportError(KubeError):
    """A request without an answer. ``sent`` is False only when it provably never reached the server
    (no connection could be made); otherwise the server may have acted on it."""

    def __init__(self, message: str, *, sent: bool = True, cause: str = "") -> None:
        super().__init__(message)
        self.sent = sent
        self.cause = cause
        """``refused``, ``dns``, ``tls``, ``timeout`` or ``broken`` (empty when not classified)."""


class ApiTimeoutError(_TransportError):
    """No complete answer within the request timeout (the server may still have acted)."""


class ApiConnectionError(_TransportError):
    """The connection failed or broke before an answer arrived."""


class ClientThrottledError(KubeError):
    """The client-side rate limit would not allow the request before its deadline."""


class DecodeError(KubeError):
    """The server answered 2xx with a body that is not the JSON we expect."""


class KubeconfigError(KubeError):
    """No usable kubeconfig or in-cluster service account: where to connect, not what to do (a bad
    configuration file is ``descheduler.config.load.ConfigError``, exit 2 before any connection)."""
