"""Free TCP ports for the servers the tests start, safe while pytest-xdist runs several workers at once.

A port found by binding port 0 is free only until the socket closes: before the server we start binds it,
another worker's port-0 bind (or one of its servers) may be handed the same port, and a test then talks to
the wrong server or its server cannot start. So under xdist each worker takes its ports from its own block
below the kernel's ephemeral range (where port-0 binds and outgoing connections take theirs), walking the
block from a random start: no two workers share a port and no worker hands one out twice in a row. A port
that anyone still holds (listening, or in TIME_WAIT) is skipped. Without xdist: port 0, as always.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

FIRST = 20000
BLOCK = 1000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


BLOCKS = max(0, (_ephemeral_start() - FIRST) // BLOCK)
"""How many worker blocks fit between ``FIRST`` and the ephemeral range (12 with Linux's defaults)."""

_cursor = itertools.count(random.randrange(BLOCK))


def worker_index() -> int | None:
    """This xdist worker's number (``gw3`` is 3), or None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody holds on ``host`` now, and that no other worker of this session will hand out."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    worker = worker_index()
    if worker is None or BLOCKS == 0:
        with socket.socket(family) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    base = FIRST + (worker % BLOCKS) * BLOCK
    for _ in range(BLOCK):
        port = base + next(_cursor) % BLOCK
        with socket.socket(family) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port on {host} in {base}-{base + BLOCK - 1}")
