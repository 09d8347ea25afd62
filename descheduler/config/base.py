"""Base model for every configuration object: strict about unknown fields, with a did-you-mean hint.

A typo such as ``highThreshold`` must fail loudly: a silently ignored threshold would make the
descheduler evict on defaults the operator never chose.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


def _known_names(cls: type[BaseModel]) -> list[str]:
    names: list[str] = []
    for name, info in cls.model_fields.items():
        names.append(info.alias or name)
    return names


QUOTE_LIMIT = 80
"""Characters of user input an error quotes; the rest is cut, with its length (a 900 KB key must not
become 900 KB of error on stderr and in the pod's log)."""


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters with an ellipsis and the
    full length when longer."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        try:
            digits = str(len(str(abs(value))))
        except ValueError:  # past Python's int-to-text limit (4,300 digits)
            digits = f"about {int(value.bit_length() * 0.30103)}"
        return f"an integer of {digits} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def path_key(key: object, limit: int = QUOTE_LIMIT) -> str:
    """A user's mapping key as one step of a field path, cut like ``quoted`` when longer than ``limit``."""
    text = str(key)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class FieldProblem(ValueError):
    """A problem a model validator finds in one of the model's fields (or deeper): the loader appends
    ``path`` to the model's own location, so the line names the field, not just the object holding it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class StrictModel(BaseModel):
    """Rejects unknown keys, naming the closest known key; accepts camelCase aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    ignored_fields: ClassVar[frozenset[str]] = frozenset()
    """Keys accepted for compatibility that mean nothing here; the loader reports them once."""

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = _known_names(cls)
        allowed = set(known) | set(cls.model_fields) | set(cls.ignored_fields)
        unknown = [key for key in data if key not in allowed]
        if unknown:
            key = str(unknown[0])
            hint = difflib.get_close_matches(key, known, n=1, cutoff=0.6) if len(key) <= QUOTE_LIMIT else []
            suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; known fields: {', '.join(known)}"
            raise FieldProblem(path_key(key), f"unknown field {quoted(key)}{suggestion}")
        return {k: v for k, v in data.items() if k not in cls.ignored_fields or k in cls.model_fields}
