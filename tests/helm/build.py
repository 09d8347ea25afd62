"""``helm`` for the chart tests, built from the ``helm.sh/helm/v3`` Go module by the control-plane builder
(``tests/controlplane/build.py``) and cached beside its binaries:
``~/.cache/load-aware-descheduler/go-bin/helm-<version>/helm`` (``$DESCHEDULER_TEST_CACHE`` moves it).

Run ``python -m tests.helm.build`` to build it ahead (a cold build takes several minutes); the chart tests
call ``build_helm()``, which returns at once when the binary is cached.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.controlplane.build import HELM, HELM_VERSION, BuildError, build

__all__ = ["HELM", "HELM_VERSION", "BuildError", "build_helm"]


def build_helm() -> Path:
    """The cached helm binary, built first if missing."""
    build(HELM)
    return HELM.binary("helm")


def main() -> int:
    try:
        path = build_helm()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
