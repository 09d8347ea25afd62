"""Parsing of the value formats Kubernetes and Go write: quantities, durations, int-or-percent.

Kept dependency-free and exact (``Fraction``) because thresholds are compared against these numbers
and a rounding difference must never decide whether a pod is evicted.

Bounds (hostile or mistyped input must fail fast with a ``ValueError``, never burn CPU or overflow later):

- a quantity's value, after its suffix or exponent is applied, must fit an int64 (``|v| <= 2**63 - 1``,
  about 8Ei), as Kubernetes' ``Quantity.Value()`` needs; its number is at most 64 characters and its
  exponent within +-100, both checked before anything is computed (``1e999999999`` is refused in
  microseconds, not after building a billion-digit integer);
- a duration must fit Go's ``time.Duration``, int64 nanoseconds (``|d| <= 2562047h47m16.854775807s``,
  about 292 years), and is at most 100 characters;
- an int-or-percent must fit Kubernetes' ``intstr.IntOrString``, an int32.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

__all__ = [
    "cpu_millis",
    "format_duration",
    "memory_bytes",
    "parse_duration",
    "parse_int_or_percent",
    "parse_quantity",
    "resource_amount",
]

MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1
MAX_DURATION_SECONDS = Fraction(MAX_INT64, 10**9)
"""Go's ``time.Duration`` limit: 2562047h47m16.854775807s."""
_MAX_NUMBER_CHARS = 64
_MAX_EXPONENT = 100
_MAX_DURATION_CHARS = 100

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


def _show(value: object) -> str:
    """``repr`` cut short: the value may be megabytes long."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'thousands of'} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _in_int64(quantity: Fraction, value: object) -> Fraction:
    if abs(quantity) > MAX_INT64:
        raise ValueError(
            f"quantity {_show(value)} is out of range: Kubernetes holds at most {MAX_INT64} (about 8Ei)"
        )
    return quantity


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes resource quantity (``"1.5"``, ``"250m"``, ``"4Gi"``, ``"1e3"``, ``2``).

    The bounds of the module docstring apply: out-of-range values are a ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"quantity must be a number or string, got {value!r}")
    if isinstance(value, int):
        return _in_int64(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"quantity must be finite, got {value!r}")
        if abs(value) > MAX_INT64:
            raise ValueError(f"quantity {value!r} is out of range: Kubernetes holds at most {MAX_INT64}")
        return Fraction(value)
    if not isinstance(value, str):
        raise ValueError(f"quantity must be a number or string, got {_show(value)}")
    text = value.strip()
    if len(text) > _MAX_NUMBER_CHARS + 8:
        raise ValueError(f"quantity {_show(value)} is too long (at most {_MAX_NUMBER_CHARS} digits)")
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{_show(value)} is not a Kubernetes quantity (examples: 500m, 2, 4Gi, 1.5G)")
    if len(match.group("num")) > _MAX_NUMBER_CHARS:
        raise ValueError(f"quantity {_show(value)} is too long (at most {_MAX_NUMBER_CHARS} digits)")
    number = Fraction(match.group("num"))
    if match.group("bin"):
        return _in_int64(number * _BINARY[match.group("bin")], value)
    if match.group("exp"):
        exponent_text = match.group("exp")[1:].lstrip("+-").lstrip("0") or "0"
        if len(exponent_text) > 3 or int(exponent_text) > _MAX_EXPONENT:
            raise ValueError(
                f"quantity {_show(value)} is out of range: the exponent must be within +-{_MAX_EXPONENT}"
            )
        return _in_int64(number * Fraction(10) ** int(match.group("exp")[1:]), value)
    return _in_int64(number * _DECIMAL[match.group("dec") or ""], value)


def cpu_millis(value: object) -> int:
    """CPU quantity in millicores, rounded up as Kubernetes does for ``MilliValue``."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_bytes(value: object) -> int:
    """Byte quantity as an integer, rounded up."""
    return math.ceil(parse_quantity(value))


def resource_amount(resource: str, value: object) -> int:
    """Integer amount of a resource in its planning unit: millicores for cpu, plain units otherwise."""
    if isinstance(value, str):
        return _string_amount(resource, value)
    return cpu_millis(value) if resource == "cpu" else memory_bytes(value)


_PLAIN = re.compile(r"(\d{1,18})(m|Ki|Mi|Gi|Ti)?")
_PLAIN_SCALE = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@functools.lru_cache(maxsize=8192)
def _string_amount(resource: str, value: str) -> int:
    """Memoised: a cluster writes the same few request strings ("100m", "128Mi") on thousands of pods.

    Whole numbers with no suffix, ``m`` or a binary suffix (what kubectl and usage files mostly hold) are
    converted with integers alone, exactly as the ``Fraction`` path would; anything else takes that path.
    """
    plain = _PLAIN.fullmatch(value)
    if plain is not None:
        number, suffix = int(plain.group(1)), plain.group(2)
        if suffix == "m":
            return number if resource == "cpu" else -(-number // 1000)
        scaled = number * _PLAIN_SCALE[suffix]
        if scaled <= MAX_INT64:
            return scaled * 1000 if resource == "cpu" else scaled
        # else out of range: the general path says so
    return cpu_millis(value) if resource == "cpu" else memory_bytes(value)


_DURATION_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE_DURATION = re.compile(r"(\d{1,15})([smh])")
_WHOLE_SECONDS = {"s": 1, "m": 60, "h": 3600}


def _duration_out_of_range(value: object) -> ValueError:
    return ValueError(
        f"duration {_show(value)} is out of range: Go durations hold at most 2562047h47m16.854775807s "
        "(about 292 years)"
    )


def parse_duration(value: object) -> float:
    """Parse a Go duration string (``"90s"``, ``"5m"``, ``"1h30m"``, ``"0"``) into seconds.

    Negative durations parse (Go accepts them; callers that need a length refuse them); beyond Go's range
    (see the module docstring) or over 100 characters is a ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"duration must be a string like '90s', '5m' or '1h30m', got {_show(value)}")
    text = value.strip()
    if len(text) > _MAX_DURATION_CHARS:
        raise ValueError(f"duration {_show(value)} is too long (at most {_MAX_DURATION_CHARS} characters)")
    whole = _WHOLE_DURATION.fullmatch(text)
    if whole is not None:
        # Whole seconds, minutes or hours (a usage file's ages, 155,000 of them in a large replay): exact
        # in integers, so the same float the general path's fractions give.
        seconds = int(whole.group(1)) * _WHOLE_SECONDS[whole.group(2)]
        if seconds > MAX_DURATION_SECONDS:
            raise _duration_out_of_range(value)
        return float(seconds)
    sign = 1
    if text[:1] in "+-" and text:
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"{_show(value)} is not a duration (examples: 90s, 5m, 1h30m)")
    total = Fraction(0)
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += Fraction(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"{_show(value)} is not a duration (examples: 90s, 5m, 1h30m; units ns us ms s m h)")
    if total > MAX_DURATION_SECONDS:
        raise _duration_out_of_range(value)
    return float(sign * total)


def format_duration(seconds: float) -> str:
    """Write seconds back the way Go prints durations, so effective config round-trips."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    hours, remaining = divmod(remaining, 3600)
    minutes, remaining = divmod(remaining, 60)
    out = sign
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    secs = f"{remaining:.9f}".rstrip("0").rstrip(".")
    return out + f"{secs}s"


def parse_int_or_percent(value: object) -> int | str:
    """Validate an int-or-string as Kubernetes does: a non-negative int32 or ``"N%"`` (N an int32)."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or a percentage like '10%', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {_show(value)}")
        if value > MAX_INT32:
            raise ValueError(f"must be at most {MAX_INT32} (an int32, as in Kubernetes), got {_show(value)}")
        return value
    if isinstance(value, str) and len(value) <= 40:
        text = value.strip()
        digits = text[:-1] if text.endswith("%") else text
        if digits.isascii() and digits.isdigit():
            if int(digits) > MAX_INT32:
                raise ValueError(f"must be at most {MAX_INT32} (an int32, as in Kubernetes), got {value!r}")
            return text if text.endswith("%") else int(text)
    raise ValueError(f"expected an integer or a percentage like '10%', got {_show(value)}")
