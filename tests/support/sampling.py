"""A check called over and over in a thread of its own while a block runs: budget watches, the simulated
kubelets that keep usage following the pods, soak checkpoints."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def sampling(check: Callable[[], None], name: str, every: float = 0.1) -> Iterator[None]:
    """Call ``check`` every ``every`` seconds in a thread named ``name`` while the block runs; the thread
    is stopped and joined (5 s at most) when the block ends."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            check()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
