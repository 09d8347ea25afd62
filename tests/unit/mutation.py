"""Where a fuzz test can change an object: every path to a value, and the container holding one. Shared
by the parsers' and the configuration's property tests, which all edit realistic objects in place."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st


def paths(value: Any, prefix: tuple[Any, ...] = (), max_depth: int | None = None) -> list[tuple[Any, ...]]:
    """Every place a value sits (dict keys and list positions), at most ``max_depth`` steps down (so a
    walk need not descend into a hostile value nested hundreds deep)."""
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if max_depth is not None and len(prefix) >= max_depth:
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(paths(item, (*prefix, key), max_depth))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(paths(item, (*prefix, i), max_depth))
    return out


def parent_of(obj: Any, path: tuple[Any, ...]) -> Any:
    """The dict or list that holds the value at ``path`` (``parent_of(o, p)[p[-1]]`` is that value)."""
    for step in path[:-1]:
        obj = obj[step]
    return obj


def edit_places(
    draw: st.DrawFn, obj: Any, paths_of: Callable[[Any], list[tuple[Any, ...]]] = paths
) -> Iterator[tuple[Any, Any]]:
    """One to four random places of ``obj`` as (container, key) for the caller to edit in place; each is
    drawn after the previous edit, so an edit may make or remove the next one's places."""
    for _ in range(draw(st.integers(1, 4))):
        places = paths_of(obj)
        if not places:
            return
        path = draw(st.sampled_from(places))
        yield parent_of(obj, path), path[-1]
