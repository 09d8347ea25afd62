"""Fail when any two modules of ``descheduler`` import each other, directly or through others.

import-linter's layers contract only sees imports between the top-level packages; a circle inside one
package (``planner.model`` -> ``planner.state`` -> ``planner.model``) passes it. This walks grimp's
module graph, imports under ``if TYPE_CHECKING:`` included (a type-only circle is still a circle for a
reader), and prints each strongly connected group with one concrete cycle through it.

Usage: ``python .ci/no_import_cycles.py [package]``; exit 0 when there is none, 1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a long import chain must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def one_cycle(graph: grimp.ImportGraph, group: list[str]) -> list[str]:
    """A shortest way from the group's first module back to itself, staying inside the group."""
    start = group[0]
    members = set(group)
    back = [m for m in members if start in graph.find_modules_directly_imported_by(m)]
    best: list[str] = []
    for last in back:
        chain = graph.find_shortest_chain(importer=start, imported=last) if last != start else (start,)
        if chain and set(chain) <= members and (not best or len(chain) + 1 < len(best)):
            best = [*chain, start]
    return best or [*group, start]


def main(argv: list[str]) -> int:
    package = argv[1] if len(argv) > 1 else "descheduler"
    sys.path.insert(0, str(REPO))  # the working tree, not a copy installed in the virtualenv
    graph = grimp.build_graph(package, cache_dir=None)
    groups = strongly_connected(graph)
    for group in groups:
        print(f"import cycle among {len(group)} modules: {', '.join(group)}")
        print("  for example: " + " -> ".join(one_cycle(graph, group)))
    if groups:
        return 1
    print(f"no import cycle in {package} ({len(graph.modules)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
