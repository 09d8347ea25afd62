"""The API server's audit log, read as the benchmarks on the real control plane count requests.

``apiserver_request_total`` has no user or user-agent label, so a descheduler's own requests are told apart
from the controllers' and the test loaders' by the audit log's ``user`` field instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AuditEvent:
    user: str
    user_agent: str
    verb: str
    resource: str
    """``pods/eviction``, ``leases``, ... (``-`` for a non-resource URL)."""
    name: str
    code: int
    received: float
    """Unix time the server received the request."""
    completed: float
    """Unix time the response completed (``received`` when the event does not say)."""
    dry_run: bool


def parse_audit(lines: Iterable[str]) -> list[AuditEvent]:
    """The ``ResponseComplete`` events of a JSON-lines audit log; other stages and junk lines are skipped."""
    out: list[AuditEvent] = []
    for line in lines:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not isinstance(raw, dict) or raw.get("stage") != "ResponseComplete":
            continue
        ref = raw.get("objectRef") or {}
        resource = ref.get("resource", "-")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        received = datetime.fromisoformat(raw["requestReceivedTimestamp"]).timestamp()
        stage = raw.get("stageTimestamp")
        out.append(
            AuditEvent(
                user=(raw.get("user") or {}).get("username", ""),
                user_agent=raw.get("userAgent", ""),
                verb=raw.get("verb", ""),
                resource=resource,
                name=ref.get("name", ""),
                code=int((raw.get("responseStatus") or {}).get("code", 0)),
                received=received,
                completed=datetime.fromisoformat(stage).timestamp() if stage else received,
                dry_run="dryRun=All" in raw.get("requestURI", ""),
            )
        )
    return out


def request_kind(event: AuditEvent) -> str:
    """How a request is counted per cycle: every Lease request as ``lease``, every watch (re-)open as
    ``watch``, the rest as ``verb resource``."""
    if event.resource == "leases":
        return "lease"
    if event.verb == "watch":
        return "watch"
    return f"{event.verb} {event.resource}"
