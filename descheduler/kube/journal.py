"""The migration journal's home: one ConfigMap the descheduler owns, next to its Lease.

``load`` reads it (absent: no records yet on a first start, ``JournalLost`` when the marker the first
``save`` put on the Lease says it existed: ``kube/lost.py``); ``save`` replaces its data with optimistic
concurrency on the resourceVersion it last saw, so a replica that lost the Lease and still tries to write
gets a conflict instead of erasing its successor's records (and therefore does not evict). A save is
refused until a load has succeeded or shown bad content: writing blind could drop records another
process made.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import structlog

from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError
from descheduler.kube.lost import LeaseMarker, evidence
from descheduler.planner.journal import (
    MAX_BYTES,
    Detectors,
    Entry,
    JournalLost,
    JournalUnreadable,
    JournalWriteError,
    decode,
    decode_detectors,
    encode,
)

log = structlog.get_logger("descheduler.kube.journal")

DATA_KEY = "migrations.json"
SUFFIX = "-migrations"
REQUEST_TIMEOUT = 5.0
"""Short: the write happens right before an eviction; a slow API server means no eviction, not a stall."""


def journal_name(lease_name: str) -> str:
    """The ConfigMap named after the Lease, so instances that own node pools each have their own."""
    return f"{lease_name}{SUFFIX}"


class ConfigMapJournal:
    def __init__(
        self, api: KubeApi, *, namespace: str, name: str, writer: str, dry_run: bool = False
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.writer = writer
        self._lock = threading.Lock()
        self._loaded = False
        self._resource_version: str | None = None
        self._detectors = Detectors()
        """Of the object as last read or written; None while it does not exist."""
        base = f"/api/v1/namespaces/{path_segment(namespace)}/configmaps"
        self._collection = base
        self._path = f"{base}/{path_segment(name)}"
        lease = name.removesuffix(SUFFIX)
        self.marker = LeaseMarker(
            api, namespace=namespace, lease=lease, journal=name, timeout=REQUEST_TIMEOUT
        )
        """Tells a lost journal from a first start (``kube/lost.py``); a dry run neither reads nor writes it
        (it touches no Lease, and evicts nothing a lost journal could let through)."""
        self.dry_run = dry_run

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self) -> tuple[Entry, ...]:
        with self._lock:
            try:
                obj = self.api.request("GET", self._path, timeout=REQUEST_TIMEOUT)
            except ApiStatusError as exc:
                if exc.status == 404:
                    self._loaded, self._resource_version = True, None
                    self._detectors = Detectors()
                    return self._missing()
                reason = "forbidden" if exc.status in (401, 403) else "unavailable"
                raise JournalUnreadable(reason, f"{self.where}: {exc}") from None
            except KubeError as exc:
                raise JournalUnreadable("unavailable", f"{self.where}: {exc}") from None
            if not isinstance(obj, dict):
                raise JournalUnreadable("invalid", f"{self.where}: the API answered {type(obj).__name__}")
            meta = obj.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "") or None
            data = obj.get("data") or {}
            text = data.get(DATA_KEY) if isinstance(data, dict) else None
            # Past this point the object exists: even bad content may be replaced by the next save.
            self._loaded, self._resource_version = True, rv
            if text is None:
                self._detectors = Detectors()
                return ()
            where = f"{self.where} key {DATA_KEY}"
            entries = decode(str(text), where)
            self._detectors = decode_detectors(str(text), where)
            return entries

    def _missing(self) -> tuple[Entry, ...]:
        """No object: no records on a first start; ``JournalLost`` when the Lease says it existed."""
        if self.dry_run or not self.marker.present():
            return ()
        raise JournalLost(
            f"{self.where} is gone, but {self.marker.where} says it existed: it was deleted",
            evidence(self.api, REQUEST_TIMEOUT),
            self.namespace,
            self.name,
        )

    def detectors(self) -> Detectors:
        """The anomaly detectors the last successful load found (none before)."""
        with self._lock:
            return self._detectors

    def save(self, entries: Sequence[Entry], detectors: Detectors | None = None) -> None:
        """``detectors`` None keeps those last loaded or saved."""
        if detectors is None:
            detectors = self._detectors
        body_text = encode(entries, writer=self.writer, detectors=detectors)
        if len(body_text.encode()) > MAX_BYTES:
            raise JournalWriteError(
                "too-large",
                f"{self.where}: {len(entries)} migration records exceed {MAX_BYTES} bytes; "
                "set or lower churnBudget.maxEvictions, or shorten the objectLimiters window",
            )
        with self._lock:
            if not self._loaded:
                raise JournalWriteError("not-loaded", f"{self.where}: not read successfully yet")
            obj: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/name": "load-aware-descheduler"},
                    "annotations": {
                        "descheduler.load-aware.io/purpose": "migration records: limits hold across "
                        "restarts (do not edit while the descheduler runs)"
                    },
                },
                "data": {DATA_KEY: body_text},
            }
            try:
                if self._resource_version is None:
                    written = self.api.request("POST", self._collection, body=obj, timeout=REQUEST_TIMEOUT)
                else:
                    obj["metadata"]["resourceVersion"] = self._resource_version
                    written = self.api.request("PUT", self._path, body=obj, timeout=REQUEST_TIMEOUT)
            except ApiStatusError as exc:
                if exc.status == 409:
                    self._loaded = False  # read again before the next write
                    raise JournalWriteError(
                        "conflict", f"{self.where} was changed by someone else since it was read: {exc}"
                    ) from None
                if exc.status == 404:
                    self._resource_version = None  # deleted under us: the next save creates it
                reason = "forbidden" if exc.status in (401, 403) else "unavailable"
                raise JournalWriteError(reason, f"{self.where}: {exc}") from None
            except KubeError as exc:
                # It may have been applied: our resourceVersion is stale either way, so read it again.
                self._loaded = False
                raise JournalWriteError("unavailable", f"{self.where}: {exc}") from None
            meta = written.get("metadata") if isinstance(written, dict) else None
            rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
            if not rv:
                self._loaded = False
                raise JournalWriteError("unavailable", f"{self.where}: the answer had no resourceVersion")
            self._resource_version = rv
            self._detectors = detectors
        self.marker.mark()  # each process once: a journal of an earlier version or a Lease made again too
