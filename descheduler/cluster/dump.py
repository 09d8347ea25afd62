"""Reading cluster dumps: ``kubectl get ... -o json`` (gzipped or not) or ``-o yaml``, fast, in little memory.

A real dump of a 5,000-node cluster is about 500 MB of JSON. Decoding it whole with ``json.loads`` builds
every object's dict tree at once (several times the file's size in memory), and PyYAML's pure-Python
loader takes minutes. So:

- JSON is decoded one object at a time: the top-level ``List``'s ``items`` are read with the C scanner of
  the standard library (``JSONDecoder.raw_decode``) one after the other, so only one item's dicts are
  alive while the caller turns it into a small snapshot value. The decoding cost is ``json.loads``' own.
- YAML goes through libyaml (``yaml.CSafeLoader``) when PyYAML was built with it, else the Python loader.
- A gzip file (by its magic bytes, whatever its name) is decompressed first.

Errors name the file and, for JSON, the line and column.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import yaml

from descheduler.config.load import decode_utf8

_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()

YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when available (tens of times faster), PyYAML's own otherwise; same results."""


class DumpError(ValueError):
    """A dump that cannot be read: the message names the file and what is wrong."""


def read_text(path: str | Path, what: str = "cluster") -> str:
    """The file's text, gunzipped first if it is gzip; UTF-8 required."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DumpError(f"{path}: not a valid gzip file: {exc}") from None
    try:
        return decode_utf8(data)
    except ValueError as exc:
        raise DumpError(f"{path}: {exc}") from None


def is_json(text: str) -> bool:
    """JSON dumps start with ``{`` or ``[``; anything else is read as YAML (a superset, but far slower)."""
    stripped = text.lstrip(_WHITESPACE + "\ufeff")
    return stripped[:1] in ("{", "[")


CHUNK = 16 * 2**20
"""Characters read at a time from a JSON dump: memory for the text stays about twice this."""


class _Scanner:
    """Walks JSON text by hand at the top levels and lets the C decoder read each value.

    The text comes in chunks (``more``); what was consumed is dropped when the next chunk comes in, so a
    dump of any size needs a few chunks of memory. A value cut by a chunk's end is decoded again with
    the next chunk (a value larger than a chunk doubles the read until it fits)."""

    def __init__(
        self,
        path: str | Path,
        text: str,
        more: Callable[[int], str] | None = None,
        reread: Callable[[], str] | None = None,
    ) -> None:
        self.path = path
        self.text = text
        self.pos = 0
        self.more = more
        self.reread = reread
        """The whole text again (only to say where an error is, once chunks were dropped)."""
        self.base = 0
        """Offset of ``text[0]`` in the whole text."""

    def fill(self) -> bool:
        """Drop what was consumed and append the next chunk; False at the end of the input.

        Lines are not counted here: that would read the whole dump once more for the rare error; an
        error's line and column are worked out when it happens (``where``)."""
        if self.more is None:
            return False
        chunk = self.more(max(CHUNK, len(self.text) - self.pos))
        if not chunk:
            self.more = None
            return False
        self.base += self.pos
        self.text = self.text[self.pos :] + chunk
        self.pos = 0
        return True

    def where(self) -> str:
        if self.base == 0:
            text, offset = self.text, self.pos
        elif self.reread is not None:
            text, offset = self.reread(), self.base + self.pos
        else:
            return f"character {self.base + self.pos + 1}"
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        return f"line {line}, column {column}"

    def fail(self, problem: str) -> DumpError:
        return DumpError(f"{self.path}: not valid JSON ({self.where()}): {problem}")

    def skip(self) -> str:
        """Skip whitespace; the next character ("" at the end)."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self.fill():
                return ""

    def expect(self, char: str) -> None:
        if self.skip() != char:
            found = self.text[self.pos : self.pos + 1] or "the end of the file"
            raise self.fail(f"expected {char!r}, found {found!r}")
        self.pos += 1

    def value(self) -> Any:
        self.skip()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.fill():
                    continue
                self.pos = exc.pos
                raise self.fail(exc.msg) from None
            if end == len(self.text) and self.fill():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value

    def array(self) -> Iterator[Any]:
        """The elements of the array starting here, one at a time."""
        self.expect("[")
        if self.skip() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self.skip() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return


def iter_json_items(
    path: str | Path,
    text: str,
    more: Callable[[int], str] | None = None,
    reread: Callable[[], str] | None = None,
) -> Iterator[Any]:
    """Every Kubernetes object of a JSON dump (``text`` and then what ``more(n)`` reads), items of
    ``List`` documents yielded one by one. ``reread`` gives the whole text again, for an error's line.

    An item is yielded as soon as it is decoded and never kept, so only one item's dict tree is alive
    at a time; a document that is not a list is yielded whole.
    """
    scanner = _Scanner(path, text, more, reread)
    while scanner.skip():
        first = scanner.text[scanner.pos]
        if first == "{":
            yield from _object_items(scanner)
        elif first == "[":
            yield from scanner.array()
        else:
            yield scanner.value()


def _object_items(scanner: _Scanner) -> Iterator[Any]:
    """A top-level object: a ``*List`` yields its items as they are decoded, anything else itself."""
    start = scanner.pos
    scanner.expect("{")
    head: dict[str, Any] = {}
    streamed = False
    pending: list[dict[str, Any]] = []
    if scanner.skip() == "}":
        scanner.pos += 1
        yield head
        return
    while True:
        key = scanner.value()
        if not isinstance(key, str):
            raise scanner.fail("object keys must be strings")
        scanner.expect(":")
        if key == "items" and scanner.skip() == "[" and not streamed:
            streamed = True
            item_kind = _list_item_kind(head)
            for item in scanner.array():
                if isinstance(item, dict) and "kind" not in item:
                    if not item_kind:  # the list's own kind may come after its items: wait for it
                        pending.append(item)
                        continue
                    item["kind"] = item_kind
                yield item
        else:
            head[key] = scanner.value()
        if scanner.skip() == ",":
            scanner.pos += 1
            continue
        scanner.expect("}")
        break
    kind = head.get("kind")
    if streamed:
        if kind is not None and not str(kind).endswith("List"):
            scanner.pos = start
            raise scanner.fail(f"an object of kind {kind!r} has items; only a List may")
        item_kind = _list_item_kind(head)
        for item in pending:
            if item_kind:
                item["kind"] = item_kind
            yield item
        return
    yield head


def _list_item_kind(head: dict[str, Any]) -> str:
    """``PodList`` -> ``Pod``: typed lists leave ``kind`` out of their items (kubectl's ``List`` does not)."""
    kind = str(head.get("kind", ""))
    return kind[: -len("List")] if kind.endswith("List") and kind != "List" else ""


def load_documents(path: str | Path, what: str = "cluster") -> Iterator[Any]:
    """The file's objects (JSON, streamed from disk chunk by chunk) or YAML documents; gzip undone first.

    Raises ``DumpError`` (unreadable, bad gzip, not UTF-8, bad JSON) or ``yaml.YAMLError`` as it goes."""
    try:
        raw = Path(path).open("rb")  # noqa: SIM115 (closed below; opening is what may fail)
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    with raw:
        gzipped = raw.peek(2)[:2] == _GZIP_MAGIC
        binary = cast(IO[bytes], gzip.GzipFile(fileobj=raw) if gzipped else raw)

        def more(size: int) -> str:
            try:
                return stream.read(size)
            except UnicodeDecodeError:
                read_text(path, what)  # the whole file again, to say exactly where (raises DumpError)
                raise  # not reached: read_text found the same bad byte
            except (OSError, EOFError, zlib.error) as exc:
                raise DumpError(f"{path}: not a valid gzip file: {exc}") from None

        stream = io.TextIOWrapper(binary, encoding="utf-8", errors="strict", newline="")
        head = more(CHUNK)
        if is_json(head):
            yield from iter_json_items(
                path, head.lstrip("\ufeff"), more, lambda: read_text(path, what).lstrip("\ufeff")
            )
            return
        rest = [head]
        while chunk := more(CHUNK):
            rest.append(chunk)
        yield from iter_documents(path, "".join(rest))


def iter_documents(path: str | Path, text: str) -> Iterator[Any]:
    """The dump's objects or YAML documents, JSON streamed item by item, YAML through libyaml if present."""
    if is_json(text):
        yield from iter_json_items(path, text.lstrip("\ufeff"))
        return
    try:
        yield from yaml.load_all(text, Loader=YamlLoader)
    except yaml.YAMLError:
        if YamlLoader is yaml.SafeLoader:
            raise
        # libyaml places some marks elsewhere; PyYAML's error reads the same on every install.
        for _ in yaml.load_all(text, Loader=yaml.SafeLoader):
            pass
        raise
