"""One node's answer to "can the scheduler allocate this pod's device requests here?", searched the way
kube-scheduler's structured allocator (k8s.io/dynamic-resource-allocation, 1.35) searches it.

Requests are taken in order, each request's devices as a combination of the free matching devices the
node reaches, backtracking over every request and ``firstAvailable`` subrequest like the allocator
(which tries every device in every order and takes the first full solution). A device is usable when:

- it is free (``devices.py``: not allocated, not taken this cycle, not of a kind left unmodelled);
- every ``NoSchedule``/``NoExecute`` taint of it is tolerated by the request (``DRADeviceTaints``;
  ``ToleratesTaint``: an empty effect or key matches any, ``Exists`` any value, ``Equal`` the value);
- what it consumes of its pool's shared counters fits: for every counter of every counter set of the
  pool, the set's value minus what allocated devices, devices taken this cycle and the devices chosen
  so far consume stays at or above 0 (the allocator checks all counters of the pool, so an over-spent
  pool takes no partitionable device at all);
- it keeps every constraint of its claim that names its request (or ``request/subrequest``; no names:
  every request): ``matchAttribute``, all such devices have the attribute with one value of one type;
  ``distinctAttribute``, no two of them share a value (the allocator compares fewer pairs, so this is
  at least as strict);
- its claim gets at most 32 devices (``AllocationResultsMaxSize``).

``All`` takes every matching device the node reaches, all usable, at least one, and no pool of the node
incomplete. The search is bounded (``MAX_STEPS`` device trials per node): past it the node is refused,
which only keeps the pod where it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from descheduler.cluster.types import AttributeValue, Device, ResourceSlice, Taint, Toleration

DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""
PoolId = tuple[str, str]
CounterSets = dict[str, dict[str, Fraction]]

MAX_RESULTS = 32
"""``AllocationResultsMaxSize``: devices one claim's allocation may hold."""
MAX_STEPS = 10_000
"""Device trials one node's search may make; a real claim needs a handful."""
BLOCKING = frozenset({"NoSchedule", "NoExecute"})
"""The device taint effects that prevent an allocation (``None`` does not)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """One way to satisfy a request: its matching devices, how many (0: All), its tolerations."""

    label: str
    """``claim/request`` (``claim/request/subrequest`` in a firstAvailable list)."""
    matching: frozenset[DeviceId]
    count: int
    request: str = ""
    sub: str = ""
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class Need:
    """One request of one of the pod's claims (``claim``: its index): its choices, preferred first."""

    choices: tuple[Choice, ...]
    claim: int = 0


@dataclass(frozen=True, slots=True)
class Constraint:
    """A claim's ``matchAttribute``/``distinctAttribute`` constraint."""

    claim: int
    kind: str
    attribute: str
    requests: frozenset[str] = frozenset()

    def applies(self, claim: int, choice: Choice) -> bool:
        """Whether a device chosen for ``choice`` of claim ``claim`` falls under the constraint."""
        if claim != self.claim:
            return False
        if not self.requests or choice.request in self.requests:
            return True
        return bool(choice.sub) and f"{choice.request}/{choice.sub}" in self.requests


@dataclass(slots=True)
class Solution:
    """The devices a node would give the pod, and how many free matching devices it had."""

    devices: list[DeviceId] = field(default_factory=list)
    free_matching: int = 0


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``resourceclaim.ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value


def blocking_taint(device: Device, tolerations: Sequence[Toleration]) -> Taint | None:
    """The first taint of ``device`` that prevents its allocation to a request with ``tolerations``."""
    for taint in device.taints:
        if taint.effect in BLOCKING and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _typed(device: Device, attribute: str) -> tuple[str, AttributeValue] | None:
    """The attribute's value with its type (``true`` is not ``1``), None when the device lacks it."""
    value = device.attributes.get(attribute)
    if value is None:
        return None
    kind = "version" if attribute in device.versions else type(value).__name__
    return kind, value


class Counters:
    """The pools' counter sets, less what allocated devices consume, and the pools the allocator finds
    invalid (a device name or counter set twice, a device consuming a set or counter the pool lacks)."""

    def __init__(self, slices: Iterable[ResourceSlice], allocated: set[DeviceId]) -> None:
        self.left: dict[PoolId, CounterSets] = {}
        self.invalid: dict[PoolId, str] = {}
        consumers: list[tuple[PoolId, DeviceId, Device]] = []
        names: set[DeviceId] = set()
        for item in slices:
            pool = (item.driver, item.pool)
            for device in item.devices:
                if (*pool, device.name) in names:
                    self.invalid[pool] = f"device {device.name} published twice"
                names.add((*pool, device.name))
            sets = self.left.setdefault(pool, {})
            for name, counters in item.counter_sets.items():
                if name in sets:
                    self.invalid[pool] = f"counter set {name} published twice"
                sets[name] = dict(counters)
            consumers += [(pool, (*pool, d.name), d) for d in item.devices if d.consumes]
        for pool, device_id, device in consumers:
            sets = self.left[pool]
            for name, counters in device.consumes:
                if name not in sets or not set(counters) <= set(sets[name]):
                    self.invalid[pool] = f"device {device_id[2]} consumes counters of set {name} it lacks"
        for pool, device_id, device in consumers:
            if device_id in allocated and pool not in self.invalid:
                self.spend(pool, device, 1)

    def spend(self, pool: PoolId, device: Device, sign: int) -> None:
        """Take (1) or give back (-1) what ``device`` consumes of its pool's counters."""
        sets = self.left[pool]
        for name, counters in device.consumes:
            for counter, amount in counters.items():
                sets[name][counter] -= sign * amount

    def fit(self, pool: PoolId, device: Device) -> bool:
        """Whether every counter of the pool stays at or above 0 with ``device`` taken too."""
        extra = {name: counters for name, counters in device.consumes}
        return all(
            value - extra.get(name, {}).get(counter, 0) >= 0
            for name, counters in self.left.get(pool, {}).items()
            for counter, value in counters.items()
        )


class _OutOfSteps(Exception):
    """The node's search went past ``MAX_STEPS``."""


class Search:
    """One pod's needs on one node (module docstring)."""

    def __init__(
        self,
        needs: Sequence[Need],
        constraints: Sequence[Constraint],
        reach: frozenset[DeviceId],
        usable: Callable[[DeviceId], bool],
        devices: Mapping[DeviceId, tuple[str, Device]],
        counters: Counters,
        incomplete: bool,
    ) -> None:
        self.needs, self.constraints, self.reach = needs, constraints, reach
        self.usable, self.devices, self.counters, self.incomplete = usable, devices, counters, incomplete
        self.chosen: list[tuple[DeviceId, Choice, int]] = []
        self.in_claim: Counter[int] = Counter()
        self.free: list[int] = []
        self.steps = 0

    def run(self) -> Solution | None:
        """The first solution found, or None (none exists, or the search ran out of steps)."""
        try:
            found = self._need(0)
        except _OutOfSteps:
            found = False
        solution = Solution([d for d, _, _ in self.chosen], sum(self.free)) if found else None
        while self.chosen:  # the counters are shared: give back what the search took
            self._remove()
        return solution

    def _need(self, index: int) -> bool:
        if index == len(self.needs):
            return True
        need = self.needs[index]
        for choice in need.choices:
            here = sorted(choice.matching & self.reach)
            chosen = {d for d, _, _ in self.chosen}
            free = [d for d in here if d not in chosen and self._free(d, choice)]
            self.free.append(len(free))
            if choice.count == 0:
                done = (
                    len(free) == len(here) > 0
                    and not self.incomplete
                    and self._all(index, need, choice, free)
                )
            else:
                done = self._pick(index, need, choice, free, 0, choice.count)
            if done:
                return True
            self.free.pop()
        return False

    def _free(self, device_id: DeviceId, choice: Choice) -> bool:
        return (
            self.usable(device_id) and blocking_taint(self.devices[device_id][1], choice.tolerations) is None
        )

    def _all(self, index: int, need: Need, choice: Choice, devices: list[DeviceId]) -> bool:
        added = 0
        for device_id in devices:
            if not self._add(device_id, need, choice):
                break
            added += 1
        else:
            if self._need(index + 1):
                return True
        for _ in range(added):
            self._remove()
        return False

    def _pick(
        self, index: int, need: Need, choice: Choice, free: list[DeviceId], start: int, left: int
    ) -> bool:
        if left == 0:
            return self._need(index + 1)
        for at in range(start, len(free) - left + 1):
            if self._add(free[at], need, choice):
                if self._pick(index, need, choice, free, at + 1, left - 1):
                    return True
                self._remove()
        return False

    def _add(self, device_id: DeviceId, need: Need, choice: Choice) -> bool:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _OutOfSteps
        device = self.devices[device_id][1]
        pool = (device_id[0], device_id[1])
        if self.in_claim[need.claim] >= MAX_RESULTS:
            return False
        if device.consumes and not self.counters.fit(pool, device):
            return False
        for constraint in self.constraints:
            if constraint.applies(need.claim, choice) and not self._keeps(constraint, device):
                return False
        if device.consumes:
            self.counters.spend(pool, device, 1)
        self.chosen.append((device_id, choice, need.claim))
        self.in_claim[need.claim] += 1
        return True

    def _remove(self) -> None:
        device_id, _, claim = self.chosen.pop()
        self.in_claim[claim] -= 1
        device = self.devices[device_id][1]
        if device.consumes:
            self.counters.spend((device_id[0], device_id[1]), device, -1)

    def _keeps(self, constraint: Constraint, device: Device) -> bool:
        value = _typed(device, constraint.attribute)
        if value is None:
            return False
        others = [
            _typed(self.devices[d][1], constraint.attribute)
            for d, choice, claim in self.chosen
            if constraint.applies(claim, choice)
        ]
        if constraint.kind == "matchAttribute":
            return all(other == value for other in others)
        return all(other != value for other in others)
