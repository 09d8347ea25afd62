"""A strict, bounded YAML reader for everything a user or a cluster hands us.

PyYAML's ``safe_load`` is safe against code execution but not against the rest of a hostile or sloppy input:

- a duplicate mapping key silently wins (a second ``dryRun:`` turns an audit into live evictions);
  Kubernetes' own strict decoding refuses duplicate fields, so we do too, naming both lines;
- aliases expand without bound (a 1 KB "billion laughs" becomes 10^8 objects), so aliases and merge keys
  (``<<``) are refused; an anchor that is never referred to expands nothing and is accepted;
- nesting is limited by the interpreter's recursion depth (or libyaml's own limit of 1,000), so nesting
  deeper than ``max_depth`` collections is an error, found before any recursion could grow with it;
- integers of more than 4,300 digits, floats that overflow to infinity (or ``.inf``/``.nan``, which no
  Kubernetes field holds) and impossible timestamps raise a bare ``ValueError`` inside the constructor;
  here they are a ``YamlInputError`` naming the line;
- the text is bounded (``max_bytes``) before anything is parsed.

libyaml (``CSafeLoader``) is used when PyYAML was built with it: cluster dumps of hundreds of MB go through
this reader, and libyaml is tens of times faster. Both loaders give the same results and the same errors:
the pure loader checks aliases and depth as it composes, the libyaml one as it constructs (libyaml composes
in C, where nothing can be hooked), and on the error path the text is read again with the pure loader (up
to 256 KiB; past that libyaml's events are scanned for aliases and depth) so that the error reported is
the one the pure loader reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

DEFAULT_MAX_BYTES = 4 * 2**20
DEFAULT_MAX_DEPTH = 64
_MAX_NUMBER_CHARS = 4300
"""The longest integer or float text accepted: Python's own limit for ``int(str)`` (CVE-2020-10735)."""
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_DEPTH_ATTR = "_strictyaml_depth"


class YamlInputError(ValueError):
    """YAML that is malformed or outside our bounds: one human line naming the source and the place."""

    def __init__(self, source: str, problem: str, line: int | None = None, column: int | None = None):
        self.source = source
        self.problem = problem
        self.line = line
        self.column = column
        where = source if line is None else f"{source}, line {line}, column {column or 1}"
        super().__init__(f"{where}: {problem}")


class _Problem(Exception):
    """Raised inside the loader (which does not know the source); turned into ``YamlInputError``."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None):
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.column = column


def _at(node: Node | Event) -> tuple[int | None, int | None]:
    mark = node.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _alias_problem(event: AliasEvent) -> _Problem:
    return _Problem(f"YAML aliases (*{str(event.anchor)[:40]}) are not accepted", *_at(event))


def _depth_problem(at: Node | Event, max_depth: int) -> _Problem:
    return _Problem(f"nesting deeper than {max_depth} levels is not accepted", *_at(at))


class _StrictConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor that refuses duplicate keys, aliases, merge keys, depth and out-of-range numbers."""

    max_depth = DEFAULT_MAX_DEPTH

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A node met a second time was reached through an alias (composers share the anchored node).
        if node in self.constructed_objects or node in self.recursive_objects:
            raise _Problem("YAML aliases are not accepted", *_at(node))
        return super().construct_object(node, deep=deep)

    may_alias = True
    """False when the text holds no ``*``: no node can be shared, so plain strings skip the bookkeeping."""

    def _depth_of(self, node: Node) -> int:
        depth: int = getattr(node, _DEPTH_ATTR, 1)
        if depth > self.max_depth:
            raise _depth_problem(node, self.max_depth)
        return depth

    def _child(self, child: Node, depth: int, deep: bool) -> Any:
        """Construct ``child`` of a collection at ``depth``; strings directly (most of a cluster dump)."""
        if type(child) is ScalarNode:
            if child.tag == _STR_TAG and not self.may_alias:
                return child.value
        elif depth >= self.max_depth:
            raise _depth_problem(child, self.max_depth)
        else:
            setattr(child, _DEPTH_ATTR, depth + 1)
        return self.construct_object(child, deep=deep)

    def construct_sequence(self, node: Node, deep: bool = False) -> list[Any]:
        if not isinstance(node, SequenceNode):
            raise _Problem(f"expected a sequence, found a {type(node).__name__}", *_at(node))
        depth = self._depth_of(node)
        child = self._child
        return [child(item, depth, deep) for item in node.value]

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            raise _Problem(f"expected a mapping, found a {type(node).__name__}", *_at(node))
        depth = self._depth_of(node)
        child = self._child
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise _Problem("YAML merge keys (<<) are not accepted", *_at(key_node))
            key = child(key_node, depth, deep)
            try:
                seen = key in mapping
            except TypeError:
                raise _Problem(f"a mapping key cannot be a {type(key).__name__}", *_at(key_node)) from None
            if seen:
                raise _Problem(
                    f"duplicate key {_short(key)} at line {key_node.start_mark.line + 1} "
                    f"(first at line {self._first_line(node, key_node)})",
                    *_at(key_node),
                )
            mapping[key] = child(value_node, depth, deep)
        return mapping

    def _first_line(self, node: MappingNode, duplicate: Node) -> int:
        """Where the key of ``duplicate`` first appears in ``node`` (error path only: nothing kept)."""
        key = self._plain(duplicate)
        for key_node, _ in node.value:
            if key_node is not duplicate and self._plain(key_node) == key:
                return int(key_node.start_mark.line) + 1
        return int(node.start_mark.line) + 1

    def _plain(self, node: Node) -> Any:
        """A key as constructed, without the alias bookkeeping (keys are scalars or were constructed)."""
        if isinstance(node, ScalarNode):
            constructor = self.yaml_constructors.get(node.tag)
            return constructor(self, node) if constructor is not None else node.value
        return self.constructed_objects.get(node, _MISSING)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        if len(node.value) > _MAX_NUMBER_CHARS:
            raise _Problem(f"integer of more than {_MAX_NUMBER_CHARS} characters is not accepted", *_at(node))
        try:
            return int(super().construct_yaml_int(node))
        except (ValueError, IndexError) as exc:  # IndexError: an empty ``!!int ""``
            raise _Problem(f"invalid integer {_short(node.value, 40)}: {exc}", *_at(node)) from None

    def construct_yaml_float(self, node: ScalarNode) -> float:
        if len(node.value) > _MAX_NUMBER_CHARS:
            raise _Problem(f"number of more than {_MAX_NUMBER_CHARS} characters is not accepted", *_at(node))
        try:
            value = float(super().construct_yaml_float(node))
        except (ValueError, OverflowError, IndexError) as exc:
            raise _Problem(f"invalid float {_short(node.value, 40)}: {exc}", *_at(node)) from None
        if not math.isfinite(value):
            raise _Problem(f"float {_short(node.value, 40)} is out of range (not finite)", *_at(node))
        return value

    def construct_yaml_timestamp(self, node: ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError, AttributeError) as exc:  # AttributeError: ``!!timestamp x``
            raise _Problem(f"invalid timestamp {_short(node.value, 40)}: {exc}", *_at(node)) from None

    def construct_yaml_bool(self, node: ScalarNode) -> bool:
        try:
            return bool(super().construct_yaml_bool(node))
        except KeyError:  # ``!!bool maybe``
            raise _Problem(f"invalid boolean {_short(node.value, 40)}", *_at(node)) from None

    def construct_refused(self, node: Node) -> Any:
        """``!!omap``, ``!!pairs`` and ``!!set``: no Kubernetes or config field uses them."""
        raise _Problem(f"YAML tag {node.tag} is not accepted", *_at(node))


_MISSING = object()
_add: Any = _StrictConstructor.add_constructor
_add("tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int)
_add("tag:yaml.org,2002:float", _StrictConstructor.construct_yaml_float)
_add("tag:yaml.org,2002:timestamp", _StrictConstructor.construct_yaml_timestamp)
_add("tag:yaml.org,2002:bool", _StrictConstructor.construct_yaml_bool)
for _tag in ("omap", "pairs", "set"):
    _add(f"tag:yaml.org,2002:{_tag}", _StrictConstructor.construct_refused)


class _PureLoader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _StrictConstructor,
    yaml.resolver.Resolver,
):
    """PyYAML's Python loader, checking aliases and depth while composing (it composes recursively)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _StrictConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._compose_depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise _alias_problem(event)
        if isinstance(event, CollectionStartEvent):
            self._compose_depth += 1
            try:
                if self._compose_depth > self.max_depth:
                    raise _depth_problem(event, self.max_depth)
                return super().compose_node(parent, index)
            finally:
                self._compose_depth -= 1
        return super().compose_node(parent, index)


_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None) if yaml.__with_libyaml__ else None


def _libyaml_depth_is_bounded() -> bool:
    """libyaml composes recursively in C; use it only if it stops deep nesting itself (0.2.5 and later)."""
    if _CParser is None:
        return False
    try:
        yaml.compose("[" * 20000, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        return "nesting depth" in str(exc)
    return False


if _libyaml_depth_is_bounded():

    class _CLoader(_CParser, _StrictConstructor, yaml.resolver.Resolver):  # type: ignore[misc]
        """libyaml's parser and composer, our constructor."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _StrictConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    LIBYAML = True
else:  # pragma: no cover (the wheels ship libyaml 0.2.5)
    _CLoader = _PureLoader  # type: ignore[misc, assignment]
    LIBYAML = False


def _size_problem(text: str, source: str, max_bytes: int) -> YamlInputError | None:
    size = len(text)  # characters: a lower bound of the UTF-8 size, exact for ASCII (an O(1) check)
    if size <= max_bytes and not text.isascii() and size * 4 > max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return YamlInputError(source, f"larger than the limit of {max_bytes} bytes")
    return None


_PURE_RESCAN_LIMIT = 256 * 2**10
"""Up to this size the libyaml loader's error path reads the text again with the pure loader (well under a
second); past it, see ``_pure_verdict``."""


def _pure_verdict(text: str, document: int, max_depth: int) -> _Problem | yaml.YAMLError | None:
    """The problem the pure loader finds first, reading up to document number ``document``; None if none.

    The error path of the libyaml loader: its constructor visits nodes breadth-first (so it may meet a later
    problem first), libyaml words syntax errors its own way and, on a few corner cases of syntax, fails at
    another point than PyYAML's scanner. Reading again with the pure loader gives the same error whichever
    loader ran. Documents before ``document`` are only composed (libyaml constructed them already)."""
    if len(text) > _PURE_RESCAN_LIMIT:
        # A problem of our constructor (duplicate key, number) is the pure loader's too, unless the document
        # also holds an alias or over-deep nesting, met first by the pure loader (as it composes): libyaml's
        # events say, fast. A syntax error keeps libyaml's words.
        return _structural_scan(text, document, max_depth)
    try:
        loader = _PureLoader(text)
    except yaml.YAMLError as exc:
        return exc
    loader.max_depth = max_depth
    index = -1
    try:
        while loader.check_node():
            index += 1
            node = loader.get_node()
            if index == document:
                loader.construct_document(node)
                loader.check_node()  # libyaml may have failed looking ahead, past the document's end
                return None
        return None
    except (_Problem, yaml.YAMLError) as exc:
        return exc
    except RecursionError:
        return _Problem(f"nesting deeper than {max_depth} levels is not accepted")
    except (ValueError, OverflowError, LookupError, AttributeError, TypeError):
        return None
    finally:
        loader.dispose()


def _structural_scan(text: str, document: int, max_depth: int) -> _Problem | None:
    """The first alias or over-deep collection of document ``document`` in document order, from libyaml's
    events: for text too large to read again with the pure loader."""
    index = -1
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, DocumentStartEvent):
                index += 1
                depth = 0
                if index > document:
                    return None
            elif index != document:
                continue
            elif isinstance(event, AliasEvent):
                return _alias_problem(event)
            elif isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    return _depth_problem(event, max_depth)
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None
    return None


def _from_yaml_error(source: str, exc: yaml.YAMLError, max_depth: int, text: str) -> YamlInputError:
    if isinstance(exc, yaml.reader.ReaderError):
        # Same words from both loaders, placed by line and column rather than character offset.
        position = max(0, min(int(exc.position), len(text)))
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        return YamlInputError(source, f"unacceptable character {what}: {exc.reason}", line, column)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(part) for part in (exc.context, exc.problem) if part) or "invalid YAML"
        if "maximum nesting depth" in problem:
            problem = f"nesting deeper than {max_depth} levels is not accepted"
        problem = " ".join(problem.split())
        if mark is not None:
            return YamlInputError(source, problem, mark.line + 1, mark.column + 1)
        return YamlInputError(source, problem)
    return YamlInputError(source, " ".join(str(exc).split()) or "invalid YAML")


def _input_error(
    source: str, text: str, document: int, max_depth: int, exc: _Problem | yaml.YAMLError | UnicodeEncodeError
) -> YamlInputError:
    """The error to raise for ``exc``, worded and placed as the pure loader would (``_pure_verdict``)."""
    if not LIBYAML:
        found: _Problem | yaml.YAMLError | UnicodeEncodeError | None = exc
    else:
        found = _pure_verdict(text, document, max_depth) or exc
    if isinstance(found, _Problem):
        return YamlInputError(source, found.problem, found.line, found.column)
    if isinstance(found, yaml.YAMLError):
        return _from_yaml_error(source, found, max_depth, text)
    return YamlInputError(source, f"invalid text: {' '.join(str(found).split())}")


def iter_all(
    text: str, source: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> Iterator[Any]:
    """Each non-empty document of ``text`` in turn, constructed strictly (see the module docstring).

    For callers that turn each document into something small before the next is built (cluster dumps).
    Raises ``YamlInputError`` naming ``source`` and the line for every problem of the input."""
    too_big = _size_problem(text, source, max_bytes)
    if too_big is not None:
        raise too_big
    try:
        loader = _CLoader(text)
    except (yaml.YAMLError, UnicodeEncodeError) as exc:  # the characters are checked up front
        raise _input_error(source, text, 0, max_depth, exc) from None
    loader.max_depth = max_depth
    loader.may_alias = LIBYAML and "*" in text  # the pure composer refuses aliases before construction
    document = -1
    try:
        while True:
            try:
                more = loader.check_node()
            except (yaml.YAMLError, UnicodeEncodeError) as exc:  # the start of the next document
                raise _input_error(source, text, document + 1, max_depth, exc) from None
            if not more:
                return
            document += 1
            try:
                data = loader.construct_document(loader.get_node())
            except (_Problem, yaml.YAMLError, UnicodeEncodeError) as exc:
                raise _input_error(source, text, document, max_depth, exc) from None
            except RecursionError:
                too_deep = f"nesting deeper than {max_depth} levels is not accepted"
                raise YamlInputError(source, too_deep) from None
            except (ValueError, OverflowError, LookupError, AttributeError, TypeError) as exc:
                # Anything a constructor let through (our own cases are caught above with their line).
                raise YamlInputError(source, f"invalid value: {' '.join(str(exc).split())}") from None
            if data is not None:
                yield data
    finally:
        dispose = getattr(loader, "dispose", None)
        if dispose is not None:
            dispose()


def load_all(
    text: str, source: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> list[Any]:
    """Every non-empty document of ``text`` (empty documents are left out)."""
    return list(iter_all(text, source, max_bytes=max_bytes, max_depth=max_depth))


def load_one(
    text: str, source: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:
    """The single document of ``text`` (``None`` when it holds none); more than one is an error."""
    documents = load_all(text, source, max_bytes=max_bytes, max_depth=max_depth)
    if len(documents) > 1:
        raise YamlInputError(source, f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None
