"""The API server's flow control (API Priority and Fairness) as our client sees it: which 429s are its
rejections, which FlowSchema and PriorityLevelConfiguration refused us, and how long to wait.

kube-apiserver names the FlowSchema and priority level a request was classified into in every answer's
``X-Kubernetes-PF-FlowSchema-UID`` / ``X-Kubernetes-PF-PriorityLevel-UID`` headers, the 429s included.
They are UIDs, not names: mapping them would take a LIST of flowschemas our ServiceAccount is not granted,
so they are kept as UIDs (``kubectl get flowschemas,prioritylevelconfigurations -o
custom-columns=KIND:.kind,NAME:.metadata.name,UID:.metadata.uid`` maps them). A 429 that names a
disruption budget is the eviction subresource refusing, not flow control, and is not counted here.

Every wait for a rejection is the server's Retry-After plus up to ``RETRY_JITTER`` of it more (never
less: the server asked for at least that), so replicas and reflectors refused together do not come back in
step and be refused together again.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from descheduler.kube.errors import ApiStatusError

FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
UNKNOWN = "unknown"
"""The label of a header the answer did not carry (a server without APF, a proxy's 429)."""
RETRY_JITTER = 0.2
"""A rejection is retried after ``Retry-After * (1 + U(0, RETRY_JITTER))``."""
DEFAULT_RETRY_AFTER = 1.0
"""The wait when a 429 names none (kube-apiserver always does)."""
MAX_RETRY_AFTER = 60.0
"""The longest wait honoured: a broken or hostile proxy's Retry-After cannot stall us for hours."""
RECENT_SECONDS = 120.0
"""A rejection this recent is shown in /readyz."""

_UID = re.compile(r"[0-9a-zA-Z-]{1,64}")


def _uid(headers: Mapping[str, str], name: str) -> str:
    """A header's UID as a bounded label value: anything that is not a UID-shaped token is ``invalid``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get(name.lower(), "").strip()
    if not value:
        return UNKNOWN
    return value if _UID.fullmatch(value) else "invalid"


def classified_as(headers: Mapping[str, str]) -> tuple[str, str]:
    """(flow schema UID, priority level UID) an answer says its request was classified into."""
    return _uid(headers, FLOW_SCHEMA_HEADER), _uid(headers, PRIORITY_LEVEL_HEADER)


def is_budget_refusal(error: ApiStatusError) -> bool:
    """A 429/403 from the eviction subresource that is about a disruption budget, not about load."""
    for cause in error.causes:
        if cause.get("reason") == "DisruptionBudget" or cause.get("type") == "DisruptionBudget":
            return True
    if error.status == 403 and str(error.details.get("kind", "")).startswith("poddisruptionbudget"):
        return True
    return "disruption budget" in error.message.lower()


def retry_wait(retry_after: float | None, rand: Callable[[], float] = random.random) -> float:
    """How long to wait after a rejection: the server's Retry-After (capped), jittered upwards only."""
    base = DEFAULT_RETRY_AFTER if retry_after is None else min(max(retry_after, 0.0), MAX_RETRY_AFTER)
    return base * (1.0 + RETRY_JITTER * rand())


@dataclass(frozen=True)
class Rejected:
    """The last rejection: where the server classified the request, and when (our monotonic clock)."""

    flow_schema: str
    priority_level: str
    at: float
    path: str
    retry_after: float | None


class FlowControlLedger:
    """Counts the server's flow-control rejections by (flow schema UID, priority level UID); thread-safe.
    Fed by ``KubeApi`` for every 429 it receives, read by the metrics collector and /readyz."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self.last: Rejected | None = None

    def note(self, error: ApiStatusError, headers: Mapping[str, str], at: float, path: str) -> bool:
        """Record ``error`` if it is a flow-control rejection (a 429 that is not a budget's); True if so."""
        if error.status != 429 or is_budget_refusal(error):
            return False
        key = classified_as(headers)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            self.last = Rejected(key[0], key[1], at, path, error.retry_after)
        return True

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def recent(self, now: float, within: float = RECENT_SECONDS) -> str:
        """A line for /readyz while the last rejection is recent, else ``""``."""
        last = self.last
        if last is None or now - last.at > within:
            return ""
        after = "" if last.retry_after is None else f", Retry-After {last.retry_after:g}s"
        return (
            f"API server flow control rejected {self.total()} request(s) so far, the last "
            f"{now - last.at:.0f}s ago ({last.path}{after}; flow schema uid {last.flow_schema}, "
            f"priority level uid {last.priority_level}): backing off"
        )
