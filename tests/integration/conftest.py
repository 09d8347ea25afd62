"""Integration fixtures. The API server's live in ``tests/integration/apiserver/fixtures.py``."""

from tests.integration.apiserver.fixtures import apiserver, kube_api, tls_apiserver, tls_files

__all__ = ["apiserver", "kube_api", "tls_apiserver", "tls_files"]
