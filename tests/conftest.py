"""Fixtures shared by the integration and control-plane tests.

The usage backend (simulated kubelets and a real Prometheus) starts once per session, on first use; its
module is imported only then, so the unit tests never load it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.service import UsageBackend


@pytest.fixture(scope="session")
def usage_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UsageBackend]:
    """The session's exporter and Prometheus, shared by every test that asks for usage."""
    from tests.support.service import UsageBackend

    backend = UsageBackend()
    try:
        yield backend.start(tmp_path_factory.mktemp("prometheus"))
    finally:
        backend.close()
