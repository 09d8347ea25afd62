"""DRA-aware moves: which device-holding pods may move, and which low nodes have devices for them.

With ``evictResourceClaimPods`` a pod with ``spec.resourceClaims`` may move only if every claim came from
a ResourceClaimTemplate (its replacement gets a fresh claim; the old one is deleted with the pod) and is
allocated and reserved for this pod alone. Otherwise it stays, with its reason:

- ``resource-claim-shared``: a claim used by name, or reserved for (owned by) anything else: evicting
  the pod would not free its device;
- ``resource-claim-unallocated``: the claim is not generated, not found, or not allocated yet;
- ``resource-claim-unsupported``: what this check does not model (admin access, constraints, a missing
  DeviceClass, a claim that could not be read), with the detail;
- ``resource-claim-cel-error``: a selector cannot be evaluated, within the cost limits of ``cel.py``
  and this cycle's CEL budget, on some device a node the pod may be scheduled on reaches (its node
  selector, required affinity and tolerations admit the node; resources aside). kube-scheduler aborts
  the allocation on such an error, so the replacement would stay Pending. Devices no such node
  reaches are never evaluated, as in the scheduler.

A low node qualifies only if the ResourceSlices it can reach (``nodeName``, ``allNodes``, or a
``nodeSelector`` matching it; only the newest generation of each pool, and only complete pools) hold
enough free devices: not in any claim's allocation (admin-access results excepted, they are not
exclusive), not taken earlier in this cycle for a pod the plan moved, and satisfying the DeviceClass's
selectors and the request's. ``ExactCount`` needs ``count`` of them; ``All`` needs every matching device
the node reaches to be free (and at least one), and no pool the node reaches to be incomplete (the
scheduler refuses ``All`` then); ``firstAvailable`` takes the first subrequest that fits.
Devices the parser marked unsupported (partitionable, shareable...) never count as free.

The assignment is greedy, request by request, devices in name order; the scheduler backtracks, so a
node may be refused here that the scheduler could have used, never the reverse. Devices taken this
cycle are kept here, for the whole cycle (both passes, every pool): a pool reachable from all nodes is
shared, so a per-node tally could not hold them.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from descheduler.cluster.selectors import node_term_matches, pod_node_affinity_matches, untolerated_taint
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

    from descheduler.planner.cel import Meter, Selector


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
        self.nodes = snapshot.nodes
        self.slices, self.incomplete = _pools(snapshot.resource_slices)
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
        self._reaches_incomplete: dict[str, bool] = {}
        self._scopes: dict[Hashable, tuple[int, frozenset[DeviceId]]] = {}
        self._matching: dict[tuple[str, tuple[str, ...], int], frozenset[DeviceId] | ClaimProblem] = {}
        self._needs: dict[str, tuple[_Need, ...]] = {}
        self._meter: Meter | None = None
        self._contents: dict[DeviceId, bytes] = {}

    # --- (a) may the pod move at all ----------------------------------------------------------------

    def check(self, pod: Pod) -> ClaimProblem | None:
        """None when the pod may move (its device needs then known for ``fit``), else why not."""
        needs: list[_Need] = []
        scope: tuple[int, frozenset[DeviceId]] | None = None
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
            scope = scope or self._scope(pod)
            for request in claim.requests:
                need = self._need(claim, request, scope)
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

    def _scope(self, pod: Pod) -> tuple[int, frozenset[DeviceId]]:
        """(key, devices): the usable devices of the nodes the scheduler may try for the pod (module
        docstring), alike for pods with the same node selector, affinity and tolerations."""
        key = (tuple(sorted(pod.node_selector.items())), pod.required_node_terms, pod.tolerations)
        found = self._scopes.get(key)
        if found is None:
            devices: set[DeviceId] = set()
            for node in self.nodes:
                if pod_node_affinity_matches(pod, node) and untolerated_taint(pod, node) is None:
                    devices |= self.reach(node)
            found = (len(self._scopes), frozenset(devices))
            self._scopes[key] = found
        return found

    def _need(
        self, claim: ResourceClaim, request: DeviceRequest, scope: tuple[int, frozenset[DeviceId]]
    ) -> _Need | ClaimProblem:
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
            matching = self._matching_devices(sub.device_class, sub.selectors, scope)
            if isinstance(matching, ClaimProblem):
                return ClaimProblem(matching.code, f"request {label}: {matching.message}")
            count = 0 if sub.allocation_mode == "All" else sub.count
            choices.append(_Choice(label, matching, count))
        return _Need(tuple(choices))

    def _matching_devices(
        self, class_name: str, selectors: tuple[str, ...], scope: tuple[int, frozenset[DeviceId]]
    ) -> frozenset[DeviceId] | ClaimProblem:
        """The devices of ``scope`` the class's and the request's selectors select (class first, as the
        scheduler evaluates them), or the first CEL error met."""
        key = (class_name, selectors, scope[0])
        found = self._matching.get(key)
        if found is not None:
            return found
        owners = [(f"DeviceClass {class_name}", e) for e in self.classes[class_name].selectors]
        owners += [("the request", e) for e in selectors]
        result = self._evaluate(owners, scope[1])
        self._matching[key] = result
        return result

    def _evaluate(
        self, owners: Sequence[tuple[str, str]], scope: frozenset[DeviceId]
    ) -> frozenset[DeviceId] | ClaimProblem:
        compiled = []
        for owner, expression in owners:
            try:
                compiled.append((owner, _cel().compile_selector(expression)))
            except _cel().CelError as exc:
                return _cel_problem(owner, expression, str(exc), None)
        if self._meter is None:
            self._meter = _cel().Meter()
        matched: set[DeviceId] = set()
        for device_id in sorted(scope):
            for owner, program in compiled:
                verdict = self._verdict(program, device_id)
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

    def _incomplete_here(self, node: Node) -> bool:
        """Whether ``node`` reaches a pool whose newest generation is not all published."""
        found = self._reaches_incomplete.get(node.name)
        if found is None:
            found = any(_reaches(item, node) for item in self.incomplete)
            self._reaches_incomplete[node.name] = found
        return found

    def _verdict(self, program: Selector, device_id: DeviceId) -> bool | str:
        """Whether the selector holds for the device, or why it cannot be evaluated. Remembered across
        cycles by the expression and the device's content (typed: ``true`` is not ``1``): slices rarely
        change. A spent cycle budget is not remembered: the next cycle tries again."""
        driver, device = self.devices[device_id]
        if program.driver_is is not None:
            return driver == program.driver_is
        content = self._contents.get(device_id)
        if content is None:
            content = self._contents[device_id] = _content_key(driver, device)
        key = (program.expression, content)
        found = _VERDICTS.get(key)
        if found is None:
            try:
                found = _cel().selects(program, _cel().device_view(driver, device), self._meter)
            except _cel().CelBudgetError as exc:
                return str(exc)
            except _cel().CelError as exc:
                found = str(exc)
            if len(_VERDICTS) >= MAX_VERDICTS:
                for old in list(itertools.islice(_VERDICTS, MAX_VERDICTS // 4)):
                    del _VERDICTS[old]
            _VERDICTS[key] = found
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
                if choice.count == 0:  # All: every matching device here, at least one, complete pools
                    if not here or len(free) != len(here) or self._incomplete_here(node):
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
"""Selector verdicts remembered across cycles (a bool, or the error's message); the oldest quarter goes
when full, so a cluster with more devices than this still keeps most of what it learnt."""
_VERDICTS: dict[tuple[str, bytes], bool | str] = {}
_KINDS = {"bool": "bool", "int": "int", "float": "double", "str": "string"}


def _content_key(driver: str, device: Device) -> bytes:
    """A digest of what CEL sees of the device, each value with its CEL type (``true`` and ``1`` are
    equal and hash alike in Python, not in CEL); 16 bytes, so the memo stays small."""
    attributes = sorted(
        (k, "version" if k in device.versions else _KINDS.get(type(v).__name__, type(v).__qualname__), v)
        for k, v in device.attributes.items()
    )
    capacity = sorted((k, "quantity", str(v)) for k, v in device.capacity.items())
    text = repr((driver, device.name, attributes, capacity))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _cel_problem(owner: str, expression: str, error: str, device: DeviceId | None) -> ClaimProblem:
    where = f" on device {'/'.join(device)}" if device is not None else ""
    return ClaimProblem(
        reasons.RESOURCE_CLAIM_CEL_ERROR,
        f"selector of {owner} `{_short(expression)}` cannot be evaluated{where}: {error}",
    )


def _pools(
    slices: Iterable[ResourceSlice],
) -> tuple[tuple[ResourceSlice, ...], tuple[ResourceSlice, ...]]:
    """(usable, incomplete): the slices of each pool's newest generation, of complete pools (a pool
    whose newest generation is still being published cannot be reasoned about), and of the others."""
    newest: dict[tuple[str, str], int] = {}
    for item in slices:
        pool = (item.driver, item.pool)
        newest[pool] = max(newest.get(pool, item.pool_generation), item.pool_generation)
    current: dict[tuple[str, str], list[ResourceSlice]] = {}
    for item in slices:
        if item.pool_generation == newest[(item.driver, item.pool)]:
            current.setdefault((item.driver, item.pool), []).append(item)
    usable: list[ResourceSlice] = []
    incomplete: list[ResourceSlice] = []
    for items in current.values():
        complete = all(len(items) == item.slice_count for item in items)
        (usable if complete else incomplete).extend(items)
    return tuple(usable), tuple(incomplete)


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
