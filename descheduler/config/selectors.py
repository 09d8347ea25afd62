"""Label selectors and namespace filters as the configuration writes them, checked where they are read.

A selector comes either as ``metav1.LabelSelector`` (``matchLabels`` / ``matchExpressions``) or, for the
top-level ``nodeSelector``, as the string kubectl takes (``tier=web,zone in (a,b),!spot``). The string is
parsed here, at load time, so a typo fails ``validate`` instead of the first cycle; the planner turns the
parsed terms into its own selector type.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from descheduler.config.base import StrictModel, quoted

SelectorTerm = tuple[str, str, tuple[str, ...]]
"""``(key, operator, values)`` with a Kubernetes operator: In, NotIn, Exists, DoesNotExist, Gt or Lt."""


class LabelSelectorRequirementConfig(StrictModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirementConfig:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelectorConfig(StrictModel):
    """metav1.LabelSelector as written in YAML."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirementConfig] = Field(
        default_factory=list, alias="matchExpressions"
    )


class Namespaces(StrictModel):
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _include_xor_exclude(self) -> Namespaces:
        if self.include and self.exclude:
            raise ValueError("set either include or exclude, not both")
        return self


_REQUIREMENT = re.compile(
    r"^\s*(?:(?P<not>!)\s*(?P<nkey>[^\s=!<>(),]+)"
    r"|(?P<key>[^\s=!<>(),]+)\s*(?:(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s=!<>(),]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?)\s*$"
)
_OPERATORS = {"=": "In", "==": "In", "!=": "NotIn", "<": "Lt", ">": "Gt"}


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: ``a in (x,y),b`` is two requirements."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def parse_selector_text(text: str) -> tuple[SelectorTerm, ...]:
    """The requirements of a selector written as kubectl takes it; ``ValueError`` names the bad part."""
    terms: list[SelectorTerm] = []
    for part in _split_top_level(text):
        if not part.strip():
            if text.strip():
                raise ValueError(f"empty requirement in selector {quoted(text)}")
            continue
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ValueError(
                f"{quoted(part.strip())} is not a label requirement (examples: a=b, a!=b, a in (x,y), !a)"
            )
        if match.group("nkey"):
            terms.append((match.group("nkey"), "DoesNotExist", ()))
        elif match.group("setop"):
            values = tuple(v.strip() for v in match.group("values").split(",") if v.strip())
            terms.append((match.group("key"), "In" if match.group("setop") == "in" else "NotIn", values))
        elif match.group("op"):
            terms.append((match.group("key"), _OPERATORS[match.group("op")], (match.group("value"),)))
        else:
            terms.append((match.group("key"), "Exists", ()))
    return tuple(terms)
