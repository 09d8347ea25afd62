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
