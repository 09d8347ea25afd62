"""The cache's WatchList sync: a watch with ``sendInitialEvents`` fills a fresh store that replaces the old
one at the ``k8s.io/initial-events-end`` bookmark; a refusal falls back to LIST (remembered); a stream that
ends or stalls before the bookmark leaves the resource unsynced."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog

from descheduler.kube.cache import ClusterCache
from descheduler.kube.errors import ApiStatusError, KubeError
from tests.apiserver.objects import pod


def _event(kind: str, obj: Mapping[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def _bookmark(rv: str, *, end: bool) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return _event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": meta})


def _pod(name: str, rv: str = "5") -> dict[str, Any]:
    obj = pod(name, node="n1")
    obj["metadata"]["resourceVersion"] = rv
    return obj


class _Stalled(KubeError):
    """What a read timeout on the stream raises."""


@dataclass
class _Stream:
    events: list[bytes]
    stall_after: bool = False
    closed: bool = False

    def lines(self) -> Iterator[bytes]:
        yield from self.events
        if self.stall_after:
            raise _Stalled("watch /api/v1/pods: read timed out")

    def decode(self, line: bytes) -> Any:
        return json.loads(line)

    def close(self) -> None:
        self.closed = True


@dataclass
class _Api:
    """Answers each WatchList with the next scripted stream (or raises it), a LIST with ``listed``."""

    streams: list[_Stream | ApiStatusError]
    listed: list[dict[str, Any]] = field(default_factory=list)
    watches: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    lists: int = 0

    def watch(
        self, path: str, query: Mapping[str, Any], *, read_timeout: float, accept: str = "application/json"
    ) -> _Stream:
        self.watches.append((dict(query), read_timeout))
        answer = self.streams.pop(0)
        if isinstance(answer, ApiStatusError):
            raise answer
        return answer

    def request_bytes(
        self, method: str, path: str, *, query: Mapping[str, Any], accept: str = "application/json"
    ) -> bytes:
        self.lists += 1
        return json.dumps({"metadata": {"resourceVersion": "9"}, "items": self.listed}).encode()


def _reflector(api: _Api, mode: str = "auto") -> Any:
    cache = ClusterCache(api, resources=["pods"], watch_list=mode, read_grace=3.0)  # type: ignore[arg-type]
    return cache._reflectors["pods"]


def _names(reflector: Any) -> list[str]:
    return sorted(reflector.items)


SYNCS = [
    pytest.param(
        [_event("ADDED", _pod("a")), _event("ADDED", _pod("b")), _bookmark("7", end=True)],
        ["default/a", "default/b"],
        "7",
        id="initial-adds-then-the-end-bookmark-sync",
    ),
    pytest.param(
        [
            _event("ADDED", _pod("a")),
            _bookmark("6", end=False),
            _event("ADDED", _pod("b")),
            _event("DELETED", _pod("a")),
            _bookmark("8", end=True),
        ],
        ["default/b"],
        "8",
        id="a-plain-bookmark-does-not-end-the-sync-and-deletes-apply",
    ),
    pytest.param([_bookmark("3", end=True)], [], "3", id="an-empty-resource-syncs-on-the-bookmark-alone"),
]


@pytest.mark.parametrize(("events", "expected", "rv"), SYNCS)
def test_a_watch_list_fills_the_store_until_the_end_bookmark(
    events: list[bytes], expected: list[str], rv: str
) -> None:
    stream = _Stream(events)
    api = _Api([stream])
    reflector = _reflector(api)
    reflector._sync()
    assert reflector.synced.is_set()
    assert _names(reflector) == expected
    assert reflector.resource_version == rv
    assert api.lists == 0 and stream.closed
    query, read_timeout = api.watches[0]
    assert query["sendInitialEvents"] is True and query["resourceVersionMatch"] == "NotOlderThan"
    assert query["allowWatchBookmarks"] is True and query["resourceVersion"] == ""
    assert read_timeout == 3.0  # the stall guard before initial-events-end is the read grace


def test_a_resync_by_watch_list_drops_objects_deleted_while_away() -> None:
    first = _Stream([_event("ADDED", _pod(n)) for n in ("a", "b", "c")] + [_bookmark("5", end=True)])
    second = _Stream([_event("ADDED", _pod("a", "9")), _bookmark("10", end=True)])
    reflector = _reflector(_Api([first, second]))
    reflector._sync()
    assert _names(reflector) == ["default/a", "default/b", "default/c"]
    reflector._sync()
    assert _names(reflector) == ["default/a"]
    assert reflector.resource_version == "10"


UNFINISHED = [
    pytest.param(_Stream([_event("ADDED", _pod("x"))]), id="a-stream-ending-before-the-bookmark"),
    pytest.param(
        _Stream([_event("ADDED", _pod("x"))], stall_after=True), id="a-stream-stalling-before-the-bookmark"
    ),
    pytest.param(
        _Stream([_event("ADDED", _pod("x")), _bookmark("4", end=False)]), id="only-a-plain-bookmark"
    ),
]


@pytest.mark.parametrize("stream", UNFINISHED)
def test_an_unfinished_initial_stream_leaves_the_old_store_and_no_sync(stream: _Stream) -> None:
    reflector = _reflector(_Api([stream]))
    reflector.items = {"default/old": object()}
    with pytest.raises(KubeError):
        reflector._sync()
    assert not reflector.synced.is_set()
    assert _names(reflector) == ["default/old"]
    assert stream.closed


@pytest.mark.parametrize("status", [400, 422])
def test_a_refused_watch_list_falls_back_to_list_once_and_remembers(status: int) -> None:
    refusal = ApiStatusError(
        status, "sendInitialEvents is forbidden for watch unless the WatchList feature gate"
    )
    api = _Api([refusal], listed=[_pod("a")])
    reflector = _reflector(api)
    with structlog.testing.capture_logs() as logs:
        reflector._sync()
        reflector._sync()
    assert reflector.synced.is_set() and _names(reflector) == ["default/a"]
    assert len(api.watches) == 1 and api.lists == 2
    assert [entry["event"] for entry in logs].count("watch_list_refused") == 1


def test_watch_list_on_does_not_fall_back_to_list() -> None:
    api = _Api([ApiStatusError(422, "forbidden")])
    reflector = _reflector(api, "on")
    with pytest.raises(ApiStatusError):
        reflector._sync()
    assert api.lists == 0 and not reflector.synced.is_set()


def test_watch_list_off_lists_without_asking() -> None:
    api = _Api([], listed=[_pod("a")])
    reflector = _reflector(api, "off")
    reflector._sync()
    assert api.watches == [] and api.lists == 1 and reflector.synced.is_set()


def test_an_unknown_watch_list_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="watch_list must be one of auto, on, off"):
        ClusterCache(_Api([]), watch_list="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "lists"), [("auto", 1), ("on", 0)])
def test_a_server_that_never_sends_the_end_bookmark_gets_lists_after_three_tries_under_auto(
    mode: str, lists: int
) -> None:
    """A server before 1.27 ignores sendInitialEvents: a plain watch, the end bookmark never comes."""
    streams: list[_Stream | ApiStatusError] = [
        _Stream([_event("ADDED", _pod("a"))], stall_after=True) for _ in range(3)
    ]
    api = _Api(streams, listed=[_pod("a")])
    reflector = _reflector(api, mode)
    for _ in range(2):
        with pytest.raises(KubeError):
            reflector._sync()
    with structlog.testing.capture_logs() as logs:
        if mode == "auto":
            reflector._sync()
        else:
            with pytest.raises(KubeError):
                reflector._sync()
    assert api.lists == lists and reflector.synced.is_set() == (mode == "auto")
    assert [e["event"] for e in logs].count("watch_list_refused") == lists
