"""The collector is kept off the cluster cache, and frozen garbage cycles are still found in time."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from descheduler.service.heap import HeapKeeper


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.enabled = True

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def isenabled(self) -> bool:
        return self.enabled

    def enable(self) -> None:
        self.calls.append("enable")
        self.enabled = True

    def disable(self) -> None:
        self.calls.append("disable")
        self.enabled = False


def test_the_cache_is_frozen_after_the_sync_and_the_survivors_after_every_cycle() -> None:
    recorder = Recorder()
    keeper = HeapKeeper(full_every=3, collector=recorder)
    keeper.settle()
    for _ in range(4):
        keeper.after_cycle()
    assert recorder.calls == [
        *("collect", "freeze"),  # the sync
        *("collect", "freeze"),  # cycle 1: only what is newer than the freeze is walked
        *("collect", "freeze"),
        *("unfreeze", "collect", "freeze"),  # cycle 3: everything thawed and collected once
        *("collect", "freeze"),
    ]


def test_the_collector_is_off_during_a_cycle_and_back_on_after_it_even_when_the_cycle_fails() -> None:
    recorder = Recorder()
    keeper = HeapKeeper(full_every=100, collector=recorder)
    with keeper.cycle():
        assert not recorder.enabled
    assert recorder.enabled
    with pytest.raises(RuntimeError), keeper.cycle():
        raise RuntimeError("the cycle broke")
    assert recorder.enabled
    assert recorder.calls == [*("disable", "enable", "collect", "freeze")] * 2


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    recorder = Recorder()
    recorder.enabled = False
    with HeapKeeper(collector=recorder).cycle():
        pass
    assert not recorder.enabled


def test_a_keeper_that_would_never_collect_everything_is_refused() -> None:
    with pytest.raises(ValueError, match="full_every"):
        HeapKeeper(full_every=0)


class Node:
    """An object that can sit in a reference cycle (and be weakly referenced)."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def thawed() -> Iterator[None]:
    """The real collector: whatever a test froze is thawed again for the tests after it."""
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


@pytest.mark.usefixtures("thawed")
def test_a_frozen_garbage_cycle_lives_until_the_next_full_collection_and_no_longer() -> None:
    keeper = HeapKeeper(full_every=3)
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    keeper.settle()
    assert gc.get_freeze_count() > 0
    del a, b  # now garbage, but a cycle: reference counting cannot free it, and it is frozen
    keeper.after_cycle()
    keeper.after_cycle()
    assert alive() is not None  # frozen: the collections of cycles 1 and 2 do not walk it
    keeper.after_cycle()
    assert alive() is None  # cycle 3 thawed and collected everything


@pytest.mark.usefixtures("thawed")
def test_garbage_made_during_a_cycle_is_collected_at_its_end() -> None:
    keeper = HeapKeeper(full_every=100)
    keeper.settle()
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    keeper.after_cycle()
    assert alive() is None
