"""DRA device selectors: CEL expressions evaluated against one device as kube-scheduler does.

Why ``cel-python`` (module ``celpy``): it is a pure-Python CEL implementation maintained by Cloud
Custodian, needs no compiler, CLI or Go toolchain in the image, and lets us register the Kubernetes
extension functions the DRA docs use (``quantity``, ``semver`` and their methods) as plain Python.

The environment follows resource.k8s.io/v1's ``CELDeviceSelector``:

- ``device.driver`` (string), ``device.attributes[domain].name`` (bool, int, string, or a semver
  value), ``device.capacity[domain].name`` (a quantity), ``device.allowMultipleAllocations`` (false:
  shareable devices are never counted as free anyway);
- an unknown domain gives an empty map; an unknown attribute or capacity in a known domain is an
  evaluation error (the scheduler then aborts the allocation, so the pod would stay Pending);
- a result that is not a bool is an error.

Bounded, as Kubernetes bounds DRA CEL (an estimated cost at admission, a runtime cost in the allocator),
because selectors come from ResourceClaims that namespace users write:

- at compile: at most ``MAX_CEL_CHARS`` long (the API's limit), nested at most ``MAX_DEPTH`` parse levels,
  and an estimated cost of at most ``MAX_COST``. The estimate, like Kubernetes', follows the size of
  lists and strings through ``+`` and the macros (``[[1]].map(l, l + l)`` doubles the inner list at each
  link of a chain) and charges each comprehension its range times its body;
- at run: every parse node visited costs 1 and every list, map or string built costs its length, within
  ``MAX_COST`` per evaluation and a ``Meter``'s budget per cycle; no value may hold more than
  ``MAX_VALUE_SIZE`` elements or characters, nested ones counted (memory stays bounded, and so does the
  work of comparing two values). Past a limit the evaluation stops with a ``CelError``.

``MAX_COST`` is stricter than Kubernetes' 1,000,000 (``CELSelectorExpressionMaxCost``): one unit costs
4-20 us here, and a refused selector only keeps its pod in place. celpy's non-standard ``reduce`` macro,
and ``min`` with arguments, are unknown functions here, as in Kubernetes. Errors are one short line:
celpy's own message would print the whole activation.

The libraries of Kubernetes' CEL environment that selectors use, as kube-scheduler 1.35 evaluates them
(``k8s.io/apiserver/pkg/cel/library`` and cel-go's ``ext``): quantity and semver; the strings extension
(version 2: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``,
``split``, ``substring``, ``trim``, ``join``); Kubernetes' lists (``isSorted``, ``sum``, ``min``,
``max``, ``indexOf``, ``lastIndexOf``) and cel-go's (``slice``, ``flatten``, ``distinct``, ``reverse``,
``sort``); regular expressions (``matches``, ``find``, ``findAll``) in RE2, as in Go: linear time, no
backreferences or lookaround; ``cel.bind`` and ``sets.contains``/``equivalent``/``intersects``;
comparisons across numeric types (``1 < 2.0``) and equality across kinds (``true == 1`` is false, not
an error, and not true as celpy had it). Not provided (an unknown function, the pod stays with its
reason): ``lists.range``, ``strings.quote``, ``format``, optional values, two-variable comprehensions,
``ip``/``cidr``/``url``. A function that would build a value past
``MAX_VALUE_SIZE`` fails before building it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
import re2  # type: ignore[import-untyped]  # google-re2, celpy's own dependency
from celpy.celparser import CELParseError
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions

from descheduler.cluster.dra import MAX_CEL_CHARS, SEMVER
from descheduler.cluster.types import Device
from descheduler.units import parse_quantity

__all__ = [
    "CelBudgetError",
    "CelError",
    "DeviceView",
    "Meter",
    "Selector",
    "compile_selector",
    "device_view",
    "selects",
]

MAX_DEPTH = 250
"""Parse-tree levels (one parenthesis adds about a dozen); celpy evaluates recursively."""
MAX_COST = 20_000
"""Cost units (node visits, plus the length of each list, map or string built), estimated at compile and
counted at run, per evaluation: a real selector costs tens; 20,000 take at most ~0.4 s."""
MAX_VALUE_SIZE = 10_000
"""Elements or characters of any one value during an evaluation, nested values counted."""
CYCLE_COST = 250_000
"""Cost units a ``Meter`` allows, by default: one cycle's evaluations. A unit costs 4-20 us here (most
in comprehensions), so ~1-5 s; with the verdicts remembered across cycles, later cycles go on where the
budget stopped."""
EVALUATION_COST = 50
"""What one evaluation costs the cycle's budget before its first node (building the activation)."""
DEFAULT_RANGE = 32
"""What a comprehension over anything but a literal walks at most: a device's attributes and capacities
together are at most 32 (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``)."""
MAX_MESSAGE = 200
_MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})
_NOT_CEL = frozenset({"reduce"})
"""celpy macros Kubernetes has not (``min`` is refused only with arguments: ``list.min()`` is Kubernetes')."""
_INT64 = 2**63 - 1

logging.getLogger("celpy").setLevel(logging.CRITICAL)  # its debug/error logs dump whole activations


class CelError(Exception):
    """An expression that cannot be compiled or evaluated; the message is one short line."""


# -- the Kubernetes CEL library types -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Quantity:
    """A resource.Quantity value (``quantity("1Gi")``, capacities)."""

    value: Fraction

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            raise TypeError("no such overload")
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version (``semver("1.2.3")``, ``version`` attributes)."""

    text: str

    def key(self) -> tuple[int, int, int, tuple[tuple[int, int, str], ...], int]:
        """Precedence as Semantic Versioning 2.0.0 defines it (build metadata ignored)."""
        match = SEMVER.match(self.text)
        if match is None:  # construction checks the text
            raise ValueError(self.text)
        major, minor, patch, pre = match.group(1), match.group(2), match.group(3), match.group(4)
        parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in (pre or "").split(".") if p)
        return int(major), int(minor), int(patch), parts, 0 if pre else 1

    def sort_key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        major, minor, patch, parts, release = self.key()
        return major, minor, patch, release, parts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            raise TypeError("no such overload")
        return self.sort_key() == other.sort_key()

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    try:
        return Quantity(parse_quantity(str(text)))
    except ValueError:
        raise ValueError(f"quantity(): {str(text)[:40]!r} is not a quantity") from None


def _is_quantity(text: Any) -> ct.BoolType:
    try:
        _quantity(text)
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _semver(text: Any) -> Semver:
    if not isinstance(text, str):
        raise TypeError("semver() takes a string")
    if not SEMVER.match(text):
        raise ValueError(f"semver(): {str(text)[:40]!r} is not a semantic version")
    return Semver(str(text))


def _is_semver(text: Any) -> ct.BoolType:
    return ct.BoolType(isinstance(text, str) and SEMVER.match(text) is not None)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        ka, kb = a.sort_key(), b.sort_key()
        return (ka > kb) - (ka < kb)
    raise TypeError("no such overload")


def _as_int(value: int) -> ct.IntType:
    if abs(value) > _INT64:
        raise ValueError("integer overflow")
    return ct.IntType(value)


def _quantity_arg(value: Any) -> Fraction:
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(int(value))
    raise TypeError("no such overload")


def _need_quantity(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise TypeError("no such overload")
    return value


def _as_integer(q: Any) -> ct.IntType:
    value = _need_quantity(q).value
    if value.denominator != 1:
        raise ValueError("asInteger(): the quantity is not an integer")
    return _as_int(int(value))


def _semver_part(index: int) -> Callable[[Any], ct.IntType]:
    def part(v: Any) -> ct.IntType:
        if not isinstance(v, Semver):
            raise TypeError("no such overload")
        return ct.IntType(v.key()[index])

    return part


# -- strings (cel-go ext.Strings, version 2), lists, regex ------------------------------------------------
_WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
"""Unicode White_Space, what ``trim`` strips (Python's ``strip()`` strips a few more)."""
MAX_LIST_WORK = 1_000
"""Elements ``distinct`` compares pairwise at most (n^2 comparisons: Kubernetes' cost limit allows ~1,000)."""


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("no such overload")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("no such overload")
    return int(value)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("no such overload")
    return value


def _sized(text: str) -> ct.StringType:
    if len(text) > MAX_VALUE_SIZE:
        raise ValueError(f"a value grows beyond {MAX_VALUE_SIZE} elements or characters")
    return ct.StringType(text)


def _index(text: str, at: int) -> int:
    if not 0 <= at <= len(text):
        raise ValueError(f"index out of range: {at}")
    return at


def _char_at(text: Any, at: Any) -> ct.StringType:
    value = _str(text)
    index = _index(value, _int(at))
    return ct.StringType(value[index : index + 1])


def _index_of(target: Any, item: Any, offset: Any = 0) -> ct.IntType:
    if isinstance(target, list):
        return ct.IntType(next((i for i, x in enumerate(target) if _equal(x, item)), -1))
    value, sub = _str(target), _str(item)
    return ct.IntType(value.find(sub, _index(value, _int(offset))))


def _last_index_of(target: Any, item: Any, *offset: Any) -> ct.IntType:
    if isinstance(target, list):
        found = [i for i, x in enumerate(target) if _equal(x, item)]
        return ct.IntType(found[-1] if found else -1)
    value, sub = _str(target), _str(item)
    end = _index(value, _int(offset[0])) if offset else len(value)
    return ct.IntType(value.rfind(sub, 0, end + len(sub)))


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except TypeError:
        return False


def _ascii(text: Any, upper: bool) -> ct.StringType:
    value = _str(text)
    table = str.maketrans(
        *(("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")[:: 1 if upper else -1])
    )
    return ct.StringType(value.translate(table))


def _replace(text: Any, old: Any, new: Any, count: Any = -1) -> ct.StringType:
    value, before, after, limit = _str(text), _str(old), _str(new), _int(count)
    hits = value.count(before) if before else len(value) + 1
    hits = hits if limit < 0 else min(hits, limit)
    if len(value) + hits * (len(after) - len(before)) > MAX_VALUE_SIZE:
        raise ValueError(f"a value grows beyond {MAX_VALUE_SIZE} elements or characters")
    return ct.StringType(value.replace(before, after, limit))


def _split(text: Any, separator: Any, count: Any = -1) -> ct.ListType:
    value, sep, limit = _str(text), _str(separator), _int(count)
    if limit == 0:
        return ct.ListType([])
    if sep:
        parts = value.split(sep, limit - 1 if limit > 0 else -1)
    else:  # Go splits into characters; with a limit the last part keeps the rest
        parts = list(value) if limit < 0 or limit >= len(value) else [*value[: limit - 1], value[limit - 1 :]]
    return ct.ListType([ct.StringType(p) for p in parts])


def _substring(text: Any, start: Any, *end: Any) -> ct.StringType:
    value = _str(text)
    first = _index(value, _int(start))
    last = _index(value, _int(end[0])) if end else len(value)
    if first > last:
        raise ValueError(f"invalid substring range. start: {first}, end: {last}")
    return ct.StringType(value[first:last])


def _join_strings(items: Any, separator: Any = "") -> ct.StringType:
    parts = [_str(x) for x in _list(items)]
    return _sized(_str(separator).join(parts))


def _comparable(items: Any) -> list[Any]:
    values = _list(items)
    if len({type(v) for v in values}) > 1:
        raise TypeError("no such overload: elements of different types")
    if any(isinstance(v, (list, dict)) for v in values):
        raise TypeError("no such overload: elements are not comparable")
    return values


def _extreme(items: Any, pick: Callable[[list[Any]], Any], name: str) -> Any:
    values = _comparable(items)
    if not values:
        raise ValueError(f"{name} called on empty list")
    return pick(values)


def _list_sum(items: Any) -> Any:
    values = _comparable(items)
    if not values:
        return ct.IntType(0)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise TypeError("no such overload")
    total = sum(values)
    return ct.DoubleType(total) if isinstance(values[0], float) else _as_int(int(total))


def _distinct(items: Any) -> ct.ListType:
    values = _list(items)
    if len(values) > MAX_LIST_WORK:
        raise ValueError(f"distinct() on more than {MAX_LIST_WORK} elements")
    out: list[Any] = []
    for value in values:
        if not any(_equal(value, seen) for seen in out):
            out.append(value)
    return ct.ListType(out)


def _flatten(items: Any, depth: Any = 1) -> ct.ListType:
    levels = _int(depth)
    if levels < 0:
        raise ValueError("level must be non-negative")
    out: list[Any] = list(_list(items))
    for _ in range(levels):
        if not any(isinstance(v, list) for v in out):
            break
        out = [x for v in out for x in (v if isinstance(v, list) else [v])]
    return ct.ListType(out)


def _slice(items: Any, start: Any, end: Any) -> ct.ListType:
    values, first, last = _list(items), _int(start), _int(end)
    if first < 0 or last < 0 or first > last or last > len(values):
        raise ValueError(f"cannot slice({first}, {last}) of a list of {len(values)}")
    return ct.ListType(values[first:last])


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    """The RE2 program of ``pattern`` (Go's ``regexp`` is RE2 too: same syntax, linear time)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"invalid regex {pattern[:40]!r}: {detail}") from None


def _matches(text: Any, pattern: Any) -> ct.BoolType:
    return ct.BoolType(_regex(_str(pattern)).search(_str(text)) is not None)


def _find(text: Any, pattern: Any) -> ct.StringType:
    found = _regex(_str(pattern)).search(_str(text))
    return ct.StringType(found.group(0) if found is not None else "")


def _find_all(text: Any, pattern: Any, count: Any = -1) -> ct.ListType:
    limit = _int(count)
    if limit == 0:
        return ct.ListType([])
    found = (m.group(0) for m in _regex(_str(pattern)).finditer(_str(text)))
    return ct.ListType([ct.StringType(f) for f in itertools.islice(found, None if limit < 0 else limit)])


_NUMBERS = (ct.IntType, ct.UintType, ct.DoubleType)
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "_<_": lambda a, b: a < b,
    "_<=_": lambda a, b: a <= b,
    "_>_": lambda a, b: a > b,
    "_>=_": lambda a, b: a >= b,
    "_==_": lambda a, b: a == b,
    "_!=_": lambda a, b: a != b,
}


def _kind(value: Any) -> str:
    """The CEL kind equality distinguishes (celpy's bool is a Python int: ``true == 1`` held)."""
    if isinstance(value, ct.BoolType):
        return "bool"
    if isinstance(value, _NUMBERS):
        return "number"
    for kind in (str, bytes, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def _as_number(value: Any) -> int | float:
    return float(value) if isinstance(value, float) else int(value)


def _relation(name: str) -> Callable[[Any, Any], Any]:
    """Kubernetes' ``CrossTypeNumericComparisons`` (an int, uint and double compare by value; celpy
    refuses ``1 < 2.0``) and cel-go's heterogeneous equality (values of different kinds are unequal,
    not an error); every other operand pair as celpy does."""
    original, compare = base_functions[name], _ORDER[name]

    def relation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError) or isinstance(b, CELEvalError):
            return original(a, b)  # an error stays one
        if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS) and type(a) is not type(b):
            left, right = _as_number(a), _as_number(b)
            if isinstance(left, float) or isinstance(right, float):
                left, right = float(left), float(right)
            return ct.BoolType(compare(left, right))
        if name in ("_==_", "_!=_") and _kind(a) != _kind(b):
            return ct.BoolType(name == "_!=_")
        return original(a, b)

    return relation


LIBRARIES: dict[str, Callable[..., Any]] = {
    **{name: _relation(name) for name in _ORDER},
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda text: _ascii(text, False),
    "upperAscii": lambda text: _ascii(text, True),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda text: ct.StringType(_str(text).strip(_WHITE_SPACE)),
    "join": _join_strings,
    "isSorted": lambda items: ct.BoolType(all(a <= b for a, b in itertools.pairwise(_comparable(items)))),
    "sum": _list_sum,
    "max": lambda items: _extreme(items, max, "max"),
    "distinct": _distinct,
    "flatten": _flatten,
    "reverse": lambda items: ct.ListType(_list(items)[::-1]),
    "slice": _slice,
    "sort": lambda items: ct.ListType(sorted(_comparable(items))),
    "matches": _matches,
    "find": _find,
    "findAll": _find_all,
}
"""The strings, lists and regex libraries (module docstring); ``list.min()`` is celpy's own macro."""

FUNCTIONS: dict[str, Callable[..., Any]] = {
    **LIBRARIES,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: ct.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: ct.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: ct.BoolType(_compare(a, b) < 0),
    "sign": lambda q: ct.IntType((_need_quantity(q).value > 0) - (_need_quantity(q).value < 0)),
    "isInteger": lambda q: ct.BoolType(_need_quantity(q).value.denominator == 1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: ct.DoubleType(float(_need_quantity(q).value)),
    "add": lambda q, o: Quantity(_need_quantity(q).value + _quantity_arg(o)),
    "sub": lambda q, o: Quantity(_need_quantity(q).value - _quantity_arg(o)),
    "major": _semver_part(0),
    "minor": _semver_part(1),
    "patch": _semver_part(2),
}
"""Kubernetes' quantity and semver CEL libraries (k8s.io/apiserver/pkg/cel/library)."""


# -- the device ----------------------------------------------------------------------------------------
class _Domains(ct.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map, as in Kubernetes."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and not super().__contains__(key):
            return ct.MapType({})
        return super().__getitem__(key)


DeviceView = ct.MapType
"""A device as the ``device`` variable of the DRA CEL environment."""


def _attribute(value: Any, is_version: bool) -> Any:
    if is_version:
        return Semver(value)
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    return ct.StringType(value)


def _by_domain(items: dict[str, Any]) -> _Domains:
    domains: dict[str, dict[Any, Any]] = {}
    for qualified, value in items.items():
        domain, _, name = qualified.rpartition("/")
        domains.setdefault(domain, {})[ct.StringType(name)] = value
    return _Domains({ct.StringType(d): ct.MapType(values) for d, values in domains.items()})


def device_view(driver: str, device: Device) -> DeviceView:
    """The ``device`` variable for one device of a slice of ``driver``."""
    attributes = {k: _attribute(v, k in device.versions) for k, v in device.attributes.items()}
    capacity = {k: Quantity(Fraction(v)) for k, v in device.capacity.items()}
    return ct.MapType(
        {
            ct.StringType("driver"): ct.StringType(driver),
            ct.StringType("attributes"): _by_domain(attributes),
            ct.StringType("capacity"): _by_domain(capacity),
            ct.StringType("allowMultipleAllocations"): ct.BoolType(False),
        }
    )


# -- compile and evaluate ------------------------------------------------------------------------------
_ENVIRONMENT = celpy.Environment()


def _children(tree: lark.Tree[Any]) -> list[lark.Tree[Any]]:
    return [c for c in tree.children if isinstance(c, lark.Tree)]


_HUGE = 2**62
"""Estimates are clamped here: anything near it is refused anyway."""
_STRINGS = frozenset({"STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"})


def _method(tree: lark.Tree[Any]) -> str:
    token = tree.children[1] if len(tree.children) > 1 else None
    return str(token.value) if isinstance(token, lark.Token) else ""


def _check(ast: lark.Tree[Any]) -> None:
    """Refuse what could not be evaluated in bounded stack, or names no Kubernetes CEL function."""
    stack: list[tuple[lark.Tree[Any], int]] = [(ast, 0)]
    while stack:
        tree, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CelError("expression nested too deeply")
        if tree.data == "member_dot_arg" and (
            _method(tree) in _NOT_CEL or (_method(tree) == "min" and len(tree.children) > 2)
        ):
            raise CelError(f"undeclared reference to {_method(tree)!r}")
        stack.extend((child, depth + 1) for child in _children(tree))


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the estimate knows of a value: at most how many elements or characters, and its elements'
    shape (a list's items, a map's values)."""

    size: int = 0
    item: _Shape | None = None

    def deep(self) -> int:
        """Elements and characters, nested ones counted."""
        return min(_HUGE, self.size * (1 + (self.item.deep() if self.item is not None else 0)))


_SCALAR = _Shape()
_TEXT = _Shape(64)
"""A device's string or version attribute (``DeviceAttributeMaxValueLength``), or any scalar."""
_UNKNOWN = _Shape(DEFAULT_RANGE, _Shape(DEFAULT_RANGE, _TEXT))
"""A variable or field the estimate cannot follow: the ``device`` maps are at most this."""


def _join(a: _Shape | None, b: _Shape | None) -> _Shape | None:
    if a is None or b is None:
        return a or b
    return _Shape(max(a.size, b.size), _join(a.item, b.item))


def _joined(shapes: list[_Shape]) -> _Shape:
    out: _Shape | None = None
    for shape in shapes:
        out = _join(out, shape)
    return out or _SCALAR


class _Estimate:
    """Kubernetes-style cost estimate (module docstring): a cost and a shape per subtree. Linear in the
    tree: a macro's body is estimated once and charged as often as its range is long."""

    def __init__(self) -> None:
        self.scope: dict[str, _Shape] = {}

    def run(self, tree: lark.Tree[Any]) -> tuple[int, _Shape]:
        kind, kids = tree.data, _children(tree)
        if kind == "literal":
            token = tree.children[0]
            text = isinstance(token, lark.Token) and token.type in _STRINGS
            return 1, _Shape(len(str(token))) if text else _SCALAR
        if kind in ("ident", "dot_ident"):
            return 1, self.scope.get(str(tree.children[-1]), _UNKNOWN)
        if kind == "member_dot_arg" and _method(tree) in _MACROS:
            return self._macro(tree, kids)
        if kind in ("list_lit", "map_lit"):
            items = [self.run(k) for k in (_children(kids[0]) if kids else [])]
            values = items if kind == "list_lit" else items[1::2]
            size = len(values)
            return _sum(2 + size, *(c for c, _ in items)), _Shape(size, _joined([s for _, s in values]))
        parts = [self.run(k) for k in kids]
        cost = _sum(1, *(c for c, _ in parts))
        shapes = [s for _, s in parts]
        return self._operation(tree, kind, cost, shapes)

    def _operation(
        self, tree: lark.Tree[Any], kind: str, cost: int, shapes: list[_Shape]
    ) -> tuple[int, _Shape]:
        if kind == "addition" and len(shapes) == 2:
            if _children(tree)[0].data != "addition_add":
                return cost, _SCALAR
            left, right = shapes
            joined = _Shape(min(_HUGE, left.size + right.size), _join(left.item, right.item))
            return _sum(cost, joined.size), joined
        if kind == "relation" and len(shapes) == 2:  # `in` walks the container; == stops at the smaller
            left, right = shapes
            within = _children(tree)[0].data == "relation_in"
            walked = right.deep() if within else min(left.deep(), right.deep())
            return _sum(cost, walked), _SCALAR
        if kind in ("member_dot", "member_index"):
            return cost, shapes[0].item or _TEXT
        if kind == "ident_arg" and str(tree.children[0]) == "has":  # a presence test reads nothing
            return cost, _SCALAR
        if kind in ("member_dot_arg", "ident_arg", "dot_ident_arg"):
            # String functions read their arguments whole; a result (``string(x)``...) is a new value.
            result = _joined(shapes) if any(s.size for s in shapes) else _TEXT
            return _sum(cost, result.size, *(s.size for s in shapes)), result
        if kind == "expr" and len(shapes) == 3:
            return cost, _joined(shapes[1:])
        if kind in ("conditionalor", "conditionaland", "multiplication") and len(shapes) == 2:
            return cost, _SCALAR
        return cost, _joined(shapes)

    def _macro(self, tree: lark.Tree[Any], kids: list[lark.Tree[Any]]) -> tuple[int, _Shape]:
        member, *rest = kids
        args = _children(rest[0]) if rest else []
        names = [str(t.children[0]) for t in args[0].find_data("ident")] if args else []
        if len(args) < 2 or len(names) != 1:
            raise CelError(f"{_method(tree)}() needs a variable and an expression")
        cost, over = self.run(member)
        items = max(1, over.size)
        item = over.item or _TEXT
        saved = self.scope.get(names[0])
        self.scope[names[0]] = item
        bodies = [self.run(body) for body in args[1:]]
        if saved is None:
            del self.scope[names[0]]
        else:
            self.scope[names[0]] = saved
        cost = _sum(cost, 1, min(_HUGE, items * _sum(1, *(c for c, _ in bodies))))
        if _method(tree) == "map":
            return cost, _Shape(items, bodies[-1][1])
        if _method(tree) == "filter":
            return cost, _Shape(items, item)
        return cost, _SCALAR


def _sum(*costs: int) -> int:
    return min(_HUGE, sum(costs))


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled expression."""

    expression: str
    program: celpy.Runner
    driver_is: str | None = None
    """For ``device.driver == "<name>"`` (how DeviceClasses select their driver's devices): the name.
    Such a selector is decided without the interpreter, remembering nothing and costing no budget."""


_DRIVER_IS = re.compile(r"""^\s*device\s*\.\s*driver\s*==\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*$""")


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile once per distinct expression; ``CelError`` for one that can never be evaluated."""
    if len(expression) > MAX_CEL_CHARS:
        raise CelError(f"expression longer than {MAX_CEL_CHARS} characters")
    try:
        ast = _ENVIRONMENT.compile(expression)
    except CELParseError as exc:
        where = f" at line {exc.line}, column {exc.column}" if exc.line is not None else ""
        raise CelError(f"syntax error{where}") from None
    except RecursionError:
        raise CelError("expression nested too deeply") from None
    _check(ast)
    cost, _ = _Estimate().run(ast)
    if cost > MAX_COST:
        raise CelError(f"expression too costly to evaluate (estimated cost above {MAX_COST})")
    plain = _DRIVER_IS.match(expression)
    driver = None if plain is None else (plain.group(1) if plain.group(1) is not None else plain.group(2))
    return Selector(expression, _ENVIRONMENT.program(ast, functions=FUNCTIONS), driver)


_ACTIVATION_NOISE = re.compile(r"\s*\(in activation .*$", re.DOTALL)
_OVERLOAD = re.compile(
    r"found no matching overload for .*?'(?:relation|addition|multiplication)_(\w+)'\)"
    r" applied to '\(<class '(?:[\w.]*\.)?(\w+)'>, <class '(?:[\w.]*\.)?(\w+)'>\)'"
)
_OPERATORS = {
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "in": "in",
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "mod": "%",
}


def _message(exc: CELEvalError) -> str:
    """One short line from celpy's error (whose text may embed the whole activation)."""
    text = str(exc.args[0]) if exc.args else "evaluation error"
    text = _ACTIVATION_NOISE.sub("", text)
    overload = _OVERLOAD.match(text)
    if overload is not None:
        op, left, right = overload.groups()
        text = (
            f"no matching overload for {_OPERATORS.get(op, op)!r} applied to "
            f"({_type_name(left)}, {_type_name(right)})"
        )
    if text in ("no such key", "no such overload", "return error for overflow") and len(exc.args) > 2:
        detail = exc.args[2]
        if isinstance(detail, tuple) and detail:
            text = f"{text}: {str(detail[0])[:80]}"
    if text.startswith("return error for overflow: "):  # celpy's label for any ValueError
        text = text.removeprefix("return error for overflow: ")
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


class Meter:
    """Cost units left to a series of evaluations (one planning cycle's): past them every evaluation
    fails at once with ``CelBudgetError``, so a cycle's CEL work is bounded whatever the claims say."""

    def __init__(self, budget: int | None = None) -> None:
        self.left = CYCLE_COST if budget is None else budget
        self.spent = 0


class CelBudgetError(CelError):
    """The ``Meter`` ran out: a verdict on this cycle's budget, not on the device (not remembered)."""


class _Exhausted(Exception):
    """A limit reached mid-evaluation; no subclass of what celpy turns into a CEL error value."""


class _Count:
    """One evaluation's cost (module docstring): 1 per node visited, and each new list, map or string
    its length; the nested size of every value is checked against ``MAX_VALUE_SIZE``."""

    __slots__ = ("limit", "meter", "seen", "tripped", "used")

    def __init__(self, meter: Meter | None) -> None:
        self.meter = meter
        self.limit = MAX_COST if meter is None else min(MAX_COST, meter.left)
        self.used = 0
        self.tripped: CelError | None = None
        self.seen: dict[int, tuple[object, int]] = {}
        """id -> (value, nested size): the value is held so its id is not reused."""

    def spend(self, units: int) -> None:
        self.used += units
        if self.tripped is None and self.used > self.limit:
            if self.limit < MAX_COST:
                self.tripped = CelBudgetError("the CEL cost budget of this cycle is spent")
            else:
                self.tripped = CelError(f"evaluation cost above {MAX_COST}")
        if self.tripped is not None:
            raise _Exhausted(str(self.tripped))

    def value(self, value: object, charge: bool = True) -> int:
        """The nested size of ``value``; a value not seen before costs its length (``charge``: built
        by the expression, not its input)."""
        found = self.seen.get(id(value))
        if found is not None:
            return found[1]
        size = len(value) if isinstance(value, (str, bytes, list, dict)) else 0
        if charge:
            self.spend(max(1, size))
        parts = value.items() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for part in parts:
            for item in part if isinstance(value, dict) else (part,):
                if isinstance(item, (str, bytes, list, dict)):
                    size += self.value(item, charge)
        self.seen[id(value)] = (value, size)
        if size > MAX_VALUE_SIZE and self.tripped is None:
            self.tripped = CelError(f"a value grows beyond {MAX_VALUE_SIZE} elements or characters")
            raise _Exhausted(str(self.tripped))
        return size


class _Metered(Evaluator):
    """celpy's evaluator, counting each node it visits and each value it builds (lark's ``Interpreter``
    sends every node, children included, through ``_visit_tree``; macros through ``sub_evaluator``)."""

    def __init__(self, ast: lark.Tree[Any], activation: Activation, count: _Count) -> None:
        super().__init__(ast, activation)
        self.count = count

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Metered(ast, self.activation, self.count)

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
        self.count.spend(1)
        result = super()._visit_tree(tree)
        if isinstance(result, (str, bytes, list, dict)):
            self.count.value(result)
        return result

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        """``cel.bind(name, value, expression)`` and ``sets.*`` (celpy reads ``cel``/``sets`` as
        variables); any other call as celpy does."""
        call = _namespaced(tree)
        if call is None:
            return super().member_dot_arg(tree)
        method, args = call
        if method == "cel.bind" and len(args) == 3:
            names = [str(t.children[0]) for t in args[0].find_data("ident")]
            if len(names) == 1:
                value = self.visit(args[1])
                if isinstance(value, CELEvalError):
                    return value
                return self.sub_evaluator(args[2]).evaluate({names[0]: value})
        if method in _SETS and len(args) == 2:
            first, second = self.visit(args[0]), self.visit(args[1])
            for value in (first, second):
                if isinstance(value, CELEvalError):
                    return value
            if not isinstance(first, list) or not isinstance(second, list):
                return CELEvalError("no such overload", TypeError, ())
            return ct.BoolType(_SETS[method](first, second))
        return super().member_dot_arg(tree)


def _member_of(item: Any, items: list[Any]) -> bool:
    return any(bool(item == other) for other in items)


_SETS: dict[str, Callable[[list[Any], list[Any]], bool]] = {
    "sets.contains": lambda a, b: all(_member_of(x, a) for x in b),
    "sets.equivalent": lambda a, b: all(_member_of(x, a) for x in b) and all(_member_of(x, b) for x in a),
    "sets.intersects": lambda a, b: any(_member_of(x, a) for x in b),
}
"""cel-go's ``ext.Sets``: membership by CEL equality."""


def _namespaced(tree: lark.Tree[Any]) -> tuple[str, list[lark.Tree[Any]]] | None:
    """(``namespace.function``, argument trees) of a call like ``sets.contains(a, b)``, else None."""
    member = tree.children[0]
    if not isinstance(member, lark.Tree) or len(tree.children) < 3:
        return None
    primary = member.children[0] if member.data == "member" and len(member.children) == 1 else None
    if not isinstance(primary, lark.Tree) or primary.data != "primary" or len(primary.children) != 1:
        return None
    ident = primary.children[0]
    if not isinstance(ident, lark.Tree) or ident.data != "ident":
        return None
    space = str(ident.children[0])
    if space not in ("cel", "sets"):
        return None
    args = tree.children[2]
    return f"{space}.{_method(tree)}", _children(args) if isinstance(args, lark.Tree) else []


def selects(selector: Selector, device: DeviceView, meter: Meter | None = None) -> bool:
    """Whether the expression holds for the device; ``CelError`` when it cannot be evaluated within the
    limits (``CelBudgetError`` when ``meter`` is spent)."""
    if meter is not None and meter.left < EVALUATION_COST:
        raise CelBudgetError("the CEL cost budget of this cycle is spent")
    count = _Count(meter)
    count.value(device, charge=False)
    try:
        runner = selector.program
        result = _Metered(runner.ast, runner.new_activation(), count).evaluate({"device": device})
    except _Exhausted:
        result = None
    except CELEvalError as exc:
        raise CelError(_message(exc)) from None
    except RecursionError:
        raise CelError("expression nested too deeply") from None
    except MemoryError:
        raise CelError("out of memory") from None
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        raise CelError(" ".join(str(exc).split())[:MAX_MESSAGE] or type(exc).__name__) from None
    finally:
        if meter is not None:
            spent = EVALUATION_COST + min(count.used, count.limit)
            meter.left -= spent
            meter.spent += spent
    if count.tripped is not None:
        raise count.tripped
    if isinstance(result, CELEvalError):
        raise CelError(_message(result))
    if not isinstance(result, ct.BoolType):
        raise CelError(f"expression yields a {_type_name(type(result).__name__)}, not a bool")
    return bool(result)


def _type_name(python_name: str) -> str:
    return python_name.removesuffix("Type").lower()
