"""The watch cache: what the planner sees of the cluster, kept current by list-then-watch.

One background thread per resource runs a reflector like client-go's: a paginated LIST (``limit``,
``continue``), then a WATCH from the list's resourceVersion with bookmarks; a 410 Gone (compacted
history) relists, any other failure reconnects and resumes from the last resourceVersion seen. Both go
through one capped exponential backoff with jitter per resource, reset only once a watch has stayed
healthy for ``healthy_after`` seconds, so an outage or a 410 loop costs a few LISTs, not one per
half-second. A 429 of the server's flow control (APF) waits at least its Retry-After, jittered
(``flowcontrol.py``). With ``watch_list`` (auto/on) the LIST is replaced by a streaming list (WatchList: a
watch with ``sendInitialEvents``) where the server offers it: its initial events fill a fresh store that
replaces the old one at the ``initial-events-end`` bookmark; a refusal (400/422) falls back to LIST for
good under auto.

Staleness: each watch asks the server to end it after ``watch_timeout`` seconds (10 min by default,
jittered, like client-go's informers) and reads with a timeout of that plus ``read_grace``. A quiet watch
says nothing in between: kube-apiserver 1.35 sent the first bookmark on a quiet watch only after about
two minutes, not shortly before the timeout. So silence alone cannot tell a quiet resource from a
connection that went silent without closing (a dropped NAT or load-balancer entry), and ``ages()`` says
how long ago each resource last heard from the server. Freshness is proven lazily, only when a cycle is
about to act: ``refresh`` re-opens the named watches from their resourceVersion (no LIST; the server
replays what changed since) and waits, bounded, for the server to answer; a resource that does not is
named, and the caller does not act. ``broken_after`` is the age past which a watch is not quiet but
broken (it should have ended and been re-opened by then). An idle cluster thus costs one watch re-open
per resource per ``watch_timeout``, not per cycle.

Only parsed snapshot values are kept (``descheduler.cluster.types``), so a cycle reads memory and sends no
request. LIST pages and watch events of nodes, pods and workloads are decoded by ``fastparse`` (msgspec, into
slim structs) and what it does not reproduce exactly by ``json.loads`` and ``parse.py``, the definition of
every value. With ``encoding="protobuf"`` pods and nodes are asked for in protobuf (far cheaper for the server
to encode) and read into the same structs by ``protoparse``; a page it does not reproduce is asked for again
in JSON, a watch event it does not reproduce relists in JSON. Objects that fail to parse are not guessed at:
they are left out, named in ``object_errors``, and a node hosting such a pod is listed in
``nodes_with_unparsed_pods`` so the caller can leave it alone. A node kept with a fallback (Koordinator's
raw-allocatable annotation unreadable: its ``status.allocatable`` is used) is logged once and named in
``object_warnings``. Parsing an object is bounded in time by its size (``parse.py`` checks lengths and ranges
before converting), so no object can hold a reflector thread, and with it the GIL, ``/healthz`` and shutdown.
"""

from __future__ import annotations

import gc
import hashlib
import random
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar, cast

import structlog

from descheduler.cluster.build import parser_of
from descheduler.cluster.fastparse import (
    FAST_KINDS,
    FastKind,
    Unhandled,
    exact_item,
    key_of,
    resource_version_of,
)
from descheduler.cluster.parse import ObjectError, show
from descheduler.cluster.protoparse import MAGIC, PROTO_KINDS, ProtoKind, error_event_status
from descheduler.cluster.types import (
    ClusterSnapshot,
    OwnerRef,
    Pod,
)
from descheduler.kube.api import (
    PROTOBUF_ACCEPT,
    PROTOBUF_WATCH_ACCEPT,
    KubeApi,
    WatchStream,
    decode_json,
)
from descheduler.kube.errors import ApiStatusError, DecodeError, KubeError
from descheduler.kube.flowcontrol import retry_wait

log = structlog.get_logger("descheduler.kube.cache")
_T = TypeVar("_T")
Obj = Mapping[str, Any]
TERMINAL_PHASE_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class ResourceSpec:
    name: str
    path: str
    kind: str
    namespaced: bool
    parse: Callable[[Obj], Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parse", parser_of(self.kind))


RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("nodes", "/api/v1/nodes", "Node", False),
    ResourceSpec("pods", "/api/v1/pods", "Pod", True),
    ResourceSpec("poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets", "PodDisruptionBudget", True),
    ResourceSpec("replicasets", "/apis/apps/v1/replicasets", "ReplicaSet", True),
    ResourceSpec("deployments", "/apis/apps/v1/deployments", "Deployment", True),
    ResourceSpec("statefulsets", "/apis/apps/v1/statefulsets", "StatefulSet", True),
    ResourceSpec("replicationcontrollers", "/api/v1/replicationcontrollers", "ReplicationController", True),
    ResourceSpec("namespaces", "/api/v1/namespaces", "Namespace", False),
    ResourceSpec("resourceslices", "/apis/resource.k8s.io/v1/resourceslices", "ResourceSlice", False),
    ResourceSpec("resourceclaims", "/apis/resource.k8s.io/v1/resourceclaims", "ResourceClaim", True),
    ResourceSpec("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses", "DeviceClass", False),
)
"""What the cache can watch; RBAC needs list+watch on each one watched."""
DEFAULT_WATCH_TIMEOUT = 600.0
"""``timeoutSeconds`` asked for each watch (before jitter): 10-12.5 min, the top of client-go's 5-10 min,
so 8 resources re-open 0.7 watches per idle 60 s cycle. A silent connection is not waited for:
``refresh`` proves freshness before a cycle acts."""
WATCH_LIST_MODES = ("auto", "on", "off")
"""``watchCache.watchList``: sync by WatchList when the server offers it (auto), always (on), or never."""
ENCODINGS = ("json", "protobuf")
"""``watchCache.encoding``: what pods and nodes are asked for in. Protobuf costs the API server a third of
the CPU of JSON (issue 40) and us more (a pure-Python reader, ``cluster/protoparse.py``)."""
WATCH_LIST_REFUSALS = frozenset({400, 422})
"""What a server without WatchList answers a watch with ``sendInitialEvents`` (1.35, gate off: 422)."""
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_LIST_UNFINISHED_LIMIT = 3
"""Initial streams in a row without the bookmark after which ``auto`` LISTs (a server before 1.27)."""
DEFAULT_READ_GRACE = 5.0
"""How much longer than the watch's own timeout the client waits for a byte before giving up on it."""
REFRESH_TIMEOUT = 5.0
"""How long ``refresh`` waits for the re-opened watches' answers (a healthy server answers in ms)."""
DRA_RESOURCES = frozenset({"resourceslices", "resourceclaims", "deviceclasses"})
"""Dynamic Resource Allocation (resource.k8s.io/v1): watched only with ``evictResourceClaimPods``, the one
setting under which a device-holding pod may move (its destination needs a free matching device). A
cluster without the v1 API (before Kubernetes 1.34) cannot list them: the cache then never syncs, and
the stalled resources are named."""
DEFAULT_RESOURCES = frozenset(spec.name for spec in RESOURCES) - DRA_RESOURCES
API_ABSENT_RETRY = 60.0
"""Seconds between LISTs of a DRA kind the server answered 404 for."""
"""Watched unless ``resources`` says otherwise; namespaces for their pause annotation (list and watch
only, as the shipped RBAC grants)."""


_SNAPSHOT_PARTS = (
    "nodes",
    "pods",
    "poddisruptionbudgets",
    "replicasets",
    "deployments",
    "statefulsets",
    "replicationcontrollers",
    "namespaces",
    "resourceslices",
    "resourceclaims",
    "deviceclasses",
)


class _Unfinished(KubeError):
    """A WatchList stream that ended or stalled before its ``initial-events-end`` bookmark."""


class _Expired(Exception):
    """The resourceVersion we hold is compacted away: relist."""


def _drop(key: str | None, items: dict[str, Any], errors: dict[str, str], bad: dict[str, str]) -> None:
    """An object deleted while a new store fills: gone from it, its parse error and its node's mark too."""
    if key is not None:
        items.pop(key, None)
        errors.pop(key, None)
        bad.pop(key, None)


class _ProtoFallback(Exception):
    """A protobuf watch event the reader or the fast path does not reproduce: relist in JSON."""


STATS = (
    "lists",
    "relists",
    "watches",
    "events",
    "bookmarks",
    "errors",
    "fallbacks",
    "watch_lists",
    "protobuf_pages",
    "protobuf_events",
    "proto_pages_as_json",
    "proto_relists",
)
"""A reflector's counters (``ClusterCache.stats``); the protobuf ones say what was read in protobuf and
what fell back to JSON."""
WATCH_JITTER = 0.25
"""Each watch asks for ``watch_timeout * (1 + U(0, WATCH_JITTER))`` so replicas do not reconnect in step."""


def quiet_limit(watch_timeout: float) -> float:
    """The longest a healthy watch goes without a word: until the server ends it (jittered timeout,
    rounded down) and it is re-opened."""
    return watch_timeout * (1 + WATCH_JITTER)


def broken_after(max_staleness: float, watch_timeout: float, read_grace: float = DEFAULT_READ_GRACE) -> float:
    """The age past which a resource is not quiet but cut off (nothing is decided, /readyz says it).

    With watches shorter than ``max_staleness`` a healthy one is always heard from within it, so older is
    broken, as before; with longer watches a quiet resource may be older than ``max_staleness`` (it is
    refreshed before acting), and only one not re-opened within its timeout plus the read grace is broken."""
    quiet = quiet_limit(watch_timeout)
    return max_staleness if max_staleness > quiet else quiet + read_grace


@dataclass
class Backoff:
    """Capped exponential backoff with jitter, reset only by a watch that stayed healthy long enough.

    ``failed()`` returns how long to wait before the next attempt (LIST or WATCH) and doubles the next
    one; ``ran(seconds)`` reports how long a watch worked before it ended or broke.
    """

    initial: float
    maximum: float
    healthy_after: float
    rand: Callable[[], float] = random.random
    current: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.initial

    def ran(self, seconds: float) -> None:
        if seconds >= self.healthy_after:
            self.current = self.initial

    def failed(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.maximum)
        return delay * (0.8 + 0.4 * self.rand())


def failure_delay(backoff: Backoff, exc: BaseException) -> float:
    """The wait before trying again: the backoff's, and after the server's 429 (flow control) at least its
    Retry-After, jittered, so a level that rejects us is not asked again before it said it could take it."""
    delay = backoff.failed()
    if isinstance(exc, ApiStatusError) and exc.status == 429:
        delay = max(delay, retry_wait(exc.retry_after))
    return delay


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_ABSENT = object()


class Interner:
    """Share equal strings, maps, owner references, toleration tuples and requests between pods.

    Most pods of a workload carry the same labels, requests and owner; sharing them (and interning the
    few strings every pod repeats) roughly halves the memory a parsed pod needs. Bounded: when a table
    reaches ``limit`` entries it starts afresh (maps already shared stay with their pods), so values of
    pods long gone (old ``pod-template-hash`` labels, deleted owners) are not kept forever.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self._maps: dict[frozenset[tuple[str, Any]], Mapping[str, Any]] = {}
        self._owners: dict[OwnerRef, OwnerRef] = {}
        self._values: dict[Hashable, Any] = {}
        self._limit = limit

    def share(self, value: Mapping[str, Any]) -> Mapping[str, Any]:
        if not value:
            return _EMPTY
        key = frozenset(value.items())
        shared = self._maps.get(key)
        if shared is None:
            shared = {sys.intern(k): sys.intern(v) if isinstance(v, str) else v for k, v in value.items()}
            if len(self._maps) >= self._limit:
                self._maps.clear()
            self._maps[key] = shared
        return shared

    def text(self, value: str) -> str:
        return sys.intern(value)

    def size(self) -> int:
        """Entries in every table: bounded by ``3 * limit`` (a soak checks it does not grow)."""
        return len(self._maps) + len(self._owners) + len(self._values)

    def shared(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """The value built for an equal ``key`` before: the pods of a workload share their toleration
        tuple and requests (computed once per distinct resource text, ``fastparse``)."""
        found = self._values.get(key)
        if found is None:
            found = build()
            if len(self._values) >= self._limit:
                self._values.clear()
            self._values[key] = found
        return cast(_T, found)

    def owner(self, owner: OwnerRef | None) -> OwnerRef | None:
        if owner is None:
            return None
        shared = self._owners.get(owner)
        if shared is None:
            shared = OwnerRef(sys.intern(owner.kind), owner.name, owner.uid, sys.intern(owner.api_version))
            if len(self._owners) >= self._limit:
                self._owners.clear()
            self._owners[shared] = shared
        return shared

    def pod(self, pod: Pod) -> Pod:
        return replace(
            pod,
            namespace=sys.intern(pod.namespace),
            node_name=sys.intern(pod.node_name),
            labels=self.share(pod.labels),
            annotations=self.share(pod.annotations),
            phase=sys.intern(pod.phase),
            priority_class_name=sys.intern(pod.priority_class_name),
            qos_class=sys.intern(pod.qos_class),
            requests=self.share(pod.requests),
            owner=self.owner(pod.owner),
            node_selector=self.share(pod.node_selector),
            scheduler_name=sys.intern(pod.scheduler_name),
        )


def identity_of(value: Any) -> tuple[str, ...]:
    """What the digest records of a cached object besides its key: its UID where the parsed type keeps
    one, and for a pod where it runs and in which state."""
    uid = str(getattr(value, "uid", ""))
    if isinstance(value, Pod):
        return (uid, value.node_name, value.phase, "terminating" if value.terminating else "")
    return (uid,)


def digest_rows(rows: Iterable[tuple[str, ...]]) -> str:
    """An order-independent SHA-256 of the rows (sorted first), as hex."""
    sha = hashlib.sha256()
    for row in sorted(rows):
        sha.update("\x1f".join(row).encode())
        sha.update(b"\x1e")
    return sha.hexdigest()


class _Reflector:
    """Keeps one resource's parsed objects current. All state changes happen under ``lock``."""

    def __init__(
        self,
        api: KubeApi,
        spec: ResourceSpec,
        *,
        label_selector: str | None,
        field_selector: str | None,
        page_size: int,
        watch_timeout: float,
        read_grace: float,
        backoff: Backoff,
        stop: threading.Event,
        interner: Interner,
        wall_clock: Callable[[], float],
        fast: bool = True,
        watch_list: str = "off",
        encoding: str = "json",
    ) -> None:
        self.api = api
        self.watch_list = watch_list
        """auto|on|off: sync by a watch with ``sendInitialEvents`` (WatchList) instead of LIST."""
        self.watch_list_refused = False
        """The server refused WatchList for this resource (auto): LIST from now on, without asking again."""
        self._unfinished = 0
        """Initial streams in a row that ended or stalled before the ``initial-events-end`` bookmark."""
        self.spec = spec
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.read_grace = read_grace
        self.backoff = backoff
        self.stop = stop
        self.interner = interner
        self.wall_clock = wall_clock
        self.lock = threading.Lock()
        self.items: dict[str, Any] = {}
        self._sorted: tuple[Any, ...] | None = None
        """``values()`` in key order, kept until the next change: an unchanged cycle's snapshot is free."""
        self._keys: list[str] | None = None
        """``items``' keys in order, and ``_ordered`` their values: updated from ``_dirty`` (the keys
        changed since), so a snapshot after a few watch events costs a few bisections, not a sort."""
        self._ordered: list[Any] = []
        self._dirty: set[str] = set()
        self.errors: dict[str, str] = {}
        self.bad_pod_nodes: dict[str, str] = {}
        self.warned: dict[str, str] = {}
        """The fallback each kept object was last logged with (so it is logged once, not per event)."""
        self.resource_version = ""
        self.synced = threading.Event()
        self.last_heard = 0.0
        self.progress = time.monotonic()
        """Monotonic time of the last sign that the first LIST is moving: the start, or a page received."""
        self.stats = dict.fromkeys(STATS, 0)
        self.fast: FastKind | None = FAST_KINDS.get(spec.kind) if fast else None
        """Decodes this kind's pages and events into slim structs (``fastparse``); None: ``parse.py`` only."""
        self.proto: ProtoKind | None = PROTO_KINDS.get(spec.kind) if encoding == "protobuf" and fast else None
        """Reads this kind's protobuf into the same structs (``protoparse``); None: JSON only."""
        self.json_fallback = False
        """A protobuf watch event was not reproduced: JSON (sync and watch) until the next ordinary relist."""
        self._stream: WatchStream | None = None
        self.resync_requested = threading.Event()
        """Set by ``resync``: the next turn of the loop LISTs again."""
        self.reopen_requested = threading.Event()
        """Set by ``reopen``: the watch ends and is opened again at once from its resourceVersion."""
        self._watch_opened: float | None = None
        """Monotonic time the current watch was opened (None while none is open)."""
        self.thread = threading.Thread(target=self._run, name=f"reflector-{spec.name}", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------------
    def close_stream(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.close()

    def resync(self) -> None:
        """The server disagreed with this resource's objects: drop the watch (it may be silently stalled)
        and LIST again, so the next cycle decides on what the server holds."""
        self.resync_requested.set()
        self.close_stream()

    def reopen(self) -> None:
        """Prove the server still answers: end the current watch (silently stalled or merely quiet) and
        open it again from the resourceVersion held; its answer sets ``last_heard``."""
        self.reopen_requested.set()
        self.close_stream()

    def _run(self) -> None:
        need_list = True
        while not self.stop.is_set():
            try:
                self.reopen_requested.clear()
                if self.resync_requested.is_set():
                    self.resync_requested.clear()
                    self.stats["relists"] += 1
                    self.json_fallback = False
                    need_list = True
                if need_list:
                    self._sync()
                    need_list = False
                received = self._watch()
                if self.stop.is_set():
                    return
                ran = self._ran()
                if received == 0 and ran < 1.0 and not self.reopen_requested.is_set():
                    # A watch that ends at once without a single event is a failure in disguise.
                    self.stop.wait(self.backoff.failed())
            except _Expired:
                need_list = self._relist_after("watch_expired_relisting")
            except _ProtoFallback as exc:
                need_list = self._relist_in_json(str(exc))
            except ApiStatusError as exc:
                if exc.status == 410:
                    need_list = self._relist_after("watch_gone_relisting")
                elif exc.status == 404 and self.spec.name in DRA_RESOURCES:
                    need_list = self._api_absent(exc)
                else:
                    self._failed(exc)
            except KubeError as exc:
                self._failed(exc)
            except Exception as exc:
                log.exception("reflector_crashed", resource=self.spec.name)
                self._failed(exc)

    def _ran(self) -> float:
        """How long the watch that just ended had been open; a long enough one resets the backoff."""
        opened, self._watch_opened = self._watch_opened, None
        ran = time.monotonic() - opened if opened is not None else 0.0
        self.backoff.ran(ran)
        return ran

    def _relist_after(self, event: str) -> bool:
        """A 410: relist, but through the backoff, so a compaction loop cannot become a LIST storm."""
        self._ran()
        self.stats["relists"] += 1
        self.json_fallback = False
        delay = self.backoff.failed()
        log.info(event, resource=self.spec.name, relist_in=round(delay, 2))
        self.stop.wait(delay)
        return True

    def _relist_in_json(self, why: str) -> bool:
        """A protobuf event not reproduced: the watch is closed; relist now, in JSON, which the exact
        parser can read whatever it holds, and watch in JSON until the next ordinary relist."""
        self._ran()
        self.json_fallback = True
        self.stats["relists"] += 1
        self.stats["proto_relists"] += 1
        log.warning(
            "protobuf_event_unhandled", resource=self.spec.name, reason=why, fallback="relist in json"
        )
        return True

    def _protobuf(self) -> ProtoKind | None:
        """The protobuf reader to use now (None: JSON)."""
        return None if self.json_fallback else self.proto

    def _api_absent(self, exc: ApiStatusError) -> bool:
        """The server does not serve this kind (a cluster before resource.k8s.io/v1): hold it empty and
        synced, so the cycles go on; a pod with claims then finds none and stays put. Asked again later,
        in case the API is switched on."""
        with self.lock:
            self.items, self._sorted, self._keys, self.errors = {}, None, None, {}
        if not self.synced.is_set():
            log.warning(
                "resource_api_absent",
                resource=self.spec.name,
                path=self.spec.path,
                error=str(exc),
                consequence=f"pods holding claims stay put; asked again every {API_ABSENT_RETRY:.0f} s",
            )
        self.synced.set()
        self.stats["errors"] += 1
        self.stop.wait(API_ABSENT_RETRY)
        return True

    def _failed(self, exc: BaseException) -> None:
        """Wait before trying again (the backoff grows unless the broken watch had stayed healthy)."""
        if self.stop.is_set():
            return
        self._ran()
        self.stats["errors"] += 1
        delay = failure_delay(self.backoff, exc)
        log.warning("watch_failed", resource=self.spec.name, error=str(exc), retry_in=round(delay, 2))
        self.stop.wait(delay)

    # -- sync: WatchList or LIST ----------------------------------------------------------------------
    def _sync(self) -> None:
        """Fill the store from scratch: by WatchList where asked and not refused, else by paginated LIST.
        A refusal (400/422: the feature gate off) under ``auto`` is remembered and logged once."""
        if self.watch_list == "off" or self.watch_list_refused:
            self._list()
            return
        try:
            self._watch_list()
            self._unfinished = 0
        except ApiStatusError as exc:
            if exc.status not in WATCH_LIST_REFUSALS or self.watch_list != "auto":
                raise
            self._refuse(f"HTTP {exc.status}: {exc}")
        except _Unfinished:
            # An old server ignores sendInitialEvents: it never sends the bookmark. Do not wait forever.
            self._unfinished += 1
            if self.watch_list != "auto" or self._unfinished < WATCH_LIST_UNFINISHED_LIMIT:
                raise
            self._refuse(f"{self._unfinished} streams in a row without the initial-events-end bookmark")

    def _refuse(self, why: str) -> None:
        """Remember that this resource syncs by LIST from now on, say so once, and LIST."""
        self.watch_list_refused = True
        log.warning("watch_list_refused", resource=self.spec.name, reason=why, fallback="list")
        self._list()

    def _watch_list(self) -> None:
        """Sync by a streaming list: the initial events go into a fresh store, which replaces the old one
        whole at the ``initial-events-end`` bookmark (so objects deleted meanwhile disappear, as after a
        LIST). The stream is read with ``read_grace`` as its timeout: one that stalls before the bookmark
        fails here and the resource stays unsynced. The stream is closed at the bookmark; the ordinary
        watch goes on from its resourceVersion."""
        timeout = max(1, int(self.watch_timeout))
        query = {
            **self._selectors(),
            "sendInitialEvents": True,
            "resourceVersionMatch": "NotOlderThan",
            "resourceVersion": "",
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout,
        }
        proto = self._protobuf()
        accept = PROTOBUF_WATCH_ACCEPT if proto is not None else "application/json"
        stream = self.api.watch(self.spec.path, query, read_timeout=self.read_grace, accept=accept)
        self._stream = stream
        reader = proto if proto is not None and stream.protobuf else None
        items: dict[str, Any] = {}
        errors: dict[str, str] = {}
        bad_nodes: dict[str, str] = {}
        end: str | None = None
        try:
            for received, payload in self._numbered(stream, reader is not None):
                if self.stop.is_set() or self.resync_requested.is_set():
                    break
                end = self._initial_event(stream, payload, reader, items, errors, bad_nodes)
                self.last_heard = self.wall_clock()
                self.progress = time.monotonic()
                if received % 500 == 0:
                    gc.freeze()  # as after each LIST page: cached objects leave the collector's generations
                if end is not None:
                    break
        finally:
            self._stream = None
            stream.close()
        if end is None:
            if self.stop.is_set() or self.resync_requested.is_set():
                return
            raise _Unfinished(f"watch list {self.spec.path}: stream ended before initial-events-end")
        gc.freeze()
        with self.lock:
            self.items, self.errors, self.bad_pod_nodes = items, errors, bad_nodes
            self._sorted = None
            self._keys = None
            self.resource_version = end
        self.stats["watch_lists"] += 1
        self.synced.set()
        log.info("listed", resource=self.spec.name, objects=len(items), via="watchlist", errors=len(errors))

    def _numbered(self, stream: WatchStream, frames: bool) -> Iterator[tuple[int, bytes]]:
        """The stream's events (protobuf frames or JSON lines), numbered; a read that fails (a stall past
        ``read_grace``) is unfinished."""
        try:
            yield from enumerate(stream.frames() if frames else stream.lines(), 1)
        except ApiStatusError:
            raise
        except KubeError as exc:
            raise _Unfinished(f"watch list {self.spec.path}: {exc}") from exc

    def _initial_event(
        self,
        stream: WatchStream,
        line: bytes,
        reader: ProtoKind | None,
        items: dict[str, Any],
        errors: dict[str, str],
        bad: dict[str, str],
    ) -> str | None:
        """Apply one event of the initial stream to the new store; the resourceVersion of the
        ``initial-events-end`` bookmark when this is it, else None. With ``reader`` the event is a protobuf
        frame (``_initial_struct``)."""
        if reader is not None:
            return self._initial_struct(*self._frame_event(reader, line), items, errors, bad)
        decoded = self.fast.decode_event(line) if self.fast is not None else None
        if decoded is not None and decoded[0] in ("ADDED", "MODIFIED"):
            converted = self._convert(decoded[1])
            if converted is not None:
                self._put(*converted, items, errors, bad)
                return None
        event = self._decode(stream, line)
        obj = event.get("object") if isinstance(event, Mapping) else None
        kind = event.get("type") if isinstance(event, Mapping) else None
        if kind == "ERROR" or not isinstance(obj, dict):
            self._apply(event)  # raises: a watch error (410 relists) or an event without an object
            return None
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        if kind == "BOOKMARK":
            self.stats["bookmarks"] += 1
            annotations = meta.get("annotations")
            if isinstance(annotations, Mapping) and annotations.get(INITIAL_EVENTS_END) == "true":
                return str(meta.get("resourceVersion") or "")
            return None
        self.stats["events"] += 1
        if kind == "DELETED":
            _drop(self._key(obj), items, errors, bad)
        elif kind in ("ADDED", "MODIFIED"):
            obj.setdefault("kind", self.spec.kind)
            self._store(obj, items, errors, bad)
        return None

    def _initial_struct(
        self, kind: str, obj: Any, items: dict[str, Any], errors: dict[str, str], bad: dict[str, str]
    ) -> str | None:
        """``_initial_event`` for a protobuf frame's event; one not reproduced ends the stream
        (``_ProtoFallback``: the resource is listed again in JSON)."""
        if kind == "BOOKMARK":
            self.stats["bookmarks"] += 1
            annotations = obj.metadata.annotations if obj.metadata is not None else None
            if annotations and annotations.get(INITIAL_EVENTS_END) == "true":
                return resource_version_of(obj)
            return None
        if kind == "DELETED":
            self.stats["events"] += 1
            _drop(key_of(obj, self.spec.namespaced), items, errors, bad)
            return None
        converted = self._convert(obj)
        if converted is None:
            raise _ProtoFallback(f"an initial {kind} event the fast path does not reproduce")
        self._put(*converted, items, errors, bad)
        return None

    def _frame_event(self, reader: ProtoKind, frame: bytes) -> tuple[str, Any]:
        """(type, struct) of a protobuf watch frame. An ERROR event raises as in JSON (410: relist); any
        other frame the reader does not reproduce raises ``_ProtoFallback``."""
        self.stats["protobuf_events"] += 1
        try:
            return reader.decode_event(frame)
        except Unhandled as exc:
            status = error_event_status(frame)
            if status is not None:
                self._apply({"type": "ERROR", "object": status})  # raises
            raise _ProtoFallback(str(exc)) from None

    # -- list ---------------------------------------------------------------------------------------
    def _selectors(self) -> dict[str, str | None]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    def _list(self) -> None:
        for attempt in range(3):
            try:
                self._list_once(paginate=attempt < 2)
                return
            except ApiStatusError as exc:
                # 410 in the middle of pagination: the continue token outlived its snapshot. Start again.
                if exc.status != 410 or self.stop.is_set():
                    raise
                log.info("list_continue_expired", resource=self.spec.name, attempt=attempt + 1)
        raise KubeError(f"list {self.spec.path}: continue token kept expiring")

    def _list_once(self, *, paginate: bool) -> None:
        items: dict[str, Any] = {}
        errors: dict[str, str] = {}
        bad_nodes: dict[str, str] = {}
        token: str | None = None
        pages = 0
        while True:
            query: dict[str, Any] = {
                **self._selectors(),
                "limit": self.page_size if paginate else None,
                "continue": token,
            }
            proto = self._protobuf()
            accept = PROTOBUF_ACCEPT if proto is not None else "application/json"
            body = self.api.request_bytes("GET", self.spec.path, query=query, accept=accept)
            pages += 1
            if proto is not None and body.startswith(MAGIC):
                self.stats["protobuf_pages"] += 1
                token, page_version = self._proto_page(proto, body, query, items, errors, bad_nodes)
            else:
                token, page_version = self._json_page(body, items, errors, bad_nodes)
            # The parsed objects live as long as the cache: move them out of the collector's generations, or
            # each page's allocations trigger full collections that rescan every object cached so far (this
            # was 40% of sync CPU at 150,000 pods). Cached values are acyclic, so nothing leaks.
            gc.freeze()
            self.last_heard = self.wall_clock()
            self.progress = time.monotonic()
            if not token:
                resource_version = page_version
                break
            if self.stop.is_set():
                return
        with self.lock:
            self.items = items
            self._sorted = None
            self._keys = None
            self.errors = errors
            self.bad_pod_nodes = bad_nodes
            self.resource_version = resource_version
        self.stats["lists"] += 1
        self.synced.set()
        log.info("listed", resource=self.spec.name, objects=len(items), pages=pages, errors=len(errors))

    def _json_page(
        self, body: bytes, items: dict[str, Any], errors: dict[str, str], bad_nodes: dict[str, str]
    ) -> tuple[str | None, str]:
        """A JSON page by the fast path where it decodes, else the exact one. (continue token, version)"""
        fast = self.fast.decode_page(body) if self.fast is not None and body else None
        if fast is None:
            return self._store_page(body, items, errors, bad_nodes)
        structs, token, page_version = fast
        self._store_fast(structs, body, items, errors, bad_nodes)
        return token or None, page_version

    def _proto_page(
        self,
        reader: ProtoKind,
        body: bytes,
        query: Mapping[str, Any],
        items: dict[str, Any],
        errors: dict[str, str],
        bad_nodes: dict[str, str],
    ) -> tuple[str | None, str]:
        """A protobuf page, stored only if every object is reproduced; else the page is asked for again
        in JSON (the same continue token: the same snapshot) and read as before. (continue token, version)"""
        try:
            structs, token, page_version = reader.decode_page(body)
        except Unhandled as exc:
            why = str(exc)
        else:
            converted = [self._convert(obj) for obj in structs]
            if all(c is not None for c in converted):
                for key, value in cast(list[tuple[str, Any]], converted):
                    self._put(key, value, items, errors, bad_nodes)
                return token or None, page_version
            why = "an object the fast path does not reproduce"
        self.stats["proto_pages_as_json"] += 1
        log.info("protobuf_page_as_json", resource=self.spec.name, reason=why)
        body = self.api.request_bytes("GET", self.spec.path, query=query)
        return self._json_page(body, items, errors, bad_nodes)

    def _put(
        self, key: str, value: Any, items: dict[str, Any], errors: dict[str, str], bad_nodes: dict[str, str]
    ) -> None:
        items[key] = value
        if self.warned:
            self.warned.pop(key, None)
        if errors:
            errors.pop(key, None)
            bad_nodes.pop(key, None)

    def _store_page(
        self, body: bytes, items: dict[str, Any], errors: dict[str, str], bad_nodes: dict[str, str]
    ) -> tuple[str | None, str]:
        """The exact path: ``json.loads`` and ``parse.py`` for every item. (continue token, version)"""
        page = decode_json("GET", self.spec.path, body) if body else None
        if not isinstance(page, Mapping) or not isinstance(page.get("items"), list):
            raise KubeError(f"list {self.spec.path}: answer has no items list")
        for obj in page["items"]:
            self._store(exact_item(obj, self.spec.kind), items, errors, bad_nodes)
        meta = page.get("metadata") or {}
        return meta.get("continue") or None, str(meta.get("resourceVersion") or "")

    def _store_fast(
        self,
        structs: list[Any],
        body: bytes,
        items: dict[str, Any],
        errors: dict[str, str],
        bad_nodes: dict[str, str],
    ) -> None:
        """The fast path (``fastparse``); an item it does not reproduce exactly takes the exact path,
        from the page decoded again by ``json.loads`` (once, and only for such a page)."""
        assert self.fast is not None
        raw: list[Any] | None = None
        for i, obj in enumerate(structs):
            value = self._convert(obj)
            if value is None:
                if raw is None:
                    raw = decode_json("GET", self.spec.path, body)["items"]
                self._store(exact_item(raw[i], self.spec.kind), items, errors, bad_nodes)
                continue
            self._put(*value, items, errors, bad_nodes)

    def _convert(self, obj: Any) -> tuple[str, Any] | None:
        """(key, value) by the fast path, or None: the exact parser must see this object."""
        assert self.fast is not None
        key = key_of(obj, self.spec.namespaced)
        if key is None:
            return None
        value = self.fast.try_convert(obj, self.interner)
        if value is None:
            self.stats["fallbacks"] += 1
            return None
        return key, value

    # -- watch ------------------------------------------------------------------------------------------
    def _watch(self) -> int:
        timeout = max(1, int(self.watch_timeout * (1 + WATCH_JITTER * random.random())))
        query = {
            **self._selectors(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout,
        }
        # The server ends the watch after ``timeout`` (a quiet one may hear nothing before): silence for
        # longer than that plus a little grace is a dead connection, not a quiet resource.
        proto = self._protobuf()
        accept = PROTOBUF_WATCH_ACCEPT if proto is not None else "application/json"
        stream = self.api.watch(self.spec.path, query, read_timeout=timeout + self.read_grace, accept=accept)
        self._stream = stream
        if self.stop.is_set():  # stop() ran before it could see this stream: close it ourselves
            self._stream = None
            stream.close()
            return 0
        self._watch_opened = time.monotonic()
        self.stats["watches"] += 1
        self.last_heard = self.wall_clock()
        received = 0
        reader = proto if proto is not None and stream.protobuf else None
        try:
            for payload in stream.frames() if reader is not None else stream.lines():
                if self.stop.is_set() or self.resync_requested.is_set() or self.reopen_requested.is_set():
                    break
                if reader is not None:
                    if not self._apply_struct(*self._frame_event(reader, payload)):
                        raise _ProtoFallback("a watch event the fast path does not reproduce")
                elif not self._apply_fast(payload):
                    self._apply(self._decode(stream, payload))
                received += 1
        finally:
            self._stream = None
            stream.close()
        if not (self.stop.is_set() or self.resync_requested.is_set() or self.reopen_requested.is_set()):
            self.last_heard = self.wall_clock()  # the server ended it: heard from
        return received

    def _decode(self, stream: WatchStream, line: bytes) -> Any:
        """The exact decoder's event; a document nested past the interpreter's limit is a broken watch
        (reconnect with backoff), not a crash of the reflector."""
        try:
            return stream.decode(line)
        except RecursionError:
            raise DecodeError(f"watch {self.spec.path}: event nested too deeply to decode") from None

    def _apply_fast(self, line: bytes) -> bool:
        """Apply an ADDED, MODIFIED, DELETED or BOOKMARK event by the fast path; False (nothing done)
        when the exact path (``_apply`` on the line's ``json.loads``) must take it."""
        fast = self.fast
        decoded = fast.decode_event(line) if fast is not None else None
        if decoded is None:
            return False
        return self._apply_struct(*decoded)

    def _apply_struct(self, kind: str, obj: Any) -> bool:
        """Apply a decoded event (a slim struct, from JSON or protobuf); False (nothing done) when the fast
        path does not reproduce its object."""
        resource_version = resource_version_of(obj)
        if kind == "BOOKMARK":
            self.last_heard = self.wall_clock()
            self.stats["bookmarks"] += 1
            if resource_version:
                with self.lock:
                    self.resource_version = resource_version
            return True
        converted: tuple[str, Any] | None = None
        if kind == "DELETED":
            key = key_of(obj, self.spec.namespaced)
        else:
            converted = self._convert(obj)
            if converted is None:
                return False
            key = converted[0]
        self.last_heard = self.wall_clock()
        self.stats["events"] += 1
        with self.lock:
            self._sorted = None
            if key is not None:
                self._dirty.add(key)
                if converted is None:
                    self.items.pop(key, None)
                else:
                    self.items[key] = converted[1]
                self.errors.pop(key, None)
                self.bad_pod_nodes.pop(key, None)
                if self.warned:
                    self.warned.pop(key, None)
            if resource_version:
                self.resource_version = resource_version
        return True

    def _apply(self, event: Any) -> None:
        obj = event.get("object") if isinstance(event, Mapping) else None
        if not isinstance(obj, dict):
            raise KubeError(f"watch {self.spec.path}: an event without an object: {show(event)}")
        kind = event.get("type")
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise _Expired()
            raise ApiStatusError(
                int(code or 500),
                str(obj.get("message") or "watch error"),
                reason=str(obj.get("reason") or ""),
                body=obj,
            )
        meta = obj.get("metadata")
        resource_version = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
        self.last_heard = self.wall_clock()
        if kind == "BOOKMARK":
            self.stats["bookmarks"] += 1
            if resource_version:
                with self.lock:
                    self.resource_version = resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("watch_unknown_event", resource=self.spec.name, type=kind)
            return
        obj.setdefault("kind", self.spec.kind)
        self.stats["events"] += 1
        with self.lock:
            self._sorted = None
            if kind == "DELETED":
                key = self._key(obj)
                if key is not None:
                    self.items.pop(key, None)
                    self.errors.pop(key, None)
                    self.bad_pod_nodes.pop(key, None)
                    self.warned.pop(key, None)
            else:
                key = self._store(obj, self.items, self.errors, self.bad_pod_nodes)
            if key is not None:
                self._dirty.add(key)
            if resource_version:
                self.resource_version = resource_version

    def _key(self, obj: Mapping[str, Any]) -> str | None:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            return None
        if self.spec.namespaced:
            return f"{meta.get('namespace') or 'default'}/{meta['name']}"
        return str(meta["name"])

    def _store(
        self, obj: Any, items: dict[str, Any], errors: dict[str, str], bad_nodes: dict[str, str]
    ) -> str | None:
        """Parse ``obj`` into ``items`` (or its error into ``errors``); the key it has, if any."""
        if not isinstance(obj, Mapping):
            errors[f"<{self.spec.kind} #{len(errors)}>"] = f"{self.spec.kind}: object is not a JSON object"
            return None
        key = self._key(obj)
        if key is None:
            errors[f"<{self.spec.kind} #{len(errors)}>"] = f"{self.spec.kind}: metadata.name is required"
            return None
        try:
            value = self.spec.parse(obj)
        except (ObjectError, ValueError, TypeError, AttributeError, RecursionError) as exc:
            items.pop(key, None)
            message = str(exc) if isinstance(exc, ObjectError) else f"{self.spec.kind} {key}: {exc}"
            if errors.get(key) != message:
                log.warning("object_rejected", resource=self.spec.name, object=key, error=message)
            errors[key] = message
            if self.spec.kind == "Pod":
                spec = obj.get("spec")
                node = spec.get("nodeName") if isinstance(spec, Mapping) else None
                if isinstance(node, str) and node:
                    bad_nodes[key] = node
            return key
        if isinstance(value, Pod):
            value = self.interner.pod(value)
        self._warn(key, getattr(value, "warnings", ()))
        items[key] = value
        errors.pop(key, None)
        bad_nodes.pop(key, None)
        return key

    def _warn(self, key: str, warnings: tuple[str, ...]) -> None:
        """Log an object's fallback the first time it is seen (and again only if it changes)."""
        if not warnings:
            if self.warned:
                self.warned.pop(key, None)
            return
        message = "; ".join(warnings)
        if self.warned.get(key) != message:
            log.warning("object_fallback", resource=self.spec.name, object=key, warning=message)
            self.warned[key] = message

    def values(self) -> tuple[Any, ...]:
        """The values in key order (the same tuple until something changes)."""
        with self.lock:
            if self._sorted is None:
                self._reorder()
                self._sorted = tuple(self._ordered)
            return self._sorted

    def _reorder(self) -> None:
        """Bring ``_keys``/``_ordered`` up to date: the changed keys one by one when they are few, else
        a sort of everything (after a LIST, or a burst of changes)."""
        items, keys, dirty = self.items, self._keys, self._dirty
        if keys is None or len(dirty) > max(64, len(items) // 16):
            self._keys = keys = sorted(items)
            self._ordered = [items[key] for key in keys]
            dirty.clear()
            return
        ordered = self._ordered
        for key in dirty:
            i = bisect_left(keys, key)
            present = i < len(keys) and keys[i] == key
            value = items.get(key, _ABSENT)
            if value is _ABSENT:
                if present:
                    del keys[i]
                    del ordered[i]
            elif present:
                ordered[i] = value
            else:
                keys.insert(i, key)
                ordered.insert(i, value)
        dirty.clear()


class ClusterCache:
    """Nodes, pods, PDBs, workloads and namespaces (and, when asked for, DRA's ResourceSlices,
    ResourceClaims and DeviceClasses), in memory. ``snapshot()`` never calls the API."""

    def __init__(
        self,
        api: KubeApi,
        *,
        node_selector: str | None = None,
        page_size: int = 500,
        include_terminal_pods: bool = False,
        resources: Collection[str] | None = None,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        read_grace: float = DEFAULT_READ_GRACE,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        healthy_after: float | None = None,
        wall_clock: Callable[[], float] = time.time,
        fast_decode: bool = True,
        watch_list: str = "off",
        encoding: str = "json",
    ) -> None:
        """``fast_decode=False`` decodes with ``json.loads`` and ``parse.py`` alone (benchmarks compare).
        ``encoding="protobuf"`` asks for pods and nodes in protobuf (not with ``fast_decode=False``)."""
        if page_size < 1:
            raise ValueError(f"page_size must be positive, got {page_size}")
        if watch_timeout < 1 or read_grace <= 0:
            raise ValueError(
                f"watch_timeout must be >= 1 and read_grace > 0 (got {watch_timeout}, {read_grace})"
            )
        if watch_list not in WATCH_LIST_MODES:
            raise ValueError(f"watch_list must be one of {', '.join(WATCH_LIST_MODES)}, got {watch_list!r}")
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
        healthy = healthy_after if healthy_after is not None else min(30.0, watch_timeout / 2)
        names = {spec.name for spec in RESOURCES}
        wanted = set(resources) if resources is not None else set(DEFAULT_RESOURCES)
        unknown = wanted - names
        if unknown:
            raise ValueError(f"unknown cache resources {sorted(unknown)}; known: {sorted(names)}")
        self.node_selector = node_selector or None
        self._stop = threading.Event()
        self._wall_clock = wall_clock
        self._started = False
        self._last_snapshot: tuple[tuple[tuple[Any, ...], ...], ClusterSnapshot] | None = None
        interner = Interner()
        self._interner = interner
        self._reflectors: dict[str, _Reflector] = {}
        for spec in RESOURCES:
            if spec.name not in wanted:
                continue
            self._reflectors[spec.name] = _Reflector(
                api,
                spec,
                label_selector=self.node_selector if spec.name == "nodes" else None,
                field_selector=None
                if spec.name != "pods" or include_terminal_pods
                else TERMINAL_PHASE_SELECTOR,
                page_size=page_size,
                watch_timeout=watch_timeout,
                read_grace=read_grace,
                backoff=Backoff(backoff_initial, backoff_max, healthy),
                stop=self._stop,
                interner=interner,
                wall_clock=wall_clock,
                fast=fast_decode,
                watch_list=watch_list,
                encoding=encoding,
            )

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for reflector in self._reflectors.values():
            reflector.progress = time.monotonic()
            reflector.thread.start()

    def resync(self, names: Iterable[str]) -> list[str]:
        """LIST ``names`` again (unknown or unwatched names are ignored); returns those resynced. Called
        when the server's objects disagreed with the cache before an eviction: a watch that silently
        stalled cannot know it, so the disagreement is the signal."""
        done = []
        for name in names:
            reflector = self._reflectors.get(name)
            if reflector is not None:
                reflector.resync()
                done.append(name)
        return done

    def refresh(self, names: Iterable[str], timeout: float = REFRESH_TIMEOUT) -> list[str]:
        """Re-open the watches of ``names`` (unknown or unwatched names are ignored) and wait up to
        ``timeout`` seconds for the server to answer each; returns those it did not answer (still stale).
        Called before a cycle acts on resources that have been quiet longer than it trusts. The answer
        proves the server reachable, as a watch's own re-open always did; what it missed is replayed right
        after, and what an eviction rests on is read from the server before it anyway (``verify.py``)."""
        asked, wanted = self._wall_clock(), set(names)
        waiting = [r for name, r in self._reflectors.items() if name in wanted]
        for reflector in waiting:
            reflector.reopen()
        deadline = time.monotonic() + timeout
        while waiting and not self._stop.is_set():
            waiting = [r for r in waiting if r.last_heard < asked]
            if not waiting or time.monotonic() >= deadline:
                break
            self._stop.wait(0.02)
        return [r.spec.name for r in waiting]

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for reflector in self._reflectors.values():
            reflector.close_stream()
        deadline = time.monotonic() + timeout
        for reflector in self._reflectors.values():
            if reflector.thread.is_alive():
                reflector.thread.join(max(0.0, deadline - time.monotonic()))

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for reflector in self._reflectors.values():
            if not reflector.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def wait_listed(self, stall: float, stop: threading.Event | None = None, poll: float = 0.5) -> list[str]:
        """Wait for the first LIST of every resource for as long as its pages keep arriving.

        A fixed deadline fails a big cluster whose API server serves pages slowly (150,000 pods took a busy
        kube-apiserver about 150 s) and the restart then repeats the whole LIST; waiting forever hides a
        resource that cannot be listed (Forbidden, server down). So give up only on a resource that has
        received no page for ``stall`` seconds. Returns the names of those resources: empty once every
        resource is listed, or when ``stop`` (default: the cache's own stop) is set first."""
        stop = stop if stop is not None else self._stop
        while not stop.is_set():
            if self.wait_synced(poll):
                return []
            now = time.monotonic()
            stalled = [
                name
                for name, r in self._reflectors.items()
                if not r.synced.is_set() and now - r.progress > stall
            ]
            if stalled:
                return stalled
        return []

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self._reflectors.values())

    def last_update_age(self, now: float) -> float:
        """Seconds since the stalest watched resource last heard from the API server (``now``: wall clock)."""
        return max(self.ages(now).values(), default=float("inf"))

    def ages(self, now: float) -> dict[str, float]:
        """Per watched resource, seconds since it last heard from the API server (inf before its list)."""
        return {
            name: max(0.0, now - r.last_heard) if r.last_heard else float("inf")
            for name, r in self._reflectors.items()
        }

    def _values(self, name: str) -> tuple[Any, ...]:
        reflector = self._reflectors.get(name)
        return reflector.values() if reflector is not None else ()

    def snapshot(self) -> ClusterSnapshot:
        """The cluster as last seen, from memory. With a node selector, only pods on selected nodes.

        The same object as last time when nothing changed, so what is derived from it (``ClusterIndex``)
        is reused."""
        parts = tuple(self._values(name) for name in _SNAPSHOT_PARTS)
        last = self._last_snapshot
        if last is not None and all(a is b for a, b in zip(last[0], parts, strict=True)):
            return last[1]
        (nodes, pods, pdbs, replicasets, deployments, statefulsets, controllers, namespaces) = parts[:8]
        slices, claims, classes = parts[8:]
        if self.node_selector is not None:
            names = {node.name for node in nodes}
            pods = tuple(pod for pod in pods if pod.node_name in names)
        snapshot = ClusterSnapshot(
            nodes=nodes,
            pods=pods,
            pdbs=pdbs,
            workloads=replicasets + deployments + statefulsets + controllers,
            namespaces=namespaces,
            resource_slices=slices,
            resource_claims=claims,
            device_classes=classes,
        )
        self._last_snapshot = (parts, snapshot)
        return snapshot

    @property
    def object_errors(self) -> dict[str, str]:
        """Objects left out because they could not be parsed: ``Kind ns/name`` -> why."""
        out: dict[str, str] = {}
        for reflector in self._reflectors.values():
            with reflector.lock:
                for key, message in reflector.errors.items():
                    out[f"{reflector.spec.kind} {key}"] = message
        return out

    @property
    def object_warnings(self) -> dict[str, str]:
        """Objects kept with a fallback: ``Kind name`` -> what was ignored (a node whose raw-allocatable
        annotation cannot be read uses its ``status.allocatable``)."""
        reflector = self._reflectors.get("nodes")
        if reflector is None:
            return {}
        return {f"Node {node.name}": "; ".join(node.warnings) for node in reflector.values() if node.warnings}

    @property
    def nodes_with_unparsed_pods(self) -> frozenset[str]:
        """Nodes whose pod list is incomplete: evicting from them would rest on untrusted data."""
        reflector = self._reflectors.get("pods")
        if reflector is None:
            return frozenset()
        with reflector.lock:
            return frozenset(reflector.bad_pod_nodes.values())

    def stats(self) -> dict[str, dict[str, int]]:
        """Per-resource counters: lists, relists, watches, events, bookmarks, errors."""
        return {name: dict(r.stats) for name, r in self._reflectors.items()}

    def digest(self) -> dict[str, dict[str, Any]]:
        """Per resource: how many objects the cache holds and a digest of what identifies them, for a
        check from outside that the cache equals a fresh LIST (``cache_digest`` computes the same from
        the LIST's JSON). Pods add the node, phase and terminating flag: what a missed update changes."""
        out: dict[str, dict[str, Any]] = {}
        for name, reflector in self._reflectors.items():
            with reflector.lock:
                values = list(reflector.items.items())
                version = reflector.resource_version
            rows = [(key, *identity_of(value)) for key, value in values]
            out[name] = {
                "count": len(rows),
                "digest": digest_rows(rows),
                "resourceVersion": version,
                **{k: v for k, v in reflector._selectors().items() if v},
            }
        out["interner"] = {"count": self._interner.size(), "digest": "", "resourceVersion": ""}
        return out

    def resource_version(self, resource: str) -> str:
        reflector = self._reflectors[resource]
        with reflector.lock:
            return reflector.resource_version
