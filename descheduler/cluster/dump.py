"""Reading cluster dumps: ``kubectl get ... -o json`` (gzipped or not) or ``-o yaml``, fast, in little memory.

A real dump of a 5,000-node cluster is about 500 MB of JSON. Decoding it whole with ``json.loads`` builds
every object's dict tree at once (several times the file's size in memory), and PyYAML's pure-Python
loader takes minutes. So:

- JSON is decoded one object at a time: the top-level ``List``'s ``items`` are read with the C scanner of
  the standard library (``JSONDecoder.raw_decode``) one after the other, so only one item's dicts are
  alive while the caller turns it into a small snapshot value. The decoding cost is ``json.loads``' own.
- YAML goes through ``descheduler.strictyaml`` (libyaml when PyYAML was built with it): duplicate keys,
  aliases and deep nesting are refused there.
- A gzip file (by its magic bytes, whatever its name) is decompressed as it is read.

Bounded, whatever the file holds (it may come from anyone):

- a JSON dump (on disk, and its text once decompressed) is at most ``MAX_DUMP_BYTES`` (2 GiB: four times
  a 5,000-node cluster's dump); one object in it at most ``MAX_ITEM_CHARS`` (the API server stores
  objects of at most a few MB); JSON nested past the interpreter's recursion limit is an error;
- what is read whole (a YAML dump, a usage file) is at most ``MAX_DOCUMENT_BYTES``: YAML is parsed into
  Python objects all at once, tens of times the text's size; a big cluster is dumped as JSON;
- gzip output beyond ``MAX_GZIP_RATIO`` times the compressed size (past the first ``GZIP_RATIO_FLOOR``
  bytes) is refused as it is produced, so a gzip bomb costs a few chunks of memory and stops early
  (DEFLATE's ratio on real dumps is 5-30x; a bomb's is about 1,000x);
- a NUL character in the text is refused at once: no JSON or YAML holds one, and a bomb of zeros would
  otherwise be read whole as YAML.

Duplicate keys: YAML refuses them everywhere (``strictyaml``). In JSON the top level (a ``List``'s keys)
is checked by hand at no cost; inside items the C decoder keeps the last value, as ``json.loads`` does:
an ``object_pairs_hook`` that refuses duplicates doubles the decoding time (measured on 20,000 pods of
1.1 KB: 0.107 s plain, 0.209 s with the hook; some 2.5 s more on a 500 MB dump), and ``kubectl``, which
writes these dumps, never repeats a key.

Errors (``DumpError``) name the file and, for JSON, the line and column.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from descheduler.config.load import decode_utf8

_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = " \t\n\r"
_NOT_WHITESPACE = re.compile(r"[^ \t\n\r]")
_DECODER = json.JSONDecoder()

MAX_DUMP_BYTES = 2 * 2**30
MAX_DOCUMENT_BYTES = 128 * 2**20
MAX_ITEM_CHARS = 64 * 2**20
MAX_GZIP_RATIO = 200
GZIP_RATIO_FLOOR = 2**20
MAX_YAML_DEPTH = 64


class DumpError(ValueError):
    """A dump that cannot be read: the message names the file and what is wrong."""


class _Counted(io.RawIOBase):
    """A binary stream that counts what was read through it (a pipe has no size to compare with)."""

    def __init__(self, inner: IO[bytes], size: int = 0) -> None:
        self.inner = inner
        self.size = size
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.inner.read(len(view))
        self.count += len(data)
        self.check()
        view[: len(data)] = data
        return len(data)

    def check(self) -> None:
        """Called after each read with ``count`` updated: a subclass raises when a bound is passed."""


class _Bounded(_Counted):
    """A binary stream that refuses to give more than its bounds allow (module docstring): the plain
    file's bytes, or a gzip member's output against the size and the compression ratio."""

    def __init__(self, inner: IO[bytes], path: str | Path, limit: int, raw: _Counted | None = None) -> None:
        super().__init__(inner)
        self.path = path
        self.limit = limit
        self.raw = raw
        """The compressed file under a gzip stream (None: ``inner`` is the file itself)."""

    def check(self) -> None:
        if self.count > self.limit:
            unzipped = " once decompressed" if self.raw is not None else ""
            raise DumpError(f"{self.path}: more than the limit of {self.limit} bytes{unzipped}; refused")
        if self.raw is not None and self.count > GZIP_RATIO_FLOOR:
            compressed = max(self.raw.size, self.raw.count, 1)
            if self.count > MAX_GZIP_RATIO * compressed:
                raise DumpError(
                    f"{self.path}: gzip expands more than {MAX_GZIP_RATIO} times its {compressed} bytes "
                    "(a gzip bomb?); refused"
                )


def _open(path: str | Path, what: str, limit: int) -> tuple[IO[bytes], IO[bytes]]:
    """(the open file, its bounded binary content): gzip undone, bounds checked as it is read."""
    try:
        raw = Path(path).open("rb")  # noqa: SIM115 (closed by the caller; opening is what may fail)
    except OSError as exc:
        raise DumpError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    try:
        size = os.fstat(raw.fileno()).st_size
        if size > limit:
            raise DumpError(f"{path}: {size} bytes, more than the limit of {limit} bytes for a {what} file")
        if raw.peek(2)[:2] == _GZIP_MAGIC:
            counted = _Counted(raw, size)
            unzipped = gzip.GzipFile(fileobj=io.BufferedReader(counted))
            return raw, io.BufferedReader(_Bounded(cast(IO[bytes], unzipped), path, limit, counted))
        return raw, io.BufferedReader(_Bounded(raw, path, limit))
    except OSError as exc:
        raw.close()
        raise DumpError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    except BaseException:
        raw.close()
        raise


def read_text(path: str | Path, what: str = "cluster", limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The file's text, gunzipped first if it is gzip; UTF-8 required; at most ``limit`` bytes."""
    raw, binary = _open(path, what, limit)
    with raw:
        try:
            data = binary.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise DumpError(f"{path}: not a valid gzip file: {exc}") from None
    try:
        text = decode_utf8(data)
    except ValueError as exc:
        raise DumpError(f"{path}: {exc}") from None
    _refuse_nul(path, text, 0)
    return text


def _refuse_nul(path: str | Path, text: str, base: int) -> None:
    nul = text.find("\x00")
    if nul >= 0:
        raise DumpError(f"{path}: a NUL character at offset {base + nul}: binary data, not JSON or YAML")


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
            if pos < len(text) and text[pos] not in _WHITESPACE:
                return text[pos]
            found = _NOT_WHITESPACE.search(text, pos)
            if found is not None:
                self.pos = found.start()
                return text[self.pos]
            self.pos = len(text)
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
                if len(self.text) - self.pos > MAX_ITEM_CHARS:
                    too_big = f"one value is larger than the limit of {MAX_ITEM_CHARS} characters"
                    raise self.fail(too_big) from None
                if self.fill():
                    continue
                self.pos = exc.pos
                raise self.fail(exc.msg) from None
            except RecursionError:
                raise self.fail("nested too deeply (past the interpreter's recursion limit)") from None
            except ValueError as exc:  # an integer of more than 4,300 digits (int_max_str_digits)
                raise self.fail(str(exc)) from None
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
        key_at = scanner.pos
        key = scanner.value()
        if not isinstance(key, str):
            raise scanner.fail("object keys must be strings")
        if key in head or (key == "items" and streamed):
            scanner.pos = key_at
            raise scanner.fail(f"duplicate key {key[:80]!r}")
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

    Raises ``DumpError`` (unreadable, too large, a gzip bomb, bad gzip, not UTF-8, bad JSON or YAML) as
    it goes."""
    raw, binary = _open(path, what, MAX_DUMP_BYTES)
    with raw:

        def more(size: int) -> str:
            try:
                chunk = stream.read(size)
            except UnicodeDecodeError:
                # the whole file again, to say exactly where (raises DumpError)
                read_text(path, what, MAX_DUMP_BYTES)
                raise  # not reached: read_text found the same bad byte
            except (OSError, EOFError, zlib.error) as exc:
                raise DumpError(f"{path}: not a valid gzip file: {exc}") from None
            _refuse_nul(path, chunk, 0)
            return chunk

        stream = io.TextIOWrapper(binary, encoding="utf-8", errors="strict", newline="")
        head = more(CHUNK)
        if is_json(head):
            yield from iter_json_items(
                path,
                head.lstrip("\ufeff"),
                more,
                lambda: read_text(path, what, MAX_DUMP_BYTES).lstrip("\ufeff"),
            )
            return
        rest = [head]
        size = len(head)
        while chunk := more(CHUNK):
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:
                raise DumpError(
                    f"{path}: a YAML {what} file larger than {MAX_DOCUMENT_BYTES} bytes; "
                    "give a large cluster as JSON (kubectl get ... -o json), which is read item by item"
                )
            rest.append(chunk)
        yield from iter_documents(path, "".join(rest))


def iter_documents(path: str | Path, text: str) -> Iterator[Any]:
    """The dump's objects or YAML documents, JSON streamed item by item, YAML through ``strictyaml``."""
    if is_json(text):
        yield from iter_json_items(path, text.lstrip("\ufeff"))
        return
    from descheduler.strictyaml import YamlInputError, iter_all

    try:
        yield from iter_all(text, str(path), max_bytes=MAX_DOCUMENT_BYTES, max_depth=MAX_YAML_DEPTH)
    except YamlInputError as exc:
        where = f" (line {exc.line}, column {exc.column or 1})" if exc.line is not None else ""
        raise DumpError(f"{path}: not valid YAML{where}: {exc.problem}") from None
