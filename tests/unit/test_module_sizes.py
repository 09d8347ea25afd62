"""The team's size rules, checked on every run so they cannot regress silently: the service shell stays
small (no module of ``descheduler/service`` over 400 lines) and no function in ``descheduler`` is over 80
lines (from its ``def`` to its last line, an AST walk)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "descheduler"
SERVICE_MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 80


def module_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """Every function (method, nested function) of ``source`` longer than ``limit`` lines, with its length."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append((f"{node.name} (line {node.lineno})", length))
    return found


def test_no_module_of_the_service_shell_is_over_400_lines() -> None:
    modules = sorted((PACKAGE / "service").glob("*.py"))
    assert modules, "descheduler/service has no modules: the path is wrong"
    too_long = {p.name: n for p in modules if (n := module_lines(p)) > SERVICE_MODULE_MAX_LINES}
    assert too_long == {}, f"split these service modules by what they own: {too_long}"


def test_no_function_in_the_package_is_over_80_lines() -> None:
    too_long = {
        f"{path.relative_to(PACKAGE.parent)}: {name}": length
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, length in long_functions(path.read_text(encoding="utf-8"), FUNCTION_MAX_LINES)
    }
    assert too_long == {}, f"split these functions: {too_long}"


@pytest.mark.parametrize(
    ("body_lines", "expected"),
    [
        (FUNCTION_MAX_LINES - 1, []),  # def line + body = exactly the limit
        (FUNCTION_MAX_LINES, [("f (line 1)", FUNCTION_MAX_LINES + 1)]),
    ],
)
def test_the_function_walk_counts_from_def_to_last_line(
    body_lines: int, expected: list[tuple[str, int]]
) -> None:
    source = "def f():\n" + "    x = 1\n" * body_lines
    assert long_functions(source, FUNCTION_MAX_LINES) == expected


def test_the_function_walk_finds_methods_and_nested_functions() -> None:
    source = "class C:\n    def m(self):\n        def inner():\n" + "            pass\n" * 90
    assert [name for name, _ in long_functions(source, FUNCTION_MAX_LINES)] == [
        "m (line 2)",
        "inner (line 3)",
    ]
