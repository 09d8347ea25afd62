"""A watch response is split into event lines however the server's chunks fall, in bounded memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from descheduler.kube import api
from descheduler.kube.api import WatchStream
from descheduler.kube.errors import DecodeError


class Chunks:
    """A urllib3 response stand-in that hands out the given chunks (not chunked transfer)."""

    chunked = False

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)

    def read1(self, size: int) -> bytes:
        return next(self._chunks, b"")


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}']),
        ([b'{"a"', b":1}\n", b'{"b":2}\n'], [b'{"a":1}', b'{"b":2}']),
        ([b'{"a":1}\n\n  \n{"b"', b":2}"], [b'{"a":1}', b'{"b":2}']),
        ([b"\n".join([b"x"] * 5) + b"\n"], [b"x"] * 5),
        ([b"x", b"y", b"z", b"\n"], [b"xyz"]),
    ],
    ids=["one chunk", "a line across chunks", "blank lines and a last line without newline", "many", "bytes"],
)
def test_event_lines_are_the_servers_lines_however_the_chunks_fall(
    chunks: list[bytes], lines: list[bytes]
) -> None:
    assert list(WatchStream(Chunks(chunks), "/api/v1/pods").lines()) == lines


def test_an_event_line_beyond_the_bound_drops_the_watch_instead_of_growing_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(api, "MAX_EVENT_BYTES", 1000)
    stream = WatchStream(Chunks([b'{"ok":1}\n'] + [b"x" * 300] * 10), "/api/v1/nodes")
    lines = stream.lines()
    assert next(lines) == b'{"ok":1}'
    with pytest.raises(DecodeError, match="/api/v1/nodes: an event longer than 1000 bytes"):
        list(lines)


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("chunks", "frames"),
    [
        ([frame(b"ab") + frame(b"") + frame(b"c")], [b"ab", b"", b"c"]),
        (
            [frame(b"ab")[:2], frame(b"ab")[2:5], frame(b"ab")[5:] + frame(b"xyz")[:1], frame(b"xyz")[1:]],
            [b"ab", b"xyz"],
        ),
        ([frame(b"\n" * 300)], [b"\n" * 300]),
    ],
    ids=["one chunk", "lengths and payloads across chunks", "newlines are payload"],
)
def test_protobuf_frames_are_the_servers_events_however_the_chunks_fall(
    chunks: list[bytes], frames: list[bytes]
) -> None:
    assert list(WatchStream(Chunks(chunks), "/api/v1/pods").frames()) == frames


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        ([frame(b"ok"), (2000).to_bytes(4, "big")], "an event longer than 1000 bytes"),
        ([frame(b"ok"), frame(b"abc")[:-1]], "the stream ended inside an event"),
    ],
    ids=["a length beyond the bound", "truncated"],
)
def test_a_protobuf_frame_beyond_the_bound_or_cut_short_drops_the_watch(
    monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], error: str
) -> None:
    monkeypatch.setattr(api, "MAX_EVENT_BYTES", 1000)
    frames = WatchStream(Chunks(chunks), "/api/v1/pods").frames()
    assert next(frames) == b"ok"
    with pytest.raises(DecodeError, match=error):
        list(frames)
