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
            key = unknown[0]
            hint = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; known fields: {', '.join(known)}"
            raise ValueError(f"unknown field {key!r}{suggestion}")
        return {k: v for k, v in data.items() if k not in cls.ignored_fields or k in cls.model_fields}
