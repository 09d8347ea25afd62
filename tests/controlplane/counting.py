"""A TCP relay in front of the real kube-apiserver that counts the connections made through it.

The real server keeps no per-client request count (only the audit log, which the shared control plane
does not write), so a test that must prove a command never reached the cluster points its kubeconfig at
this relay: TLS passes through untouched (the server's certificate is for 127.0.0.1, where the relay
listens too), and every request needs a connection, so zero connections means zero requests.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from tests.controlplane.cluster import ControlPlane


class CountingRelay:
    """Accepts on 127.0.0.1:<free port>, forwards each connection to ``target`` byte for byte."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 443)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.connections = 0
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, name="counting-relay", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def counting_kubeconfig(plane: ControlPlane, path: Path) -> Iterator[CountingRelay]:
    """The admin kubeconfig written to ``path`` with its server replaced by a counting relay."""
    relay = CountingRelay(plane.server)
    config = json.loads(plane.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = relay.url
    path.write_text(json.dumps(config))
    try:
        yield relay
    finally:
        relay.close()
