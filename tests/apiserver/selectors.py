"""Label and field selectors in their query-string form, parsed and matched like kube-apiserver does.

The grammar follows k8s.io/apimachinery ``labels.Parse`` (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x)``, ``a``, ``!a``, ``a>1``, ``a<1``) and ``fields.ParseSelector`` (``a=b``, ``a==b``,
``a!=b`` with backslash escapes). Bad input raises ``SelectorError`` with the server's wording.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SelectorError(ValueError):
    """A selector the server refuses (HTTP 400)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("gt", "lt") and present:
            try:
                have, want = int(str(value)), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.operator == "gt" else have < want
        return False


def _check_key(key: str, whole: str) -> None:
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {whole!r}")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"unable to parse requirement: invalid label key prefix {key!r} in {whole!r}")


def _check_value(value: str, whole: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(f"unable to parse requirement: invalid label value {value!r} in {whole!r}")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"unable to parse requirement: unbalanced '(' in {text!r}")
    parts.append("".join(current))
    return parts


_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_CMP_RE = re.compile(r"^\s*(?P<key>[^\s!=<>(),]+)\s*(?P<op>==|!=|=|>|<)\s*(?P<value>[^\s!=<>(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=<>(),]+)\s*$")


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector query string; an empty selector selects everything."""
    if text is None or not text.strip():
        return ()
    requirements = []
    for part in _split_top_level(text):
        if not part.strip():
            raise SelectorError(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m["values"].split(","))
            if values == ("",):
                raise SelectorError(
                    f"unable to parse requirement: for 'in', 'notin' operators, values set "
                    f"can't be empty in {text!r}"
                )
            for v in values:
                _check_value(v, text)
            _check_key(m["key"], text)
            requirements.append(Requirement(m["key"], m["op"], values))
        elif m := _CMP_RE.match(part):
            op = {"==": "=", "=": "=", "!=": "!=", ">": "gt", "<": "lt"}[m["op"]]
            _check_key(m["key"], text)
            if op in ("gt", "lt"):
                if not re.fullmatch(r"-?\d+", m["value"]):
                    raise SelectorError(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must "
                        f"be an integer in {text!r}"
                    )
            else:
                _check_value(m["value"], text)
            requirements.append(Requirement(m["key"], op, (m["value"],)))
        elif m := _EXISTS_RE.match(part):
            _check_key(m["key"], text)
            requirements.append(Requirement(m["key"], "!" if m["neg"] else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r} in {text!r}")
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    return all(req.matches(labels) for req in requirements)


def selector_object_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector object (matchLabels / matchExpressions) against labels; empty matches all."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(expr.get("operator"))
        if op is None:
            return False
        if not Requirement(expr.get("key", ""), op, tuple(expr.get("values") or ())).matches(labels):
            return False
    return True


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    negate: bool
    value: str


def _split_escaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str | None) -> tuple[FieldRequirement, ...]:
    if text is None or not text.strip():
        return ()
    out = []
    for part in _split_escaped(text, ","):
        m = re.match(r"^(?P<field>(?:[^=!\\]|\\.)+?)(?P<op>!=|==|=)(?P<value>.*)$", part)
        if not m or not m["field"].strip():
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        out.append(FieldRequirement(m["field"].strip(), m["op"] == "!=", _unescape(m["value"])))
    return tuple(out)


def _dig(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _path_getter(path: str) -> Callable[[Mapping[str, Any]], str]:
    def get(obj: Mapping[str, Any]) -> str:
        return _dig(obj, path)

    return get


def _event_source(obj: Mapping[str, Any]) -> str:
    return _dig(obj, "source.component") or _dig(obj, "reportingComponent")


FieldGetter = Callable[[Mapping[str, Any]], str]

# Fields each resource supports in field selectors (kube-apiserver rejects others with 400).
_COMMON: dict[str, FieldGetter] = {
    "metadata.name": lambda o: _dig(o, "metadata.name"),
    "metadata.namespace": lambda o: _dig(o, "metadata.namespace"),
}
SUPPORTED_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "/pods": {
        **_COMMON,
        **{
            f: _path_getter(f)
            for f in (
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            )
        },
    },
    "/nodes": {**_COMMON, "spec.unschedulable": lambda o: _dig(o, "spec.unschedulable") or "false"},
    "events": {
        **_COMMON,
        **{
            f: _path_getter(f)
            for f in (
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "type",
            )
        },
        "source": _event_source,
        # events.k8s.io/v1 spellings map onto the stored core fields
        **{
            f"regarding.{k}": _path_getter(f"involvedObject.{k}")
            for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reportingController": lambda o: _dig(o, "reportingComponent"),
    },
}


def field_getters(storage_key: str) -> dict[str, FieldGetter]:
    return SUPPORTED_FIELDS.get(storage_key, _COMMON)


def compile_field_selector(storage_key: str, text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    requirements = parse_field_selector(text)
    getters = field_getters(storage_key)
    checks = []
    for req in requirements:
        getter = getters.get(req.field)
        if getter is None:
            raise SelectorError(f"field label not supported: {req.field}")
        checks.append((getter, req))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((getter(obj) == req.value) != req.negate for getter, req in checks)

    return matches
