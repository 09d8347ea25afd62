"""The cache with ``encoding="protobuf"``: pods asked for in protobuf fill the same store as in JSON; a page
the reader does not reproduce is asked for again in JSON (same continue token); a watch event it does not
reproduce closes the watch and relists in JSON, which holds until the next ordinary relist."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from descheduler.kube.api import PROTOBUF_ACCEPT, PROTOBUF_WATCH_ACCEPT
from descheduler.kube.cache import ClusterCache, _Expired, _ProtoFallback
from tests.support import protowriter as pw
from tests.unit.test_fastparse import plain_pod, real_pod, resized_pod

JSON = "application/json"


def named(build: Any, name: str, **status: Any) -> dict[str, Any]:
    pod = build()
    pod.pop("kind", None)
    pod.pop("apiVersion", None)
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = "default"
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    pod["metadata"]["resourceVersion"] = "5"
    for container in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
        container.setdefault("resources", {})
    pod.setdefault("status", {}).update(status)
    return pod


GOOD = [named(real_pod, "a"), named(plain_pod, "b"), named(resized_pod, "c")]
NO_QOS = named(plain_pod, "no-qos", qosClass=None)
"""A pod the fast path leaves to parse.py (it derives the QoS class): its page or event needs JSON."""
del NO_QOS["status"]["qosClass"]


def json_body(items: list[Any], token: str = "") -> bytes:
    meta = {"resourceVersion": "9", **({"continue": token} if token else {})}
    return json.dumps({"kind": "PodList", "metadata": meta, "items": items}).encode()


@dataclass
class _Stream:
    frames_: list[bytes]
    protobuf: bool = True
    closed: bool = False

    def frames(self) -> Iterator[bytes]:
        yield from self.frames_

    def lines(self) -> Iterator[bytes]:
        yield from self.frames_

    def decode(self, line: bytes) -> Any:
        return json.loads(line)

    def close(self) -> None:
        self.closed = True


@dataclass
class _Api:
    """Pages by continue token, each as protobuf and as JSON; the accept header of every request."""

    pages: list[list[Any]]
    proto_bodies: dict[int, bytes] = field(default_factory=dict)
    streams: list[_Stream] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def request_bytes(self, method: str, path: str, *, query: Mapping[str, Any], accept: str = JSON) -> bytes:
        index = int(query.get("continue") or 0)
        self.asked.append((accept, str(index)))
        token = str(index + 1) if index + 1 < len(self.pages) else ""
        if accept == PROTOBUF_ACCEPT:
            return self.proto_bodies.get(index) or pw.list_body("Pod", self.pages[index], "9", token)
        return json_body(self.pages[index], token)

    def watch(
        self, path: str, query: Mapping[str, Any], *, read_timeout: float, accept: str = JSON
    ) -> _Stream:
        self.asked.append((accept, "watch"))
        return self.streams.pop(0)


def reflector(api: _Api, encoding: str, watch_list: str = "off") -> Any:
    cache = ClusterCache(api, resources=["pods"], encoding=encoding, watch_list=watch_list)  # type: ignore[arg-type]
    return cache._reflectors["pods"]


def listed(api: _Api, encoding: str) -> Any:
    r = reflector(api, encoding)
    r._list_once(paginate=True)
    return r


def store(r: Any) -> tuple[Any, ...]:
    return (r.items, r.errors, r.bad_pod_nodes, r.resource_version)


@pytest.mark.parametrize(
    ("pages", "bodies", "as_json"),
    [
        ([GOOD[:2], GOOD[2:]], {}, []),
        ([GOOD[:1], [GOOD[1], NO_QOS], GOOD[2:]], {}, ["1"]),
        ([GOOD[:2], GOOD[2:]], {1: pw.list_body("Pod", GOOD[2:])[:-5]}, ["1"]),
        ([GOOD[:2], GOOD[2:]], {0: json_body(GOOD[:2], "1")}, []),  # the server answered JSON: read as such
    ],
    ids=["all-protobuf", "an-object-not-reproduced", "a-page-not-decoded", "server-answers-json"],
)
def test_a_protobuf_list_stores_what_a_json_list_stores(
    pages: list[list[Any]], bodies: dict[int, bytes], as_json: list[str]
) -> None:
    proto_api = _Api(pages, bodies)
    from_proto, from_json = listed(proto_api, "protobuf"), listed(_Api(pages), "json")
    assert store(from_proto) == store(from_json)
    assert len(from_proto.items) == sum(map(len, pages))
    asked_json = [page for accept, page in proto_api.asked if accept == JSON]
    assert asked_json == as_json  # only the page not reproduced, by its own continue token
    assert from_proto.stats["proto_pages_as_json"] == len(as_json)


def event(kind: str, obj: Any) -> bytes:
    return pw.event_frame(kind, "Pod", obj)


def status_frame(code: int, reason: str) -> bytes:
    status = pw.encode(
        pw.META + "Status", {"status": "Failure", "message": "too old", "reason": reason, "code": code}
    )
    return pw.delimited(1, b"ERROR") + pw.delimited(2, pw.delimited(1, pw.envelope("Status", "v1", status)))


def bookmark(rv: str, end: bool = False) -> bytes:
    annotations = {"k8s.io/initial-events-end": "true"} if end else {}
    return event("BOOKMARK", {"metadata": {"resourceVersion": rv, "annotations": annotations}})


def json_line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": {"kind": "Pod", **obj}}).encode()


def modified(build: Any, name: str, rv: str) -> dict[str, Any]:
    pod = named(build, name)
    pod["metadata"]["resourceVersion"] = rv
    return pod


WATCHES = [
    ("ADDED", modified(real_pod, "new", "11")),
    ("MODIFIED", modified(resized_pod, "a", "12")),
    ("DELETED", modified(plain_pod, "b", "13")),
]


def test_protobuf_watch_events_change_the_store_as_json_ones_do() -> None:
    results = []
    for encoding, frames in (
        ("protobuf", [*(event(k, o) for k, o in WATCHES), bookmark("14")]),
        (
            "json",
            [
                *(json_line(k, o) for k, o in WATCHES),
                json_line("BOOKMARK", {"metadata": {"resourceVersion": "14"}}),
            ],
        ),
    ):
        api = _Api([GOOD], streams=[_Stream(frames, protobuf=encoding == "protobuf")])
        r = listed(api, encoding)
        assert r._watch() == 4
        results.append((store(r), r.stats["events"], r.stats["bookmarks"]))
        assert (PROTOBUF_WATCH_ACCEPT if encoding == "protobuf" else JSON, "watch") in api.asked
    assert results[0] == results[1]
    assert sorted(results[0][0][0]) == ["default/a", "default/c", "default/new"]


@pytest.mark.parametrize(
    ("frame", "raised"),
    [
        (event("MODIFIED", NO_QOS), _ProtoFallback),
        (b"\x0a\x05ADDED\x12\x03\x0a\x01x", _ProtoFallback),
        (status_frame(410, "Expired"), _Expired),
    ],
    ids=["object-not-reproduced", "frame-not-decoded", "error-410-relists-as-in-json"],
)
def test_a_watch_event_not_reproduced_closes_the_watch(frame: bytes, raised: type[Exception]) -> None:
    stream = _Stream([event("ADDED", modified(plain_pod, "d", "10")), frame])
    r = listed(_Api([GOOD], streams=[stream]), "protobuf")
    with pytest.raises(raised):
        r._watch()
    assert stream.closed and "default/d" in r.items


def test_after_a_fallback_json_holds_until_the_next_ordinary_relist() -> None:
    api = _Api([GOOD])
    r = listed(api, "protobuf")
    assert r._relist_in_json("test") is True and r.json_fallback
    api.asked.clear()
    r._list_once(paginate=True)
    assert api.asked == [(JSON, "0")]
    r.stop.set()  # _relist_after waits its backoff on this event
    r._relist_after("watch_expired_relisting")
    api.asked.clear()
    r._list_once(paginate=True)
    assert api.asked == [(PROTOBUF_ACCEPT, "0")] and r.stats["proto_relists"] == 1


@pytest.mark.parametrize(
    ("frames", "names", "raised"),
    [
        (
            [event("ADDED", GOOD[0]), bookmark("7"), event("ADDED", GOOD[1]), bookmark("8", end=True)],
            ["a", "b"],
            None,
        ),
        ([event("ADDED", GOOD[0]), event("DELETED", GOOD[0]), bookmark("8", end=True)], [], None),
        ([event("ADDED", GOOD[0]), event("ADDED", NO_QOS), bookmark("8", end=True)], None, _ProtoFallback),
    ],
    ids=["adds-until-the-end-bookmark", "a-delete-applies", "an-object-not-reproduced-relists-in-json"],
)
def test_a_protobuf_watch_list(
    frames: list[bytes], names: list[str] | None, raised: type[Exception] | None
) -> None:
    r = reflector(_Api([], streams=[_Stream(frames)]), "protobuf", watch_list="on")
    if raised is not None:
        with pytest.raises(raised):
            r._sync()
        assert not r.synced.is_set()
        return
    r._sync()
    assert r.synced.is_set() and r.resource_version == "8"
    assert sorted(r.items) == [f"default/{n}" for n in names or ()]


def test_encoding_must_be_known() -> None:
    with pytest.raises(ValueError, match="encoding must be one of json, protobuf"):
        ClusterCache(_Api([]), encoding="cbor")  # type: ignore[arg-type]
