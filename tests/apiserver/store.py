"""The server's state: objects with resourceVersions, a bounded change log for WATCH, and list snapshots.

Like etcd behind kube-apiserver there is one revision counter for everything. Every write bumps it and
appends to the change log; watches replay the log from a resourceVersion, and a resourceVersion older than
the log's start is "compacted" (410 Gone). A paginated LIST is served from the state at the first page's
revision, reconstructed by undoing later changes, so pages stay consistent while objects change.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from tests.apiserver import errors
from tests.apiserver.resources import RESOURCES, ResourceType

Obj = dict[str, Any]
T = TypeVar("T")
Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects

GENERATION_KINDS = frozenset(
    {"Deployment", "ReplicaSet", "StatefulSet", "ReplicationController", "PodDisruptionBudget"}
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    rv: int
    storage: str
    type: str  # ADDED, MODIFIED, DELETED
    key: Key
    obj: Obj
    """The new state (the last state for DELETED)."""
    old: Obj | None


def _key_string(key: Key) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("bad version")
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


class Store:
    """Thread-safe object store. Objects are never mutated in place, so readers may share them."""

    def __init__(self, history_limit: int = 10_000, first_rv: int = 1000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = first_rv
        self.compacted_rv = first_rv
        """Watching or listing at a resourceVersion below this answers 410 Gone."""
        self.history_limit = history_limit
        self._objects: dict[str, dict[Key, Obj]] = {res.storage_key: {} for res in RESOURCES}
        self._log: list[Change] = []
        self._log_rvs: list[int] = []
        self._snapshots: OrderedDict[tuple[str, int], list[tuple[str, Obj]]] = OrderedDict()

    # -- reads ---------------------------------------------------------------------------------
    def get(self, res: ResourceType, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self._objects[res.storage_key].get((namespace if res.namespaced else "", name))

    def objects(self, res: ResourceType) -> list[Obj]:
        with self.lock:
            return [obj for _, obj in sorted(self._objects[res.storage_key].items())]

    def sorted_state(self, storage: str, rv: int | None) -> tuple[int, list[tuple[str, Obj]]]:
        """Objects as of revision ``rv`` (current when None), sorted by key, and that revision."""
        with self.lock:
            target = self.rv if rv is None or rv >= self.rv else rv
            cached = self._snapshots.get((storage, target))
            if cached is not None:
                self._snapshots.move_to_end((storage, target))
                return target, cached
            if target < self.compacted_rv:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter, or use the continue token in this "
                    "response to retrieve the remainder of the results. Continuing with the provided token "
                    "results in an inconsistent list - objects that were created, modified, or deleted "
                    "between the time the first chunk was returned and now may show up in the list."
                )
            state = dict(self._objects[storage])
            start = bisect.bisect_right(self._log_rvs, target)
            for change in reversed(self._log[start:]):
                if change.storage != storage:
                    continue
                if change.type == "ADDED":
                    state.pop(change.key, None)
                elif change.old is not None:
                    state[change.key] = change.old
            items = sorted((_key_string(k), v) for k, v in state.items())
            self._snapshots[(storage, target)] = items
            if len(self._snapshots) > 8:
                self._snapshots.popitem(last=False)
            return target, items

    def changes_after(self, rv: int) -> list[Change]:
        with self.lock:
            return self._log[bisect.bisect_right(self._log_rvs, rv) :]

    # -- writes --------------------------------------------------------------------------------
    def commit(self, res: ResourceType, change_type: str, obj: Obj, old: Obj | None) -> Obj:
        """Record a change: sets the new resourceVersion, appends to the log, wakes watchers."""
        with self.lock:
            self.rv += 1
            meta = dict(obj.get("metadata") or {})
            meta["resourceVersion"] = str(self.rv)
            obj = {**obj, "metadata": meta}
            key = (meta.get("namespace", "") if res.namespaced else "", meta["name"])
            table = self._objects[res.storage_key]
            if change_type == "DELETED":
                table.pop(key, None)
            else:
                table[key] = obj
            self._log.append(Change(self.rv, res.storage_key, change_type, key, obj, old))
            self._log_rvs.append(self.rv)
            overflow = len(self._log) - self.history_limit
            if overflow > 0:
                self.compacted_rv = self._log_rvs[overflow - 1]
                del self._log[:overflow]
                del self._log_rvs[:overflow]
            self.changed.notify_all()
            return obj

    def compact(self) -> int:
        """Forget all history (like an etcd compaction): older resourceVersions now answer 410."""
        with self.lock:
            self.compacted_rv = self.rv
            self._log.clear()
            self._log_rvs.clear()
            self._snapshots.clear()
            self.changed.notify_all()
            return self.rv

    def new_identity(self, res: ResourceType, obj: Obj) -> Obj:
        """Fill what the server sets on create: uid, creationTimestamp, generation."""
        meta = dict(obj.get("metadata") or {})
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        if res.kind in GENERATION_KINDS:
            meta["generation"] = 1
        return {**obj, "metadata": meta}


def deep_copy(obj: T) -> T:
    return copy.deepcopy(obj)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(ValueError):
    """A JSON patch that cannot apply; kube-apiserver answers 422 with this text (a failed ``test`` too)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    if not token.isdigit():
        raise JsonPatchError(f"invalid array index {token!r}")
    position = int(token)
    if position > len(container) or (not insert and position == len(container)):
        raise JsonPatchError(f"array index {position} out of bounds")
    return position


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test), applied to a copy; raises ``JsonPatchError``.

    As kube-apiserver's library does, ``test`` of a missing member against ``null`` succeeds."""
    if not isinstance(operations, list):
        raise JsonPatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, Mapping) or "op" not in operation or "path" not in operation:
            raise JsonPatchError(f"invalid operation {operation!r}")
        op, tokens = operation["op"], _pointer(str(operation["path"]))
        if not tokens:
            raise JsonPatchError("operations on the whole document are not supported")
        parent: Any = doc
        for token in tokens[:-1]:
            if isinstance(parent, Mapping) and token in parent:
                parent = parent[token]
            elif isinstance(parent, list):
                parent = parent[_index(parent, token, insert=False)]
            else:
                if op == "test" and operation.get("value") is None:
                    parent = None
                    break
                raise JsonPatchError(f"missing path {operation['path']}")
        last = tokens[-1]
        if op == "test":
            if parent is None or (isinstance(parent, Mapping) and last not in parent):
                current = None
            elif isinstance(parent, list):
                current = parent[_index(parent, last, insert=False)]
            else:
                current = parent[last]
            if current != operation.get("value"):
                raise JsonPatchError(f"testing value {operation['path']} failed: test failed")
        elif op in ("add", "replace"):
            value = copy.deepcopy(operation.get("value"))
            if isinstance(parent, list):
                position = _index(parent, last, insert=op == "add")
                if op == "add":
                    parent.insert(position, value)
                else:
                    parent[position] = value
            elif isinstance(parent, dict):
                if op == "replace" and last not in parent:
                    raise JsonPatchError(f"replace operation does not apply: doc is missing key: {last}")
                parent[last] = value
            else:
                raise JsonPatchError(f"missing path {operation['path']}")
        elif op == "remove":
            if isinstance(parent, list):
                del parent[_index(parent, last, insert=False)]
            elif isinstance(parent, dict) and last in parent:
                del parent[last]
            else:
                raise JsonPatchError(
                    f"remove operation does not apply: doc is missing path: {operation['path']}"
                )
        else:
            raise JsonPatchError(f"unsupported operation {op!r}")
    return doc


def filtered(
    items: Iterable[tuple[str, Obj]], namespace: str | None, predicate: Callable[[Obj], bool]
) -> list[tuple[str, Obj]]:
    out = []
    for key, obj in items:
        if namespace is not None and (obj.get("metadata") or {}).get("namespace") != namespace:
            continue
        if predicate(obj):
            out.append((key, obj))
    return out
