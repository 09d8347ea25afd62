"""The reads an eviction rests on (``kube/verify.py``): the cache's owner chain only chooses which reads are
made. A Deployment's pod costs 5 requests when the server bears the chain out; in every other case the chain
is read as without the hint, and the planner decides exactly as it did on those reads (issue 40)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

import pytest

from descheduler.kube.api import Response, status_error
from descheduler.kube.verify import ServerReader
from descheduler.planner import reasons
from descheduler.planner.candidates import resolve_priority_threshold
from descheduler.planner.index import ClusterIndex, WorkloadRef
from descheduler.planner.settings import compile_settings
from descheduler.planner.verify import ServerView, Threshold, recheck
from tests.apiserver.selectors import labels_match, parse_label_selector
from tests.unit.builders import NOW, World, cpu, owner_ref, settings

Obj = dict[str, Any]
CONFIG = settings(low={"cpu": 20}, high={"cpu": 50})
PLURALS = {
    "deployments": "Deployment",
    "replicasets": "ReplicaSet",
    "statefulsets": "StatefulSet",
    "replicationcontrollers": "ReplicationController",
    "pods": "Pod",
    "nodes": "Node",
    "namespaces": "Namespace",
}


class Api:
    """The API server's objects answering GET and LIST as kube-apiserver does (404, label and name
    selectors), every request recorded."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.sent: list[str] = []

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None, **_: Any) -> Any:
        assert method == "GET"
        parts = [unquote(p) for p in path.strip("/").split("/")]
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts[:-1] else None
        kind = PLURALS[parts[-1] if parts[-1] in PLURALS else parts[-2]]
        found = [
            o
            for o in self.objects
            if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]
        if parts[-1] not in PLURALS:  # a GET by name
            self.sent.append(f"GET {kind} {parts[-1]}")
            named = next((o for o in found if o["metadata"]["name"] == parts[-1]), None)
            if named is None:
                raise status_error(method, path, Response(404, {}, json.dumps({"kind": "Status"}).encode()))
            return copy.deepcopy(named)
        self.sent.append(f"LIST {kind}")
        query = query or {}
        if "fieldSelector" in query:
            name = query["fieldSelector"].removeprefix("metadata.name=")
            found = [o for o in found if o["metadata"]["name"] == name]
        if "labelSelector" in query:
            wanted = parse_label_selector(query["labelSelector"])
            found = [o for o in found if labels_match(wanted, o["metadata"].get("labels") or {})]
        return {"metadata": {}, "items": copy.deepcopy(found)}


def cached_world() -> World:
    """A hot node with four pods of Deployment ``web`` (6 replicas, ReplicaSet ``web-rs``), room elsewhere."""
    world = World()
    world.node("hot", cpu="10", usage=cpu("8"))
    world.node("cool", cpu="10", usage=cpu("1"))
    world.node("cool-2", cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=6)
    for i in range(1, 5):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    return world


def stored(world: World) -> list[Obj]:
    """The world's objects as the server stores them: a ReplicaSet carries its Deployment's labels."""
    objects = copy.deepcopy(world.objects)
    for obj in objects:
        if obj["kind"] == "ReplicaSet":
            obj["metadata"].setdefault("labels", dict(obj["spec"]["selector"]["matchLabels"]))
    objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    return objects


def edit(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def drop(objects: list[Obj], kind: str, name: str) -> None:
    objects.remove(edit(objects, kind, name))


def unchanged(objects: list[Obj]) -> None:
    """The server holds what the cache holds."""


def scaled_to_one(objects: list[Obj]) -> None:
    edit(objects, "Deployment", "web")["spec"]["replicas"] = 1


def released(objects: list[Obj]) -> None:
    """The ReplicaSet's labels no longer match the Deployment's selector and it was orphaned."""
    rs = edit(objects, "ReplicaSet", "web-rs")
    rs["metadata"]["labels"] = {"app": "other"}
    rs["metadata"]["ownerReferences"] = []


def relabelled(objects: list[Obj]) -> None:
    """The ReplicaSet's labels no longer match, its controller not yet released."""
    edit(objects, "ReplicaSet", "web-rs")["metadata"]["labels"] = {"app": "other"}


def orphaned(objects: list[Obj]) -> None:
    """The ReplicaSet still matches the selector but names no controller."""
    edit(objects, "ReplicaSet", "web-rs")["metadata"]["ownerReferences"] = []


def moved_to_web2(objects: list[Obj]) -> None:
    """Another Deployment (same labels) controls the ReplicaSet now."""
    web2 = copy.deepcopy(edit(objects, "Deployment", "web"))
    web2["metadata"].update(name="web2", uid="uid-web2")
    objects.append(web2)
    controller = {**owner_ref("Deployment", "web2"), "uid": "uid-web2"}
    edit(objects, "ReplicaSet", "web-rs")["metadata"]["ownerReferences"] = [controller]


def deployment_recreated(objects: list[Obj]) -> None:
    """The Deployment made again under its name (another uid); its ReplicaSet names the old one."""
    edit(objects, "Deployment", "web")["metadata"]["uid"] = "uid-web-new"


def deployment_gone(objects: list[Obj]) -> None:
    """Deleted with its dependents orphaned: the ReplicaSet still names it."""
    drop(objects, "Deployment", "web")


def replicaset_gone(objects: list[Obj]) -> None:
    drop(objects, "ReplicaSet", "web-rs")


def adopted(objects: list[Obj]) -> None:
    """The stale chain: on the server the pod is controlled by another ReplicaSet of the Deployment."""
    other = copy.deepcopy(edit(objects, "ReplicaSet", "web-rs"))
    other["metadata"].update(name="web-rs2", uid="uid-web-rs2")
    objects.append(other)
    for pod in (o for o in objects if o["kind"] == "Pod"):
        pod["metadata"]["ownerReferences"] = [{**owner_ref("ReplicaSet", "web-rs2"), "uid": "uid-web-rs2"}]


def recreated(objects: list[Obj]) -> None:
    """The ReplicaSet was deleted and made again under its name (a new uid), the pods adopted by it."""
    edit(objects, "ReplicaSet", "web-rs")["metadata"]["uid"] = "uid-web-rs-new"
    for pod in (o for o in objects if o["kind"] == "Pod"):
        pod["metadata"]["ownerReferences"][0]["uid"] = "uid-web-rs-new"


@dataclass(frozen=True)
class Row:
    id: str
    server: Callable[[list[Obj]], None]
    requests: int
    """What the hinted reads cost."""
    today: int
    """What the reads without a hint cost (as before issue 40)."""
    code: str | None
    """The decision on both: None, the eviction holds; else the disagreement's code."""
    hint: bool = True


HINT, FIRST = ["GET Deployment web", "LIST ReplicaSet"], ["GET ReplicaSet web-rs", "GET Deployment web"]
ROWS = [
    Row("the server bears the cache's chain out: 5 requests", unchanged, 5, 6, None),
    Row("the Deployment was scaled on the server: still stopped, in 5", scaled_to_one, 5, 6, "workload"),
    Row("the pod was adopted by another ReplicaSet (a stale chain): stopped", adopted, 5, 6, "pod"),
    Row("no hint: today's reads", unchanged, 6, 6, None, hint=False),
    Row("the ReplicaSet released from the Deployment's selector", released, 6, 4, "workload"),
    Row("the ReplicaSet no longer selected but still controlled", relabelled, 8, 6, None),
    Row("the ReplicaSet names no controller", orphaned, 6, 4, "workload"),
    Row("the ReplicaSet names another Deployment", moved_to_web2, 8, 6, "workload"),
    Row("the ReplicaSet recreated under its name (another uid)", recreated, 8, 6, "pod"),
    Row("the Deployment recreated (another uid)", deployment_recreated, 8, 6, None),
    Row("the Deployment is gone (404), its ReplicaSet orphaned", deployment_gone, 6, 5, None),
    Row("the ReplicaSet is gone (404)", replicaset_gone, 6, 4, "workload"),
]
CODES = {"workload": reasons.VERIFY_WORKLOAD_CHANGED, "pod": reasons.VERIFY_POD_CHANGED}


def decide(view: ServerView, cache: World) -> str | None:
    """The planner's decision on ``view`` for the cache's first planned eviction."""
    decided = cache.plan(CONFIG)
    planned = decided.evictions[0]
    index = ClusterIndex(cache.snapshot())
    compiled = compile_settings(CONFIG)
    threshold = Threshold(*resolve_priority_threshold(compiled, index))
    found = recheck(
        planned, index.workload_of(planned.pod), view, compiled, decided.state, [], threshold, NOW
    )
    return None if found is None else found.code


def read(objects: list[Obj], cache: World, hinted: bool) -> tuple[ServerView, list[str]]:
    planned = cache.plan(CONFIG).evictions[0]
    hint: WorkloadRef | None = ClusterIndex(cache.snapshot()).workload_of(planned.pod) if hinted else None
    api = Api(objects)
    view = ServerReader(api).read(planned.pod, 1e12, hint)  # type: ignore[arg-type]
    return view, api.sent


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_the_hint_changes_only_how_many_reads_a_deployments_pod_costs_never_the_decision(row: Row) -> None:
    cache = cached_world()
    objects = stored(cache)
    row.server(objects)
    hinted, sent = read(objects, cache, row.hint)
    plain, before = read(objects, cache, hinted=False)
    assert hinted.problem == plain.problem == ""
    assert (hinted.requests, plain.requests) == (len(sent), len(before)) == (row.requests, row.today), sent
    assert replace(hinted, requests=0) == replace(plain, requests=0), "the same view as without the hint"
    expected = CODES[row.code] if row.code is not None else None
    assert decide(hinted, cache) == decide(plain, cache) == expected
    if row.requests == 5:
        assert sent[:2] == HINT and "GET ReplicaSet web-rs" not in sent, "the pod's ReplicaSet from the LIST"
    else:
        spent = row.requests - row.today
        assert sent[:spent] == HINT[:spent] and sent[spent:] == before, "the hint's reads, then today's"


def test_a_failed_read_of_the_hinted_deployment_stops_the_eviction() -> None:
    cache = cached_world()

    class Failing(Api):
        def request(self, method: str, path: str, **options: Any) -> Any:
            if path.endswith("/deployments/web"):
                self.sent.append("GET Deployment web")
                raise status_error(method, path, Response(500, {}, b"etcdserver: request timed out"))
            return super().request(method, path, **options)

    planned = cache.plan(CONFIG).evictions[0]
    api = Failing(stored(cache))
    hint = ClusterIndex(cache.snapshot()).workload_of(planned.pod)
    view = ServerReader(api).read(planned.pod, 1e12, hint)  # type: ignore[arg-type]
    assert (view.pod, view.requests, api.sent) == (None, 1, ["GET Deployment web"])
    assert "deployments/web" in view.problem
    assert decide(view, cache) == reasons.VERIFY_UNREADABLE


@pytest.mark.parametrize(
    ("owner", "requests"),
    [(None, 3), ("StatefulSet", 4)],
    ids=["a bare pod: pod, node, namespace", "a StatefulSet's pod: the set, its pods, node, namespace"],
)
def test_pods_of_other_controllers_are_read_as_before(owner: str | None, requests: int) -> None:
    world = World().node("hot", cpu="10").statefulset("db", 3)
    world.pod("db-0", on="hot", owner=owner and "db", owner_kind=owner or "ReplicaSet")
    edit(world.objects, "StatefulSet", "db")["spec"]["selector"] = {"matchLabels": {"app": "db"}}
    pod = world.snapshot().pods[0]
    hint = ClusterIndex(world.snapshot()).workload_of(pod)
    views = []
    for given in (hint, None):
        api = Api(stored(world))
        views.append(ServerReader(api).read(pod, 1e12, given))  # type: ignore[arg-type]
    assert views[0] == views[1] and views[0].requests == requests and views[0].pod is not None
