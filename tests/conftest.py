"""Fixtures shared by the integration and control-plane tests, and how pytest-xdist shares out the tests.

The usage backend (simulated kubelets and a real Prometheus) starts once per session, on first use; its
module is imported only then, so the unit tests never load it. Under xdist each worker has its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.service import UsageBackend


CONTROL_PLANE_DIR = Path(__file__).resolve().parent / "controlplane"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) the tests that share a costly fixture run on one worker:
    every control-plane test (one control plane per session, which several workers would each start),
    and each module whose tests share a module- or class-scoped fixture (a service, a browser, a cluster
    set up once for the module). Every other test goes to whichever worker is free."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _xdist_group(item: pytest.Item) -> str | None:
    if item.path.is_relative_to(CONTROL_PLANE_DIR):
        return "controlplane"
    info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the fixtures the test uses
    definitions = info.name2fixturedefs.values() if info is not None else ()
    if any(defs and defs[-1].scope in ("module", "class") for defs in definitions):
        return item.nodeid.split("::")[0]
    return None


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
