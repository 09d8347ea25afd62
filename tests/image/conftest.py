"""The image tests run the container against the real control plane: its fixtures, shared from there."""

from tests.controlplane.conftest import admin_api, control_plane, namespace

__all__ = ["admin_api", "control_plane", "namespace"]
