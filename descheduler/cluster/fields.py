"""The typed guard every cluster parser reads nested fields through (issue 37, point 17).

Objects come from anyone who can write them (a kubelet, a namespace user, a hand-written dump). A field
read without its type checked either crashes (``'str' object has no attribute 'get'``, a traceback out of
``simulate``) or is silently taken for something else (a container whose ``resources`` is a string
counted as asking for nothing: a pod that seems to fit anywhere, then stays Pending). So each nested
field is fetched here: a value of the expected type, the field's default when unset, otherwise
``ObjectError`` naming the object and the field's path. ``parse.py``, ``requests.py`` and ``dra.py``
(through ``parse``' helpers) and the fast path's fallback all read through these, so they refuse alike.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]

MAX_NAME_SHOWN = 253
"""Names longer than a DNS subdomain are cut in messages (a message is one line, whatever the input)."""


class ObjectError(ValueError):
    """A Kubernetes object that cannot be used; the message names the object and the field."""


_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlevel = 3


def show(value: Any) -> str:
    """A bounded ``repr`` for messages: a value nested hundreds deep or megabytes long stays one short
    line (plain ``repr`` could recurse past the interpreter's limit or print the whole value)."""
    return _REPR.repr(value)


def name_text(value: Any) -> str:
    """A name as it may appear in a one-line message (escaped, cut, or saying what is wrong with it)."""
    if not isinstance(value, str):
        return "<no name>" if value is None else f"<bad name {show(value)}>"
    if not value.isprintable():
        return show(value)  # quoted and escaped: a newline in a name must not split a log line
    return value if len(value) <= MAX_NAME_SHOWN else value[:MAX_NAME_SHOWN] + "..."


def describe(obj: Obj) -> str:
    """``Kind namespace/name`` of an object, whatever its metadata holds."""
    meta = obj.get("metadata") or {}
    kind = obj.get("kind") or "object"
    kind = name_text(kind) if isinstance(kind, str) else show(kind)
    name = name_text(meta.get("name")) if isinstance(meta, Mapping) else "<no name>"
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {name_text(namespace)}/{name}" if namespace else f"{kind} {name}"


def wrong_type(obj: Obj, path: str, expected: str, value: Any) -> ObjectError:
    return ObjectError(f"{describe(obj)}: {path} must be {expected}, got {show(value)}")


def field_map(obj: Obj, container: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """``container[key]`` as an object (``{}`` when unset)."""
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise wrong_type(obj, path, "an object", value)
    return value


def field_list(obj: Obj, container: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """``container[key]`` as a list (``[]`` when unset)."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type(obj, path, "a list", value)
    return value


def item_map(obj: Obj, value: Any, path: str) -> Mapping[str, Any]:
    """One element of a list of objects (``containers[i]``, ``volumes[i]``, ``conditions[i]``)."""
    if not isinstance(value, Mapping):
        raise wrong_type(obj, path, "an object", value)
    return value


def scalar_text(obj: Obj, value: Any, path: str, default: str = "") -> str:
    """A string value (``default`` when unset). A number or boolean is taken as its text (hand-written
    YAML's ``value: 1``); a map or list is refused (its text could be megabytes, or garbage taken for
    a name)."""
    if value is None:
        return default
    if type(value) is str:
        return value
    if isinstance(value, (Mapping, list)):
        raise wrong_type(obj, path, "a string", value)
    return str(value)


def field_text(obj: Obj, container: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    """``container[key]`` as text (``scalar_text``); ``default`` when unset or empty."""
    return scalar_text(obj, container.get(key), path, default) or default


def field_bool(obj: Obj, container: Mapping[str, Any], key: str, path: str) -> bool:
    """``container[key]`` as a boolean (``False`` when unset); ``"false"`` is not taken for true."""
    value = container.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise wrong_type(obj, path, "a boolean", value)
    return value
