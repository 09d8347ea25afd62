"""An in-process HTTP server that behaves like kube-apiserver for what the descheduler uses.

Why not ``kmock``: it is asyncio/aiohttp based, serves watches without resourceVersions, has no selectors,
pagination, bookmarks or 410 Gone, and its object model is a plain merge store; extending it would mean
replacing its core. This server uses the standard library only and runs in threads next to the client.

What it does (each like the real server, see the tests that run ``kubectl`` and the official client
models against it): discovery; LIST with label/field selectors, ``limit``/``continue`` consistent
pagination; WATCH from a resourceVersion with BOOKMARKs and 410 Gone; GET/POST/PUT/PATCH/DELETE with
resourceVersion conflicts and delete preconditions; server-side ``dryRun=All``; the policy/v1
``pods/eviction`` subresource enforcing PodDisruptionBudgets; events in both APIs; leases;
metrics.k8s.io. Every request is recorded (verb, resource, subresource, namespace) and faults can be
injected (latency, status codes, 429 with Retry-After, dropped connections, dropped watches, watches that
go silent without closing, and a request applied before its answer is replaced by a fault).
"""

from __future__ import annotations

import bisect
import builtins
import json
import random
import select
import socket
import string
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.apiserver import convert, errors, store
from tests.apiserver.errors import ApiError
from tests.apiserver.resources import RESOURCES, ResourceType, by_kind, by_plural, find, groups
from tests.apiserver.selectors import (
    SelectorError,
    compile_field_selector,
    labels_match,
    parse_label_selector,
    selector_object_matches,
)

Obj = dict[str, Any]
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}
MAX_DISRUPTED_POD_SIZE = 2000
PDB_TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class RecordedRequest:
    """One request as kube-apiserver's RequestInfo (and so RBAC and audit) would classify it."""

    method: str
    path: str
    query: dict[str, str]
    verb: str
    is_resource: bool
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    user_agent: str = ""
    authorization: str = ""
    content_type: str = ""
    body: Any = None
    status: int = 0
    at: float = 0.0

    def describe(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f" ns={self.namespace}" if self.namespace else ""
        return f"{self.verb} {res or self.path}{where} -> {self.status}"


@dataclass
class Fault:
    """A rule that makes matching requests misbehave. ``None`` criteria match anything."""

    verb: str | None = None
    resource: str | None = None
    group: str | None = None
    subresource: str | None = None
    """``""`` matches only requests without a subresource."""
    namespace: str | None = None
    name: str | None = None
    user_agent: str | None = None
    """Substring of the User-Agent header (tells two clients of the same server apart)."""
    status: int = 0
    retry_after: int | None = None
    message: str = ""
    latency: float = 0.0
    drop: bool = False
    """Close the connection without any answer (after ``latency``)."""
    apply_first: bool = False
    """Carry the request out first, then answer with the fault instead of its success (a 504 from a
    proxy or a timeout after the server applied an eviction). A refusal is still answered as such."""
    times: int | None = None
    """How many matching requests to affect; None for all until cleared."""
    when: Callable[[RecordedRequest], bool] | None = None
    """Any further condition on the request (query parameters, body...)."""
    hits: int = field(default=0, init=False)

    def matches(self, req: RecordedRequest) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        checks = (
            (self.verb, req.verb),
            (self.resource, req.resource),
            (self.group, req.group),
            (self.subresource, req.subresource),
            (self.namespace, req.namespace),
            (self.name, req.name),
        )
        if any(want is not None and want != have for want, have in checks):
            return False
        if self.user_agent is not None and self.user_agent not in req.user_agent:
            return False
        return self.when is None or self.when(req)


@dataclass
class _Watcher:
    storage: str
    dropped: threading.Event = field(default_factory=threading.Event)
    stalled: threading.Event = field(default_factory=threading.Event)


def _watches(watcher: _Watcher, resource: str | None) -> bool:
    """Whether ``watcher`` watches ``resource`` (a plural, or a storage key; None matches every watch)."""
    return resource is None or watcher.storage.endswith("/" + resource) or watcher.storage == resource


class ApiServer:
    """Start with ``start()`` (or as a context manager); ``url`` is then ``http://127.0.0.1:<port>``."""

    def __init__(
        self,
        *,
        token: str | None = "test-token",
        bookmark_interval: float = 60.0,
        history_limit: int = 10_000,
        default_watch_timeout: float = 1800.0,
    ) -> None:
        self.token = token
        self.bookmark_interval = bookmark_interval
        """Seconds between periodic BOOKMARKs on a quiet watch. kube-apiserver's watch cache sends them
        about once a minute (measured on the real control plane: 55-62 s), so that is the default; a
        client must not rely on hearing from a healthy watch more often (``send_bookmarks`` forces one)."""
        self.default_watch_timeout = default_watch_timeout
        self.watch_list_status = 422
        """What a watch with ``sendInitialEvents`` gets: kube-apiserver 1.35 with the WatchList feature gate
        off answers 422 Invalid; a test may set 400. The stand-in does not stream initial events."""
        self.store = store.Store(history_limit=history_limit)
        self._requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._watchers: list[_Watcher] = []
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._bookmark_epoch = 0
        self.errors: list[str] = []
        """Unexpected exceptions inside the server (a test should assert there are none)."""
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.kubeconfig_path: Path | None = None
        self._list_cache: OrderedDict[
            tuple[Any, ...], tuple[builtins.list[str], builtins.list[tuple[str, Obj]]]
        ]
        self._list_cache = OrderedDict()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> ApiServer:
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        """A kubeconfig (JSON is valid YAML) with one context pointing at this server."""
        cluster: Obj = {"server": self.url}
        user: Obj = {}
        if token or self.token:
            user["token"] = token or self.token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": "test", "user": user}],
            "contexts": [
                {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "default"}}
            ],
            "current-context": "test",
            "preferences": {},
        }
        path.write_text(json.dumps(config, indent=2))
        self.kubeconfig_path = path
        return path

    # -- requests and faults -----------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def requests_for(
        self, *, verb: str | None = None, resource: str | None = None, subresource: str | None = None
    ) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (subresource is None or r.subresource == subresource)
        ]

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def drop_watches(self, resource: str | None = None) -> int:
        """Cut open watch connections without the closing chunk, as a broken network would."""
        return self._flag_watches(resource, "dropped")

    def stall_watches(self, resource: str | None = None) -> int:
        """Make open watch connections go silent without closing (a dropped NAT or load-balancer entry):
        no event, no bookmark, no end. Watches opened afterwards work normally."""
        return self._flag_watches(resource, "stalled")

    def open_watches(self, resource: str | None = None) -> int:
        with self._lock:
            return sum(1 for w in self._watchers if not w.dropped.is_set() and _watches(w, resource))

    def _flag_watches(self, resource: str | None, flag: str) -> int:
        """Set ``flag`` (an Event of the watcher) on every open watch of ``resource`` (all when None)."""
        with self._lock:
            chosen = [w for w in self._watchers if _watches(w, resource)]
            for watcher in chosen:
                getattr(watcher, flag).set()
        with self.store.lock:
            self.store.changed.notify_all()
        return len(chosen)

    def send_bookmarks(self) -> None:
        """Make every open watch that asked for bookmarks send one now."""
        with self.store.lock:
            self._bookmark_epoch += 1
            self.store.changed.notify_all()

    def compact(self) -> int:
        return self.store.compact()

    # -- direct object access for tests ----------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        res = by_kind(obj.get("apiVersion", "v1"), obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace", "default") if res.namespaced else ""
        return store.deep_copy(self._create(res, ns, store.deep_copy(obj), dry_run=False))

    def get(self, resource: str, namespace: str, name: str, *, group: str | None = None) -> Obj | None:
        res = by_plural(resource, group)
        obj = self.store.get(res, namespace, name)
        return None if obj is None else store.deep_copy(convert.from_storage(res, obj))

    def list(self, resource: str, namespace: str | None = None, *, group: str | None = None) -> list[Obj]:
        res = by_plural(resource, group)
        return [
            store.deep_copy(convert.from_storage(res, o))
            for o in self.store.objects(res)
            if namespace is None or o["metadata"].get("namespace") == namespace
        ]

    def replace(self, obj: Obj) -> Obj:
        """Unconditional update of an existing object, status included."""
        res = by_kind(obj.get("apiVersion", "v1"), obj["kind"])
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace", "default") if res.namespaced else ""
        with self.store.lock:
            old = self.store.get(res, ns, meta["name"])
            if old is None:
                raise errors.not_found(res, meta["name"])
            new = store.deep_copy(obj)
            new["metadata"] = {
                **new.get("metadata", {}),
                "uid": old["metadata"]["uid"],
                "creationTimestamp": old["metadata"]["creationTimestamp"],
            }
            if res.namespaced:
                new["metadata"]["namespace"] = ns
            new = convert.to_storage(res, new)
            return store.deep_copy(self.store.commit(res, "MODIFIED", new, old))

    def patch(self, resource: str, namespace: str, name: str, patch: Obj, *, group: str | None = None) -> Obj:
        """Merge-patch an object, status included (what controllers and the kubelet would do)."""
        res = by_plural(resource, group)
        with self.store.lock:
            old = self.store.get(res, namespace, name)
            if old is None:
                raise errors.not_found(res, name)
            new = store.merge_patch(old, patch)
            new["metadata"] = {**new["metadata"], "uid": old["metadata"]["uid"]}
            return store.deep_copy(self.store.commit(res, "MODIFIED", new, old))

    def delete(self, resource: str, namespace: str, name: str, *, group: str | None = None) -> None:
        res = by_plural(resource, group)
        with self.store.lock:
            old = self.store.get(res, namespace, name)
            if old is None:
                raise errors.not_found(res, name)
            self.store.commit(res, "DELETED", old, old)

    def set_node_metrics(
        self, name: str, usage: dict[str, str], *, window: str = "20s", labels: dict[str, str] | None = None
    ) -> None:
        self._put_metrics(
            by_plural("nodes", "metrics.k8s.io"),
            "",
            {
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "NodeMetrics",
                "metadata": {"name": name, "labels": labels or {}},
                "timestamp": store.now_rfc3339(),
                "window": window,
                "usage": usage,
            },
        )

    def set_pod_metrics(
        self, namespace: str, name: str, containers: dict[str, dict[str, str]], *, window: str = "20s"
    ) -> None:
        self._put_metrics(
            by_plural("pods", "metrics.k8s.io"),
            namespace,
            {
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "PodMetrics",
                "metadata": {"name": name, "namespace": namespace},
                "timestamp": store.now_rfc3339(),
                "window": window,
                "containers": [{"name": c, "usage": u} for c, u in containers.items()],
            },
        )

    def _put_metrics(self, res: ResourceType, namespace: str, obj: Obj) -> None:
        with self.store.lock:
            old = self.store.get(res, namespace, obj["metadata"]["name"])
            obj["metadata"]["creationTimestamp"] = store.now_rfc3339()
            self.store.commit(res, "ADDED" if old is None else "MODIFIED", obj, old)

    # -- request handling -------------------------------------------------------------------------
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _fault_for(self, req: RecordedRequest) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(req):
                    fault.hits += 1
                    return fault
        return None

    def _register_watch(self, storage: str) -> _Watcher:
        watcher = _Watcher(storage)
        with self._lock:
            self._watchers.append(watcher)
        return watcher

    def _unregister_watch(self, watcher: _Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    # -- verbs ----------------------------------------------------------------------------------
    def _create(self, res: ResourceType, namespace: str, body: Any, *, dry_run: bool) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        if body.get("apiVersion") not in (None, res.api_version):
            raise errors.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected API "
                f"version ({res.api_version})"
            )
        if body.get("kind") not in (None, res.kind):
            raise errors.bad_request(f"the kind in the data ({body.get('kind')}) does not match {res.kind}")
        meta = dict(body.get("metadata") or {})
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    random.choices(string.ascii_lowercase + string.digits, k=5)
                )
            else:
                raise errors.invalid(
                    res, "", [("metadata.name", "", "Required value: name or generateName is required")]
                )
        obj = convert.to_storage(res, {**body, "metadata": meta})
        convert.validate(res, obj)
        with self.store.lock:
            if self.store.get(res, namespace, meta["name"]) is not None:
                raise errors.already_exists(res, meta["name"])
            obj = self.store.new_identity(res, obj)
            if res.kind == "Pod":
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            if dry_run:
                return obj
            return self.store.commit(res, "ADDED", obj, None)

    def _update(
        self, res: ResourceType, namespace: str, name: str, body: Any, subresource: str, *, dry_run: bool
    ) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        meta = dict(body.get("metadata") or {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        with self.store.lock:
            old = self.store.get(res, namespace, name)
            if old is None:
                raise errors.not_found(res, name)
            if meta.get("resourceVersion") and meta["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise errors.modified_conflict(res, name)
            new = convert.to_storage(res, {**body, "metadata": meta})
            new = self._carry_over(res, old, new, subresource)
            convert.validate(res, new)
            if dry_run:
                return new
            return self.store.commit(res, "MODIFIED", new, old)

    @staticmethod
    def _carry_over(res: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
        """Fields the client cannot change with this request keep their stored value."""
        old_meta = old["metadata"]
        if subresource == "status":
            new = {**old, "status": new.get("status", {})}
            meta = dict(old_meta)
        else:
            meta = dict(new.get("metadata") or {})
            for key in ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp"):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if res.status_subresource:
                new = (
                    {**new, "status": old.get("status", {})}
                    if "status" in old
                    else {k: v for k, v in new.items() if k != "status"}
                )
            if "generation" in old_meta and new.get("spec") != old.get("spec"):
                meta["generation"] = int(old_meta["generation"]) + 1
        new = {**new, "metadata": meta}
        return new

    def _delete(
        self, res: ResourceType, namespace: str, name: str, options: Obj, *, dry_run: bool
    ) -> tuple[Obj, Obj]:
        """Returns (the deleted object, the response body)."""
        with self.store.lock:
            old = self.store.get(res, namespace, name)
            if old is None:
                raise errors.not_found(res, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
                raise errors.conflict(
                    res,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                    f"{old['metadata'].get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise errors.conflict(
                    res,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
                )
            final = old if dry_run else self.store.commit(res, "DELETED", old, old)
        if res.kind == "Pod":
            return final, convert.from_storage(res, final)
        details: Obj = {"name": name, "kind": res.plural, "uid": old["metadata"].get("uid")}
        if res.group:
            details["group"] = res.group
        return final, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _evict(self, namespace: str, name: str, body: Any, dry_run_query: builtins.list[str]) -> Obj:
        """policy/v1 Eviction, following pkg/registry/core/pod/storage/eviction.go."""
        pods = by_plural("pods")
        if not isinstance(body, dict) or body.get("kind") not in ("Eviction", None):
            raise errors.bad_request(f"not a Eviction object: {type(body).__name__}")
        if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
            raise errors.bad_request(f"unsupported Eviction apiVersion {body.get('apiVersion')!r}")
        if (body.get("metadata") or {}).get("name") != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = dict(body.get("deleteOptions") or {})
        body_dry = list(options.get("dryRun") or [])
        if body_dry and dry_run_query and body_dry != dry_run_query:
            raise errors.bad_request(
                f"Non-matching dry-run options in request and content: {dry_run_query} and {body_dry}"
            )
        dry_run = bool(body_dry or dry_run_query)
        with self.store.lock:
            pod = self.store.get(pods, namespace, name)
            if pod is None:
                raise errors.not_found(pods, name)
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
                self._delete(pods, namespace, name, options, dry_run=dry_run)
                return {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                }
            labels = pod["metadata"].get("labels") or {}
            pdb_res = by_plural("poddisruptionbudgets")
            matching = [
                p
                for p in self.store.objects(pdb_res)
                if p["metadata"].get("namespace") == namespace
                and _selector_nonempty((p.get("spec") or {}).get("selector"))
                and selector_object_matches(p["spec"]["selector"], labels)
            ]
            if len(matching) > 1:
                raise ApiError(
                    500,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                    "does not support.",
                )
            if matching:
                pdb = matching[0]
                status = dict(pdb.get("status") or {})
                desired = int(status.get("desiredHealthy", 0))
                current = int(status.get("currentHealthy", 0))
                if not _pod_ready(pod) and current >= desired and desired > 0:
                    pass  # an unready pod does not count towards healthy: delete without decrementing
                else:
                    self._check_and_decrement(pdb_res, pdb, name, dry_run)
            self._delete(pods, namespace, name, options, dry_run=dry_run)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _check_and_decrement(self, pdb_res: ResourceType, pdb: Obj, pod_name: str, dry_run: bool) -> None:
        status = dict(pdb.get("status") or {})
        pdb_name = pdb["metadata"]["name"]
        if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 0)):
            raise _budget_refusal(
                f"The disruption budget {pdb_name} is still being processed by the server.", retry_after=10
            )
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise _budget_forbidden(pdb_name, "pdb disruptions allowed is negative")
        if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
            raise _budget_forbidden(
                pdb_name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
            )
        if allowed == 0:
            raise _budget_refusal(
                f"The disruption budget {pdb_name} needs {int(status.get('desiredHealthy', 0))} healthy pods "
                f"and has {int(status.get('currentHealthy', 0))} currently"
            )
        if dry_run:
            return
        status["disruptionsAllowed"] = allowed - 1
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: store.now_rfc3339()}
        if allowed - 1 == 0:
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
            conditions.append(
                {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "reason": "InsufficientPods",
                    "message": "",
                    "lastTransitionTime": store.now_rfc3339(),
                    "observedGeneration": int(pdb["metadata"].get("generation", 0)),
                }
            )
            status["conditions"] = conditions
        self.store.commit(pdb_res, "MODIFIED", {**pdb, "status": status}, pdb)

    # -- reads ----------------------------------------------------------------------------------------
    def _list(self, res: ResourceType, namespace: str | None, query: dict[str, str]) -> Obj:
        label_reqs = parse_label_selector(query.get("labelSelector"))
        field_match = compile_field_selector(res.storage_key, query.get("fieldSelector"))
        limit = int(query.get("limit") or 0)
        if limit < 0:
            raise errors.bad_request("limit must be non-negative")
        token = query.get("continue")
        start = ""
        rv: int | None = None
        if token:
            rv, start = store.decode_continue(token)
        elif (
            query.get("resourceVersion") not in (None, "", "0")
            and query.get("resourceVersionMatch") == "Exact"
        ):
            rv = _parse_rv(query["resourceVersion"])

        def predicate(obj: Obj) -> bool:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            return labels_match(label_reqs, labels) and field_match(obj)

        at, items = self.store.sorted_state(res.storage_key, rv)
        # Filter once per (revision, scope, selectors) and cut pages by bisection, so paging through n
        # objects costs O(n), not O(n^2 / limit).
        cache_key = (
            res.storage_key,
            at,
            namespace if res.namespaced else None,
            query.get("labelSelector") or "",
            query.get("fieldSelector") or "",
        )
        with self.store.lock:
            cached = self._list_cache.get(cache_key)
        if cached is None:
            selected = store.filtered(items, namespace if res.namespaced else None, predicate)
            cached = ([k for k, _ in selected], selected)
            with self.store.lock:
                self._list_cache[cache_key] = cached
                while len(self._list_cache) > 16:
                    self._list_cache.popitem(last=False)
        keys, selected = cached
        first = bisect.bisect_left(keys, start) if start else 0
        remaining = len(selected) - first
        meta: Obj = {"resourceVersion": str(at)}
        if limit and remaining > limit:
            page = selected[first : first + limit]
            meta["continue"] = store.encode_continue(at, page[-1][0] + "\x00")
            if not label_reqs and not query.get("fieldSelector"):
                meta["remainingItemCount"] = remaining - limit
        else:
            page = selected[first:]
        items_out = [self._served(res, o) for _, o in page]
        return {"kind": res.list_kind, "apiVersion": res.api_version, "metadata": meta, "items": items_out}

    def _served(self, res: ResourceType, obj: Obj) -> Obj:
        out = convert.from_storage(res, obj)
        if res.group == "metrics.k8s.io":
            out = {**out, "metadata": {k: v for k, v in out["metadata"].items() if k != "resourceVersion"}}
        return out

    def _watch_events(
        self,
        res: ResourceType,
        namespace: str | None,
        name: str,
        query: dict[str, str],
        watcher: _Watcher,
        client_gone: Callable[[], bool] = lambda: False,
    ) -> Iterator[bytes]:
        """Yields encoded watch events; ends normally on timeout, raises _Dropped when cut."""
        label_reqs = parse_label_selector(query.get("labelSelector"))
        field_match = compile_field_selector(res.storage_key, query.get("fieldSelector"))
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout)
        deadline = time.monotonic() + timeout

        def visible(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if namespace is not None and res.namespaced and meta.get("namespace") != namespace:
                return False
            if name and meta.get("name") != name:
                return False
            return labels_match(label_reqs, meta.get("labels") or {}) and field_match(obj)

        def encode(kind: str, obj: Obj) -> bytes:
            return (
                json.dumps({"type": kind, "object": self._served(res, obj)}, separators=(",", ":")).encode()
                + b"\n"
            )

        rv_text = query.get("resourceVersion", "")
        gone: bytes | None = None
        with self.store.lock:
            if rv_text in ("", "0"):
                cursor = self.store.rv
                _, items = self.store.sorted_state(res.storage_key, None)
                initial = [o for _, o in items if visible(o)]
            else:
                cursor = _parse_rv(rv_text)
                initial = []
                if cursor < self.store.compacted_rv:
                    gone = _gone(cursor, self.store.compacted_rv)
            epoch = self._bookmark_epoch
        if gone is not None:
            yield gone
            return
        for obj in initial:
            yield encode("ADDED", obj)
        last_bookmark = time.monotonic()
        while True:
            if watcher.dropped.is_set():
                raise _Dropped()
            self._silent_while_stalled(watcher, client_gone)
            if self._stopping.is_set() or time.monotonic() >= deadline or client_gone():
                return
            with self.store.lock:
                if cursor < self.store.compacted_rv:
                    gone = _gone(cursor, self.store.compacted_rv)
                    changes = []
                else:
                    changes = self.store.changes_after(cursor)
                    if not changes and epoch == self._bookmark_epoch and not watcher.dropped.is_set():
                        wait = min(0.25, max(0.0, deadline - time.monotonic()))
                        if bookmarks:
                            wait = min(
                                wait, max(0.0, last_bookmark + self.bookmark_interval - time.monotonic())
                            )
                        self.store.changed.wait(timeout=wait)
                        changes = self.store.changes_after(cursor)
                head = self.store.rv
                forced = epoch != self._bookmark_epoch
                epoch = self._bookmark_epoch
            self._silent_while_stalled(watcher, client_gone)
            if gone is not None:
                yield gone
                return
            if watcher.dropped.is_set():
                raise _Dropped()
            for change in changes:
                if change.storage != res.storage_key:
                    continue
                was, now_ = visible(change.old), visible(change.obj)
                if change.type == "ADDED" and now_:
                    yield encode("ADDED", change.obj)
                elif change.type == "MODIFIED":
                    if was and now_:
                        yield encode("MODIFIED", change.obj)
                    elif was:
                        yield encode("DELETED", change.obj)
                    elif now_:
                        yield encode("ADDED", change.obj)
                elif change.type == "DELETED" and (was or now_):
                    yield encode("DELETED", change.obj)
            cursor = head
            if bookmarks and (forced or time.monotonic() - last_bookmark >= self.bookmark_interval):
                last_bookmark = time.monotonic()
                bookmark = {
                    "kind": res.kind,
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(cursor)},
                }
                yield (
                    json.dumps({"type": "BOOKMARK", "object": bookmark}, separators=(",", ":")).encode()
                    + b"\n"
                )

    def _silent_while_stalled(self, watcher: _Watcher, client_gone: Callable[[], bool]) -> None:
        """A stalled watch sends nothing until the client gives up on it (or the test cuts it)."""
        if not watcher.stalled.is_set():
            return
        while not (self._stopping.is_set() or watcher.dropped.is_set() or client_gone()):
            time.sleep(0.05)
        raise _Dropped()

    # -- discovery ------------------------------------------------------------------------------------
    def _discovery(self, path: str) -> Obj | None:
        path = path.rstrip("/")
        if path == "":
            paths = {"/api", "/api/v1", "/apis", "/version", "/healthz", "/livez", "/readyz"}
            for group, versions in groups().items():
                if group:
                    paths.add(f"/apis/{group}")
                    paths.update(f"/apis/{group}/{v}" for v in versions)
            return {"paths": sorted(paths)}
        if path == "/version":
            return dict(SERVER_VERSION)
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                ],
            }
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_doc(g, v) for g, v in groups().items() if g],
            }
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            found = groups().get(parts[1])
            if found is None:
                return None
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(parts[1], found)}
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group = "" if parts[0] == "api" else parts[1]
            version = parts[-1]
            served = [r for r in RESOURCES if r.group == group and r.version == version]
            if not served:
                return None
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": served[0].group_version,
                "resources": [doc for r in served for doc in _resource_docs(r)],
            }
        return None


class _Dropped(Exception):
    """The test asked to cut this watch."""


def _gone(rv: int, compacted: int) -> bytes:
    status = errors.expired(f"too old resource version: {rv} ({compacted})").status()
    return json.dumps({"type": "ERROR", "object": status}, separators=(",", ":")).encode() + b"\n"


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'resourceVersion: Invalid value: "{text}": must be an integer') from None
    if value < 0:
        raise errors.bad_request(f'resourceVersion: Invalid value: "{text}": must be non-negative')
    return value


def _selector_nonempty(selector: Any) -> bool:
    return isinstance(selector, dict) and bool(
        selector.get("matchLabels") or selector.get("matchExpressions")
    )


def _pod_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _group_doc(group: str, versions: list[str]) -> Obj:
    docs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": docs, "preferredVersion": docs[0]}


def _resource_docs(res: ResourceType) -> list[Obj]:
    doc: Obj = {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": list(res.verbs),
    }
    if res.short_names:
        doc["shortNames"] = list(res.short_names)
    if res.plural in ("pods", "nodes", "events"):
        doc["categories"] = ["all"] if res.plural == "pods" else []
    docs = [doc]
    for sub in res.subresources:
        if sub == "eviction":
            docs.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
        else:
            docs.append(
                {
                    "name": f"{res.plural}/{sub}",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return docs


def _classify(method: str, path: str, query: dict[str, str]) -> RecordedRequest:
    """Like apiserver's RequestInfoFactory: verb, group, version, resource, subresource, namespace, name."""
    parts = [p for p in path.split("/") if p]
    req = RecordedRequest(method=method, path=path, query=query, verb=method.lower(), is_resource=False)
    if not parts or parts[0] not in ("api", "apis"):
        return req
    if parts[0] == "api":
        if len(parts) < 3:
            return req
        req.group, req.version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return req
        req.group, req.version, rest = parts[1], parts[2], parts[3:]
    req.is_resource = True
    if rest[0] == "namespaces" and len(rest) > 1:
        req.namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    req.resource = rest[0]
    if len(rest) > 1:
        req.name = rest[1]
    if len(rest) > 2:
        req.subresource = rest[2]
    if len(rest) > 3:
        req.subresource = "/".join(rest[2:])
    watch = query.get("watch") in ("1", "true")
    if method == "GET":
        req.verb = "watch" if watch else ("get" if req.name else "list")
    elif method == "POST":
        req.verb = "create"
    elif method == "PUT":
        req.verb = "update"
    elif method == "PATCH":
        req.verb = "patch"
    elif method == "DELETE":
        req.verb = "delete" if req.name else "deletecollection"
    return req


def _make_handler(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "test-apiserver"
        _swallow = False

        def log_message(self, format: str, *args: Any) -> None:
            return

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._connections.add(self.connection)

        def finish(self) -> None:
            with suppress(OSError):
                super().finish()
            with server._lock:
                server._connections.discard(self.connection)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        # -- plumbing -------------------------------------------------------------------------------
        def _send(
            self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Audit-Id", f"{random.getrandbits(64):016x}")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _send_json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            self._send(code, json.dumps(obj, separators=(",", ":")).encode(), "application/json", headers)

        def _send_error(self, err: ApiError) -> None:
            self._record.status = err.code
            if err.plain_text:
                headers = {"X-Content-Type-Options": "nosniff", **err.headers}
                self._send(err.code, (err.message + "\n").encode(), "text/plain; charset=utf-8", headers)
            else:
                self._send_json(err.code, err.status(), err.headers)

        def _read_body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            if not length:
                return None
            raw = self.rfile.read(length)
            try:
                return json.loads(raw)
            except ValueError:
                raise errors.bad_request(
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: application/json; got {raw[:40]!r}"
                ) from None

        def _dispatch(self, method: str) -> None:
            split = urlsplit(self.path)
            query_lists = parse_qs(split.query, keep_blank_values=True)
            query = {k: v[-1] for k, v in query_lists.items()}
            req = _classify(method, split.path, query)
            req.user_agent = self.headers.get("User-Agent", "")
            req.authorization = self.headers.get("Authorization", "")
            req.content_type = self.headers.get("Content-Type", "")
            req.at = time.monotonic()
            self._record = req
            server._record(req)
            try:
                body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                req.body = body
                if server.token is not None and req.authorization.split(" ", 1)[-1] != server.token:
                    raise errors.unauthorized()
                fault = server._fault_for(req)
                if fault is not None and fault.apply_first:
                    self._swallow = True
                    try:
                        self._route(method, req, body, query, query_lists)
                    finally:
                        self._swallow = False
                if fault is not None:
                    if fault.latency:
                        time.sleep(fault.latency)
                    if fault.drop:
                        req.status = -1
                        self.close_connection = True
                        with suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if fault.status:
                        raise errors.for_status_code(fault.status, fault.message, fault.retry_after)
                self._route(method, req, body, query, query_lists)
            except ApiError as err:
                with suppress(OSError):
                    self._send_error(err)
            except SelectorError as err:
                with suppress(OSError):
                    self._send_error(errors.bad_request(str(err)))
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except Exception as exc:
                server.errors.append(f"{method} {self.path}: {exc!r}")
                with suppress(OSError):
                    self._send_error(errors.internal(repr(exc)))

        def _route(
            self,
            method: str,
            req: RecordedRequest,
            body: Any,
            query: dict[str, str],
            query_lists: dict[str, list[str]],
        ) -> None:
            if not req.is_resource:
                if method != "GET":
                    raise ApiError(405, "MethodNotAllowed", "method not allowed")
                if req.path.rstrip("/") in ("/healthz", "/livez", "/readyz"):
                    req.status = 200
                    self._send(200, b"ok", "text/plain; charset=utf-8")
                    return
                doc = server._discovery(req.path)
                if doc is None:
                    req.status = 404
                    self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
                    return
                req.status = 200
                self._send_json(200, doc)
                return
            res = find(req.group, req.version, req.resource)
            if res is None:
                raise errors.resource_not_found()
            if req.verb not in res.verbs:
                raise errors.method_not_supported(res, req.verb)
            dry_values = query_lists.get("dryRun", [])
            for value in dry_values:
                if value != "All":
                    raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
            dry_run = bool(dry_values)
            namespace = req.namespace if res.namespaced else ""
            if res.namespaced and req.name and not req.namespace:
                raise errors.resource_not_found()
            sub = req.subresource
            if sub and sub not in res.subresources:
                raise errors.resource_not_found()
            if req.verb == "watch":
                self._watch(res, req, query)
            elif req.verb == "list":
                self._ok(200, server._list(res, req.namespace or None, query), query)
            elif req.verb == "get":
                obj = server.store.get(res, namespace, req.name)
                if obj is None:
                    raise errors.not_found(res, req.name)
                self._ok(200, server._served(res, obj), query)
            elif req.verb == "create" and sub == "eviction":
                self._ok(201, server._evict(namespace, req.name, body, dry_values), query)
            elif req.verb == "create":
                if req.name:
                    raise errors.method_not_supported(res, "create")
                self._ok(
                    201, server._served(res, server._create(res, namespace, body, dry_run=dry_run)), query
                )
            elif req.verb == "update":
                obj = server._update(res, namespace, req.name, body, sub, dry_run=dry_run)
                self._ok(200, server._served(res, obj), query)
            elif req.verb == "patch":
                self._patch(res, namespace, req, body, dry_run)
            elif req.verb == "delete":
                options = dict(body or {})
                if "gracePeriodSeconds" in query:
                    options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
                if options.get("dryRun"):
                    dry_run = True
                _, response = server._delete(res, namespace, req.name, options, dry_run=dry_run)
                self._ok(200, response, query)
            else:
                raise errors.method_not_supported(res, req.verb)

        def _client_gone(self) -> bool:
            """The client closed its end (a stopped informer): end the watch instead of streaming into it."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
            except ValueError:  # TLS sockets cannot peek
                return False
            except OSError:
                return True

        def _ok(self, code: int, obj: Obj, query: dict[str, str]) -> None:
            if self._swallow:  # applied; the fault answers instead
                return
            self._record.status = code
            self._send_json(code, obj)

        def _patch(
            self, res: ResourceType, namespace: str, req: RecordedRequest, body: Any, dry_run: bool
        ) -> None:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            accepted = (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/json-patch+json",
            )
            if content_type not in accepted:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"{', '.join(accepted)} (got {content_type})",
                )
            with server.store.lock:
                old = server.store.get(res, namespace, req.name)
                if old is None:
                    raise errors.not_found(res, req.name)
                current = convert.from_storage(res, old)
                if content_type == "application/json-patch+json":
                    try:
                        merged = store.json_patch(current, body)
                    except store.JsonPatchError as exc:  # kube-apiserver: 422, reason Invalid
                        raise ApiError(422, "Invalid", str(exc)) from None
                else:
                    merged = store.merge_patch(current, body or {})
                obj = server._update(res, namespace, req.name, merged, req.subresource, dry_run=dry_run)
            self._ok(200, server._served(res, obj), {})

        def _watch(self, res: ResourceType, req: RecordedRequest, query: dict[str, str]) -> None:
            # Validate selectors and resourceVersion before committing to a 200 stream.
            parse_label_selector(query.get("labelSelector"))
            compile_field_selector(res.storage_key, query.get("fieldSelector"))
            if query.get("resourceVersion") not in (None, "", "0"):
                _parse_rv(query["resourceVersion"])
            if query.get("sendInitialEvents") in ("true", "1"):
                raise errors.ApiError(
                    server.watch_list_status,
                    "Invalid" if server.watch_list_status == 422 else "BadRequest",
                    'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )
            watcher = server._register_watch(res.storage_key)
            events = server._watch_events(
                res, req.namespace or None, req.name, query, watcher, self._client_gone
            )
            req.status = 200
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            try:
                for chunk in events:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except _Dropped:
                self.close_connection = True
                with suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True
            finally:
                server._unregister_watch(watcher)

    return Handler


def _budget_refusal(message: str, retry_after: int | None = None) -> ApiError:
    """The 429 an eviction gets while a PodDisruptionBudget holds it back, as kube-apiserver words it."""
    details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    headers = None
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
        headers = {"Retry-After": str(retry_after)}
    return ApiError(429, "TooManyRequests", PDB_TOO_MANY, details, headers=headers)


def _budget_forbidden(pdb_name: str, why: str) -> ApiError:
    """The 403 an eviction gets when a PodDisruptionBudget's status is unusable."""
    return ApiError(
        403,
        "Forbidden",
        f'poddisruptionbudgets.policy "{pdb_name}" is forbidden: {why}',
        {"name": pdb_name, "group": "policy", "kind": "poddisruptionbudget"},
    )
