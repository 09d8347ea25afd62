"""The image tests run the container against the real control plane of the control-plane tests.

A session fixture of ``tests/controlplane/conftest.py`` is not visible here, and importing it would make a
second one: a second control plane on the same worker. Both folders' fixtures take the worker's one
control plane from ``session_plane``: the one already running, else a new one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.conftest import admin_api, namespace, session_plane

__all__ = ["admin_api", "control_plane", "namespace"]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The worker's control plane: the one ``tests/controlplane`` started, else a new one."""
    yield from session_plane(tmp_path_factory)
