"""A lost migration journal: told apart from a first start, and what the API still shows of its records.

A missing journal ConfigMap is normal on a first start and a loss when someone deleted it: the records of
the churn budget, the windows and the ping-pong back-offs went with it. The first time the journal is
created (or found without it), a marker annotation is put on the leader Lease, which outlives the
ConfigMap; a journal that is missing while the Lease carries the marker was lost.

What can be rebuilt comes from the Events this descheduler wrote on the pods it moved (``Descheduled``,
and the ``...OutcomeUnknown`` Warnings of requests that may have been applied): the pod, its uid, its node
and when. They name no workload identity, and the API server keeps Events only for ``--event-ttl`` (1 h by
default), so older evictions and the per-workload windows cannot be rebuilt: the runner holds a quiet
period for those (``service/ledger.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

import structlog

from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError
from descheduler.planner.journal import EVICTED, UNKNOWN, Entry, JournalUnreadable
from descheduler.planner.model import EVICT, RESTART

log = structlog.get_logger("descheduler.kube.lost")

MARKER = "descheduler.load-aware.io/migration-journal"
"""On the Lease: the name of the journal ConfigMap that once existed."""
COMPONENT = "load-aware-descheduler"
"""The ``reportingController`` of our Events (``kube/events.py``'s default)."""
EVIDENCE = {"Descheduled": EVICTED, "EvictionOutcomeUnknown": UNKNOWN, "RestartOutcomeUnknown": UNKNOWN}
"""Event reasons on pods that stand for a (possible) migration, and the record status each gives."""
PAGE = 500
MAX_PAGES = 40
"""At most 20,000 Events per reason are read: a bound on the work, far above any churn budget."""
_NODE = re.compile(r'node "([^"]+)"')
_REASON = re.compile(r'(?:by the reason|reason) "([^"]*)"')
_DEPLOYMENT = re.compile(r"Deployment (\S+)")


class LeaseMarker:
    """The marker on the leader Lease (``namespace/lease``) that says the journal ``journal`` existed."""

    def __init__(self, api: KubeApi, *, namespace: str, lease: str, journal: str, timeout: float) -> None:
        self.api = api
        self.journal = journal
        self.timeout = timeout
        self.where = f"Lease {namespace}/{lease}"
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}/leases/{path_segment(lease)}"
        )
        self.marked = False
        """Set once this process saw or wrote the marker (no further requests)."""

    def _lease(self) -> dict[str, Any] | None:
        """The Lease, or None when there is none (or we may not read it: no leader election)."""
        try:
            obj = self.api.request("GET", self._path, timeout=self.timeout)
        except ApiStatusError as exc:
            if exc.status in (401, 403, 404):
                return None
            raise JournalUnreadable("unavailable", f"{self.where}: {exc}") from None
        except KubeError as exc:
            raise JournalUnreadable("unavailable", f"{self.where}: {exc}") from None
        return obj if isinstance(obj, dict) else None

    def present(self) -> bool:
        """Whether the Lease says the journal existed. Raises ``JournalUnreadable`` when it cannot tell."""
        meta = (self._lease() or {}).get("metadata") or {}
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        return isinstance(annotations, Mapping) and annotations.get(MARKER) == self.journal

    def mark(self) -> None:
        """Put the marker on the Lease (best effort: a failure is logged and tried at the next load)."""
        if self.marked:
            return
        try:
            lease = self._lease()
            if lease is None:
                log.info("journal_marker_skipped", lease=self.where, why="no Lease (leader election off?)")
                return
            meta = dict(lease.get("metadata") or {})
            annotations = dict(meta.get("annotations") or {})
            if annotations.get(MARKER) != self.journal:
                annotations[MARKER] = self.journal
                body = {**lease, "metadata": {**meta, "annotations": annotations}}
                self.api.request("PUT", self._path, body=body, timeout=self.timeout)
            self.marked = True
        except (JournalUnreadable, KubeError) as exc:
            log.warning("journal_marker_failed", lease=self.where, error=str(exc))


def evidence(api: KubeApi, timeout: float) -> tuple[Entry, ...] | None:
    """The migrations our Events still show, as journal records; None when they cannot be read."""
    found: list[Entry] = []
    try:
        for reason in EVIDENCE:
            found.extend(_records(api, reason, timeout))
    except KubeError as exc:
        log.warning("journal_evidence_unreadable", error=str(exc))
        return None
    return tuple(found)


def _records(api: KubeApi, reason: str, timeout: float) -> list[Entry]:
    """One reason's Events across namespaces (core v1 shows those written through events.k8s.io too)."""
    out: list[Entry] = []
    token = ""
    for _ in range(MAX_PAGES):
        query = f"fieldSelector={quote(f'reason={reason}')}&limit={PAGE}"
        if token:
            query += f"&continue={quote(token)}"
        page = api.request("GET", f"/api/v1/events?{query}", timeout=timeout)
        if not isinstance(page, dict):
            break
        for item in page.get("items") or []:
            entry = record_of(item) if isinstance(item, dict) else None
            if entry is not None:
                out.append(entry)
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            break
    return out


def record_of(event: Mapping[str, Any]) -> Entry | None:
    """The journal record an Event of ours stands for, or None (not ours, not a pod, a dry run)."""
    status = EVIDENCE.get(str(event.get("reason") or ""))
    component = event.get("reportingComponent") or (event.get("source") or {}).get("component")
    ref = event.get("involvedObject") or {}
    note = str(event.get("message") or "")
    node = _NODE.search(note)
    at = _time(event)
    if status is None or component != COMPONENT or not isinstance(ref, Mapping) or ref.get("kind") != "Pod":
        return None
    if note.startswith("[dry-run]") or node is None or at is None or not ref.get("namespace"):
        return None
    restart = "rollout restart" in note.lower()
    deployment = _DEPLOYMENT.search(note) if restart else None
    reason = _REASON.search(note)
    return Entry(
        pod=f"{ref['namespace']}/{ref.get('name', '')}",
        uid=str(ref.get("uid") or ""),
        node=node.group(1),
        workload="",
        workload_kind="Deployment" if deployment else "",
        workload_name=deployment.group(1) if deployment else "",
        at=at,
        status=status,
        reason=reason.group(1) if reason and status == UNKNOWN else "",
        action=RESTART if restart else EVICT,
    )


def _time(event: Mapping[str, Any]) -> float | None:
    """When it happened: the Event's own time, else its object's creation."""
    meta = event.get("metadata") or {}
    for value in (
        event.get("eventTime"),
        event.get("lastTimestamp"),
        event.get("firstTimestamp"),
        meta.get("creationTimestamp") if isinstance(meta, Mapping) else None,
    ):
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None
