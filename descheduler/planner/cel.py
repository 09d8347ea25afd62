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

Bounded: an expression is at most ``MAX_CEL_CHARS`` long (the API's limit), nested at most
``MAX_DEPTH`` parse levels deep, and its estimated evaluation cost (AST nodes visited, each multiplied by
the size of the lists the enclosing comprehensions walk) is at most ``MAX_COST``; otherwise it is refused
before it runs. celpy's non-standard ``reduce`` and ``min`` macros are unknown functions here, as in
Kubernetes. Errors are one short line: celpy's own message would print the whole activation.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from descheduler.cluster.dra import MAX_CEL_CHARS, SEMVER
from descheduler.cluster.types import Device
from descheduler.units import parse_quantity

__all__ = ["CelError", "DeviceView", "Selector", "compile_selector", "device_view", "selects"]

MAX_DEPTH = 250
"""Parse-tree levels (one parenthesis adds about a dozen); celpy evaluates recursively."""
MAX_COST = 20_000
"""Estimated node visits: a real selector costs tens."""
DEFAULT_RANGE = 32
"""What a comprehension over anything but a literal walks at most: a device's attributes and capacities
together are at most 32 (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``)."""
MAX_MESSAGE = 200
_MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})
_NOT_CEL = frozenset({"reduce", "min"})
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


FUNCTIONS: dict[str, Callable[..., Any]] = {
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


def _range_bound(tree: lark.Tree[Any]) -> int:
    """How many items a comprehension over ``tree`` walks at most."""
    while True:
        if tree.data == "list_lit":
            items = _children(tree)
            return len(_children(items[0])) if items else 0
        if tree.data == "map_lit":
            items = _children(tree)
            return len(_children(items[0])) // 2 if items else 0
        if tree.data == "member_dot_arg" and _method(tree) in ("map", "filter"):
            tree = _children(tree)[0]
            continue
        children = _children(tree)
        if len(children) != 1:
            return DEFAULT_RANGE
        tree = children[0]


def _method(tree: lark.Tree[Any]) -> str:
    token = tree.children[1] if len(tree.children) > 1 else None
    return str(token.value) if isinstance(token, lark.Token) else ""


def _check(ast: lark.Tree[Any]) -> None:
    """Refuse what could not be evaluated in bounded time and stack (module docstring)."""
    cost = 0
    stack: list[tuple[lark.Tree[Any], int, int]] = [(ast, 1, 0)]
    while stack:
        tree, weight, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CelError("expression nested too deeply")
        cost += weight
        if cost > MAX_COST:
            raise CelError(f"expression too costly to evaluate (estimated cost above {MAX_COST})")
        children = _children(tree)
        if tree.data == "member_dot_arg" and _method(tree) in _NOT_CEL:
            raise CelError(f"undeclared reference to {_method(tree)!r}")
        if tree.data == "member_dot_arg" and _method(tree) in _MACROS:
            member, *rest = children
            stack.append((member, weight, depth + 1))
            inner = weight * max(1, _range_bound(member))
            stack.extend((child, inner, depth + 1) for child in rest)
            continue
        stack.extend((child, weight, depth + 1) for child in children)


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled expression."""

    expression: str
    program: celpy.Runner


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
    return Selector(expression, _ENVIRONMENT.program(ast, functions=FUNCTIONS))


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


def selects(selector: Selector, device: DeviceView) -> bool:
    """Whether the expression holds for the device; ``CelError`` when it cannot be evaluated."""
    try:
        result = selector.program.evaluate({"device": device})
    except CELEvalError as exc:
        raise CelError(_message(exc)) from None
    except RecursionError:
        raise CelError("expression nested too deeply") from None
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
        raise CelError(" ".join(str(exc).split())[:MAX_MESSAGE] or type(exc).__name__) from None
    if isinstance(result, CELEvalError):
        raise CelError(_message(result))
    if not isinstance(result, ct.BoolType):
        raise CelError(f"expression yields a {_type_name(type(result).__name__)}, not a bool")
    return bool(result)


def _type_name(python_name: str) -> str:
    return python_name.removesuffix("Type").lower()
