"""DRA-aware moves: which device-holding pods may move, and which low nodes have devices for them.

With ``evictResourceClaimPods`` a pod with ``spec.resourceClaims`` may move only if every claim came from
a ResourceClaimTemplate (its replacement gets a fresh claim; the old one is deleted with the pod) and is
allocated and reserved for this pod alone. Otherwise it stays, with its reason:

- ``resource-claim-shared``: a claim used by name, or reserved for (owned by) anything else: evicting
  the pod would not free its device;
- ``resource-claim-unallocated``: the claim is not generated, not found, or not allocated yet;
- ``resource-claim-unsupported``: what this check does not model (admin access, constraints, a missing
  DeviceClass, a claim that could not be read), with the detail;
- ``resource-claim-cel-error``: a selector cannot be evaluated on some device; kube-scheduler aborts the
  allocation on such an error, so the replacement would stay Pending.

A low node qualifies only if the ResourceSlices it can reach (``nodeName``, ``allNodes``, or a
``nodeSelector`` matching it; only the newest generation of each pool, and only complete pools) hold
enough free devices: not in any claim's allocation (admin-access results excepted, they are not
exclusive), not taken earlier in this cycle for a pod the plan moved, and satisfying the DeviceClass's
selectors and the request's. ``ExactCount`` needs ``count`` of them; ``All`` needs every matching device
the node reaches to be free (and at least one); ``firstAvailable`` takes the first subrequest that fits.
Devices the parser marked unsupported (partitionable, shareable...) never count as free.

The assignment is greedy, request by request, devices in name order; the scheduler backtracks, so a
node may be refused here that the scheduler could have used, never the reverse. Devices taken this
cycle are kept here, for the whole cycle (both passes, every pool): a pool reachable from all nodes is
shared, so a per-node tally could not hold them.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from descheduler.cluster.selectors import node_term_matches
from descheduler.cluster.types import (
    ClusterSnapshot,
    Device,
    DeviceRequest,
    Node,
    Pod,
    ResourceClaim,
    ResourceSlice,
)
from descheduler.planner import reasons

if TYPE_CHECKING:
    from types import ModuleType

    from descheduler.planner.cel import Selector


@functools.cache
def _cel() -> ModuleType:
    """``planner/cel.py``, imported on first use: celpy's grammar costs ~0.2 s at start-up, which every
    run without device pods (the feature is opt-in) would pay for nothing."""
    from descheduler.planner import cel

    return cel


DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""

MAX_SHOWN = 120
"""An expression quoted in a reason is cut to this many characters."""


@dataclass(frozen=True, slots=True)
class ClaimProblem:
    """Why a device-holding pod stays: one of the ``resource-claim-*`` codes and its message."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class _Choice:
    """One way to satisfy a request: the devices that match, and how many are needed (0: All)."""

    label: str
    """``claim/request`` (``claim/request/subrequest`` in a firstAvailable list)."""
    matching: frozenset[DeviceId]
    count: int


@dataclass(frozen=True, slots=True)
class _Need:
    """One request of a pod's claims: its choices, in order of preference."""

    choices: tuple[_Choice, ...]


@dataclass(slots=True)
class _Fit:
    """The devices a node would give the pod, and what to say about them."""

    devices: list[DeviceId] = field(default_factory=list)
    free_matching: int = 0


def _short(expression: str) -> str:
    flat = " ".join(expression.split())
    return flat if len(flat) <= MAX_SHOWN else flat[: MAX_SHOWN - 3] + "..."


class DeviceIndex:
    """The cycle's DRA view of the snapshot: usable devices, who may reach them, what is taken."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.claims: dict[str, ResourceClaim] = {c.key: c for c in snapshot.resource_claims}
        self.classes = {c.name: c for c in snapshot.device_classes}
        self.slices = _usable(snapshot.resource_slices)
        self.allocated: set[DeviceId] = {
            (r.driver, r.pool, r.device)
            for claim in snapshot.resource_claims
            if claim.allocated
            for r in claim.results
            if not r.admin_access
        }
        self.unavailable = self.allocated | {
            (item.driver, item.pool, device.name)
            for item in self.slices
            for device in item.devices
            if device.unsupported
        }
        """Never free: allocated, or of a kind the check does not model (``Device.unsupported``; such a
        device still matches selectors, so an ``All`` request that includes it never fits)."""
        self.taken: set[DeviceId] = set()
        """Devices this cycle's plan gave to pods it moved."""
        self.devices: dict[DeviceId, tuple[str, Device]] = {
            (item.driver, item.pool, device.name): (item.driver, device)
            for item in self.slices
            for device in item.devices
        }
        """Every device of a usable slice, with its driver."""
        self._reach: dict[str, frozenset[DeviceId]] = {}
        self._matching: dict[tuple[str, tuple[str, ...]], frozenset[DeviceId] | ClaimProblem] = {}
        self._needs: dict[str, tuple[_Need, ...]] = {}

    # --- (a) may the pod move at all ----------------------------------------------------------------

    def check(self, pod: Pod) -> ClaimProblem | None:
        """None when the pod may move (its device needs then known for ``fit``), else why not."""
        needs: list[_Need] = []
        for ref in pod.resource_claims:
            if ref.claim_name:
                return ClaimProblem(
                    reasons.RESOURCE_CLAIM_SHARED,
                    f"uses ResourceClaim {pod.namespace}/{ref.claim_name} by name (claim {ref.name}): "
                    "it may be shared, and evicting the pod would not free its device",
                )
            if not ref.template_name:
                return ClaimProblem(
                    reasons.RESOURCE_CLAIM_UNSUPPORTED,
                    f"claim {ref.name} names neither a ResourceClaim nor a template",
                )
            if not ref.generated_claim_name:
                return ClaimProblem(
                    reasons.RESOURCE_CLAIM_UNALLOCATED,
                    f"claim {ref.name}: no ResourceClaim generated from template {ref.template_name} yet",
                )
            key = f"{pod.namespace}/{ref.generated_claim_name}"
            claim = self.claims.get(key)
            if claim is None:
                return ClaimProblem(reasons.RESOURCE_CLAIM_UNALLOCATED, f"ResourceClaim {key} not found")
            problem = self._claim_problem(pod, claim)
            if problem is not None:
                return problem
            for request in claim.requests:
                need = self._need(claim, request)
                if isinstance(need, ClaimProblem):
                    return need
                needs.append(need)
        self._needs[pod.uid] = tuple(needs)
        return None

    def _claim_problem(self, pod: Pod, claim: ResourceClaim) -> ClaimProblem | None:
        key = claim.key
        if claim.problem:
            return ClaimProblem(reasons.RESOURCE_CLAIM_UNSUPPORTED, f"ResourceClaim {key}: {claim.problem}")
        if not claim.allocated:
            return ClaimProblem(reasons.RESOURCE_CLAIM_UNALLOCATED, f"ResourceClaim {key} is not allocated")
        others = [uid for uid in claim.reserved_for if uid != pod.uid]
        if others or (claim.owner is not None and claim.owner.uid != pod.uid):
            return ClaimProblem(
                reasons.RESOURCE_CLAIM_SHARED,
                f"ResourceClaim {key} is reserved for (or owned by) more than this pod: evicting it would "
                "not free the device",
            )
        if claim.constraints:
            return ClaimProblem(
                reasons.RESOURCE_CLAIM_UNSUPPORTED,
                f"ResourceClaim {key} has constraints (matchAttribute/distinctAttribute), not modelled",
            )
        for request in claim.requests:
            for sub in request.first_available or (request,):
                if sub.admin_access:
                    return ClaimProblem(
                        reasons.RESOURCE_CLAIM_UNSUPPORTED,
                        f"ResourceClaim {key} request {request.name} asks for admin access, not modelled",
                    )
        return None

    def _need(self, claim: ResourceClaim, request: DeviceRequest) -> _Need | ClaimProblem:
        choices = []
        subrequests = request.first_available or (request,)
        for sub in subrequests:
            label = f"{claim.name}/{request.name}" + (f"/{sub.name}" if request.first_available else "")
            if sub.device_class not in self.classes:
                return ClaimProblem(
                    reasons.RESOURCE_CLAIM_UNSUPPORTED,
                    f"request {label}: DeviceClass {sub.device_class} not found (a replacement would stay "
                    "Pending)",
                )
            matching = self._matching_devices(sub.device_class, sub.selectors)
            if isinstance(matching, ClaimProblem):
                return ClaimProblem(matching.code, f"request {label}: {matching.message}")
            count = 0 if sub.allocation_mode == "All" else sub.count
            choices.append(_Choice(label, matching, count))
        return _Need(tuple(choices))

    def _matching_devices(
        self, class_name: str, selectors: tuple[str, ...]
    ) -> frozenset[DeviceId] | ClaimProblem:
        """The usable devices the class's and the request's selectors select (class first, as the
        scheduler evaluates them), or the first CEL error met."""
        key = (class_name, selectors)
        found = self._matching.get(key)
        if found is not None:
            return found
        owners = [(f"DeviceClass {class_name}", e) for e in self.classes[class_name].selectors]
        owners += [("the request", e) for e in selectors]
        result = self._evaluate(owners)
        self._matching[key] = result
        return result

    def _evaluate(self, owners: Sequence[tuple[str, str]]) -> frozenset[DeviceId] | ClaimProblem:
        compiled = []
        for owner, expression in owners:
            try:
                compiled.append((owner, _cel().compile_selector(expression)))
            except _cel().CelError as exc:
                return _cel_problem(owner, expression, str(exc), None)
        matched: set[DeviceId] = set()
        for device_id, (driver, device) in sorted(self.devices.items()):
            for owner, program in compiled:
                verdict = _verdict(program, driver, device)
                if isinstance(verdict, str):
                    return _cel_problem(owner, program.expression, verdict, device_id)
                if not verdict:
                    break
            else:
                matched.add(device_id)
        return frozenset(matched)

    # --- (b) may a node take it -------------------------------------------------------------------------

    def reach(self, node: Node) -> frozenset[DeviceId]:
        """The usable devices ``node`` can reach."""
        found = self._reach.get(node.name)
        if found is None:
            found = frozenset(
                (item.driver, item.pool, device.name)
                for item in self.slices
                if _reaches(item, node)
                for device in item.devices
            )
            self._reach[node.name] = found
        return found

    def _fit(self, pod: Pod, node: Node) -> _Fit | None:
        needs = self._needs.get(pod.uid)
        if needs is None:
            return _Fit()
        reach = self.reach(node)
        chosen: set[DeviceId] = set()
        fit = _Fit()
        for need in needs:
            for choice in need.choices:
                here = choice.matching & reach
                free = sorted(d for d in here if d not in self.unavailable and d not in self.taken)
                free = [d for d in free if d not in chosen]
                if choice.count == 0:  # All: every matching device here, and at least one
                    if not here or len(free) != len(here):
                        continue
                    picked = free
                elif len(free) >= choice.count:
                    picked = free[: choice.count]
                else:
                    continue
                chosen.update(picked)
                fit.devices.extend(picked)
                fit.free_matching += len(free)
                break
            else:
                return None
        return fit

    def fits(self, pod: Pod, node: Node) -> bool:
        """Whether ``node`` has free devices for every request of the pod (``check`` passed)."""
        return self._fit(pod, node) is not None

    def describe(self, pod: Pod, node: Node) -> str:
        """What the audit says of a device pod's destination: the devices it would get, and how many
        free matching devices the node had ("" for a pod without device needs)."""
        if not self._needs.get(pod.uid):
            return ""
        fit = self._fit(pod, node)
        if fit is None:
            return f"no free matching device on {node.name}"
        names = ", ".join(f"{driver}/{pool}/{name}" for driver, pool, name in fit.devices)
        return f"{len(fit.devices)} device(s) on {node.name} ({names}) of {fit.free_matching} free matching"

    def take(self, pod: Pod, node: Node) -> None:
        """The pod moves to ``node``: its devices there are taken for the rest of the cycle."""
        fit = self._fit(pod, node)
        if fit is not None:
            self.taken.update(fit.devices)


MAX_VERDICTS = 100_000
"""Selector verdicts remembered across cycles (a bool, or the error's message)."""
_VERDICTS: dict[tuple[str, Hashable], bool | str] = {}


def _verdict(program: Selector, driver: str, device: Device) -> bool | str:
    """Whether the selector holds for the device, or why it cannot be evaluated. Remembered by the
    expression and the device's content: slices rarely change, and evaluating CEL in Python costs a
    fraction of a millisecond, thousands of times a cycle on a cluster of GPUs."""
    key = (
        program.expression,
        (
            driver,
            device.name,
            tuple(sorted(device.attributes.items())),
            device.versions,
            tuple(sorted(device.capacity.items())),
        ),
    )
    found = _VERDICTS.get(key)
    if found is None:
        try:
            found = _cel().selects(program, _cel().device_view(driver, device))
        except _cel().CelError as exc:
            found = str(exc)
        if len(_VERDICTS) >= MAX_VERDICTS:
            _VERDICTS.clear()
        _VERDICTS[key] = found
    return found


def _cel_problem(owner: str, expression: str, error: str, device: DeviceId | None) -> ClaimProblem:
    where = f" on device {'/'.join(device)}" if device is not None else ""
    return ClaimProblem(
        reasons.RESOURCE_CLAIM_CEL_ERROR,
        f"selector of {owner} `{_short(expression)}` cannot be evaluated{where}: {error}",
    )


def _usable(slices: Iterable[ResourceSlice]) -> tuple[ResourceSlice, ...]:
    """The slices of each pool's newest generation, of complete pools only (a pool whose newest
    generation is still being published cannot be reasoned about)."""
    newest: dict[tuple[str, str], int] = {}
    for item in slices:
        pool = (item.driver, item.pool)
        newest[pool] = max(newest.get(pool, item.pool_generation), item.pool_generation)
    current: dict[tuple[str, str], list[ResourceSlice]] = {}
    for item in slices:
        if item.pool_generation == newest[(item.driver, item.pool)]:
            current.setdefault((item.driver, item.pool), []).append(item)
    usable: list[ResourceSlice] = []
    for items in current.values():
        if all(len(items) == item.slice_count for item in items):
            usable.extend(items)
    return tuple(usable)


def _reaches(item: ResourceSlice, node: Node) -> bool:
    if item.node_name:
        return item.node_name == node.name
    if item.all_nodes:
        return True
    return any(node_term_matches(term, node) for term in item.node_selector)


def take_moved(index: DeviceIndex, moved: Sequence[tuple[Pod, Node]]) -> None:
    """Devices of pods this cycle already moved (a re-plan's ``already``), taken before planning."""
    for pod, node in moved:
        if pod.resource_claims and index.check(pod) is None:
            index.take(pod, node)
