"""Fixtures shared by the integration and control-plane tests, and how pytest-xdist shares out the tests.

The usage backend (simulated kubelets and a real Prometheus) starts once per session, on first use; its
module is imported only then, so the unit tests never load it. Under xdist each worker has its own.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.service import UsageBackend


SHARED_SCOPES = frozenset({"module", "class", "package"})

SAME_SERIES = {"tests/integration/test_service_controls.py": "tests/integration/test_service_restart.py"}
"""Modules whose clusters serve the same node names through a worker's one Prometheus (the first builds
its cluster with the second's ``cluster_for``): kept on one worker, one after the other, as in a run
without xdist. Interleaved with other tests on a worker, a cycle once read ~22,500 cores for every such
node (absurd usage, exit 3), which no run without xdist has shown."""


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called (and only known) with xdist installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, the tests that share a costly setup run on one worker: each module
    that defines a module- or class-scoped fixture (a service, a browser, a cluster set up once for the
    module), the image tests and the modules of ``SAME_SERIES``. Every other test goes to whichever worker
    is free, control-plane tests included: each worker that runs one starts its own control plane once
    (free ports, its own folder), so they no longer queue on one worker. The longest work is handed out
    first (``first_ordered``), so the last worker to finish is not the one that started a 3-minute test
    last.

    Done here rather than with ``xdist_group`` marks: xdist carries a mark to the scheduler as a suffix
    of the test's id, which pytest 9.2 no longer lets it change (pytest-xdist issue 1386), so the marks
    are silently ignored."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    root = config.rootpath

    class SharedSetupScheduling(LoadGroupScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return shared_setup(root, nodeid.split("::")[0]) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete by the first assignment
                self.ordered = True
                for scope in reversed(first_ordered(list(self.workqueue))):
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SharedSetupScheduling(config, log)


LONGEST_FIRST = ("tests/controlplane/test_soak.py",)
"""Tests so long (the soak: about 3 minutes) that they start before any other."""
SLOW_FOLDERS = ("tests/controlplane/", "tests/image")
"""Tests that each take seconds to minutes against a real control plane: handed out before the rest."""


def first_ordered(scopes: list[str]) -> list[str]:
    """The work units (scopes: a group or a test id) to hand out first, in that order: ``LONGEST_FIRST``,
    then the rest of ``SLOW_FOLDERS``, each in the order given."""
    longest = [s for s in scopes if s.startswith(LONGEST_FIRST)]
    slow = [s for s in scopes if s.startswith(SLOW_FOLDERS) and s not in longest]
    return longest + slow


@functools.cache
def shared_setup(root: Path, path: str) -> str | None:
    """The group of the tests in ``path`` (relative to ``root``), or None if each may go anywhere."""
    if path.startswith("tests/image/"):
        return "tests/image"
    if path in SAME_SERIES.values():
        return path
    if path in SAME_SERIES:
        return SAME_SERIES[path]
    try:
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _names_fixture(node.func):
            scopes = [k.value for k in node.keywords if k.arg == "scope"]
            if any(isinstance(s, ast.Constant) and s.value in SHARED_SCOPES for s in scopes):
                return path
    return None


def _names_fixture(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "fixture") or (
        isinstance(func, ast.Name) and func.id == "fixture"
    )


_WORKER_STARTUP: dict[str, float] = {}
"""The control plane's start-up figures as the xdist worker that ran it reported them."""


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called (and only known) with xdist installed
def pytest_testnodedown(node: Any, error: object) -> None:
    _WORKER_STARTUP.update(getattr(node, "workeroutput", {}).get("controlplane_startup", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Under xdist, the line tests/controlplane/conftest.py prints in a run without workers."""
    if _WORKER_STARTUP:
        figures = " ".join(f"{k}={v:.1f}" for k, v in sorted(_WORKER_STARTUP.items()))
        terminalreporter.write_line(f"control plane: {figures}")


@pytest.fixture(scope="session")
def usage_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UsageBackend]:
    """The session's exporter and Prometheus, shared by every test that asks for usage."""
    from tests.support.service import UsageBackend

    backend = UsageBackend()
    try:
        yield backend.start(tmp_path_factory.mktemp("prometheus"))
    finally:
        backend.close()
