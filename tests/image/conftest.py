"""The image tests run the container against the real control plane of the control-plane tests.

A session fixture of ``tests/controlplane/conftest.py`` is not visible here, and importing it would make a
second one: a second control plane on the same worker. The tests of both folders share an xdist group
and this folder's tests come after that one's, so the control plane already running is reused; a
session that runs only this folder starts its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.controlplane import conftest as controlplane
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.conftest import admin_api, namespace

__all__ = ["admin_api", "control_plane", "namespace"]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The session's control plane: the one ``tests/controlplane`` started, else a new one."""
    if controlplane._PLANE:
        yield controlplane._PLANE[0]
        return
    started = time.monotonic()
    plane = ControlPlane.start(tmp_path_factory.mktemp("controlplane"))
    controlplane.STARTUP["total_seconds"] = time.monotonic() - started
    controlplane._PLANE.append(plane)
    try:
        yield plane
    finally:
        plane.stop()
        controlplane._PLANE.clear()
