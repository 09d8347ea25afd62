"""The kubelet's liveness probe under floods of the health port (issue 37, point 18): whatever path is
flooded, the probes included, every probe is answered 200 within its 1 s timeout, as the kubelet sees
it (a fresh connection every 0.5 s). The server runs in its own process, as in a pod; 127.0.0.1 only,
each flood bounded to a few seconds (``tests/support/flood.py``; ``benchmarks/health_flood.py`` prints
the same figures for longer floods and for an older tree)."""

from __future__ import annotations

import pytest

from tests.support import flood

pytestmark = pytest.mark.integration

SECONDS = 6.0

FLOODS = [
    ("80 clients on /debug/cache, a 20,000-pod digest", "/debug/cache", 80),
    ("100 clients on /healthz itself", "/healthz", 100),
    ("80 clients on /metrics, 5,000 series", "/metrics", 80),
]


@pytest.mark.parametrize(("case", "path", "clients"), FLOODS, ids=[f[0] for f in FLOODS])
def test_every_liveness_probe_is_answered_within_its_timeout_while_a_path_is_flooded(
    case: str, path: str, clients: int
) -> None:
    with flood.server() as port:
        probes, answered = flood.flooded(port, path, clients, SECONDS)
    missed = [(round(p.at, 1), p.status, round(p.seconds, 3)) for p in probes if not p.answered]
    assert not missed, f"{len(missed)} of {len(probes)} probes missed: {missed}"
    assert len(probes) >= 8, f"{len(probes)} probes in {SECONDS}s"
    assert answered >= clients, f"the flood did not run: {answered} requests answered"
