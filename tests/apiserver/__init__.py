"""A faithful in-process stand-in for kube-apiserver, for integration tests over real HTTP on 127.0.0.1.

Start one with the ``apiserver`` pytest fixture (``tests/integration/conftest.py``), or directly::

    with ApiServer() as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        server.create(objects.node("n1"))
"""

from tests.apiserver import objects
from tests.apiserver.server import ApiServer, Fault, RecordedRequest

__all__ = ["ApiServer", "Fault", "RecordedRequest", "objects"]
