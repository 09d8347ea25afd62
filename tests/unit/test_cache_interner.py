"""The cache's interner shares equal maps between pods and never grows past its limit."""

from __future__ import annotations

from descheduler.kube.cache import Interner


def test_equal_maps_are_shared_and_the_table_never_grows_past_its_limit() -> None:
    interner = Interner(limit=3)
    first = interner.share({"app": "web", "pod-template-hash": "a"})
    assert interner.share({"pod-template-hash": "a", "app": "web"}) is first
    for i in range(10):  # a rollout every few minutes: new hashes keep coming
        interner.share({"app": "web", "pod-template-hash": str(i)})
        assert len(interner._maps) <= 3
    latest = interner.share({"app": "web", "pod-template-hash": "9"})
    assert interner.share({"app": "web", "pod-template-hash": "9"}) is latest  # still sharing once full
    assert first == {"app": "web", "pod-template-hash": "a"}  # maps already handed out stay intact
