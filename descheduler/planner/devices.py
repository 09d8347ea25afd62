"""DRA-aware moves: which device-holding pods may move, and which low nodes have devices for them.

With ``evictResourceClaimPods`` a pod with ``spec.resourceClaims`` may move only if every claim came from
a ResourceClaimTemplate (its replacement gets a fresh claim; the old one is deleted with the pod) and is
allocated and reserved for this pod alone. Otherwise it stays, with its reason:

- ``resource-claim-shared``: a claim used by name, or reserved for (owned by) anything else: evicting
  the pod would not free its device;
- ``resource-claim-unallocated``: the claim is not generated, not found, or not allocated yet;
- ``resource-claim-unsupported``: what this check does not model, with the detail: admin access (such a
  request watches devices other claims hold; its pod is never moved), a constraint of an unknown kind or
  on an ``All`` request (the scheduler aborts the pod's scheduling when one fails), a claim asking for more
  than 32 devices, a missing DeviceClass, a claim that could not be read;
- ``resource-claim-cel-error``: a selector cannot be evaluated, within the cost limits of ``cel.py``
  and this cycle's CEL budget, on some device a node the pod may be scheduled on reaches (its node
  selector, required affinity and tolerations admit the node; resources aside). kube-scheduler aborts
  the allocation on such an error, so the replacement would stay Pending. Devices no such node
  reaches are never evaluated, as in the scheduler.

A low node qualifies only if the ResourceSlices it can reach (``nodeName``, ``allNodes``, or a
``nodeSelector`` matching it; only the newest generation of each pool, and only complete, valid pools)
hold enough free devices: not in any claim's allocation (admin-access results excepted, they are not
exclusive), not taken earlier in this cycle for a pod the plan moved, and satisfying the DeviceClass's
selectors and the request's. ``ExactCount`` needs ``count`` of them; ``All`` needs every matching device
the node reaches to be free (and at least one); ``firstAvailable`` takes the first subrequest that fits.
An ``All`` request on a node that sees a pool being updated or invalid is an allocator error, which
aborts the pod's whole scheduling attempt: such a pod stays (``resource-claim-unsupported``) while any
node it may be scheduled on sees one; so does one whose ``All`` request selects a partitionable device
there (kube-scheduler 1.35 panics on it). Partitionable
devices (shared counters), device taints and tolerations, and ``matchAttribute``/``distinctAttribute``
constraints are searched as the allocator does (``allocate.py``). Devices the parser marked unsupported
(shareable, binding conditions, per-device node selection) never count as free.

The scheduler picks its own devices, not necessarily those found here. So once the plan moves a pod to a
node, every device any of its requests could take there is taken for the rest of the cycle, and so is
every partitionable device of a pool whose counters it could spend: a later pod moves there only on
devices the first cannot touch. Devices taken this cycle are kept here, for the whole cycle (both passes,
every pool): a pool reachable from all nodes is shared, so a per-node tally could not hold them.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
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
from descheduler.planner.allocate import (
    MAX_RESULTS,
    Choice,
    Constraint,
    Counters,
    DeviceId,
    Need,
    Search,
    Solution,
    blocking_taint,
)

if TYPE_CHECKING:
    from types import ModuleType

    from descheduler.planner.cel import Meter, Selector


@functools.cache
def _cel() -> ModuleType:
    """``planner/cel.py``, imported on first use: celpy's grammar costs ~0.2 s at start-up, which every
    run without device pods (the feature is opt-in) would pay for nothing."""
    from descheduler.planner import cel

    return cel


MAX_SHOWN = 120
"""An expression quoted in a reason is cut to this many characters."""


@dataclass(frozen=True, slots=True)
class ClaimProblem:
    """Why a device-holding pod stays: one of the ``resource-claim-*`` codes and its message."""

    code: str
    message: str


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
        self.counters = Counters(self.slices, self.allocated)
        self.unavailable = self.allocated | {
            (item.driver, item.pool, device.name)
            for item in self.slices
            for device in item.devices
            if device.unsupported or (item.driver, item.pool) in self.counters.invalid
        }
        """Never free: allocated, of a kind the check does not model (``Device.unsupported``; such a
        device still matches selectors, so an ``All`` request that includes it never fits), or of a pool
        the allocator finds invalid."""
        self.taken: set[DeviceId] = set()
        """Devices this cycle's plan gave to pods it moved."""
        self.devices: dict[DeviceId, tuple[str, Device]] = {
            (item.driver, item.pool, device.name): (item.driver, device)
            for item in self.slices
            for device in item.devices
        }
        """Every device of a usable slice, with its driver."""
        self._reach: dict[str, frozenset[DeviceId]] = {}
        self._reaches_incomplete: dict[str, str] = {}
        self._scopes: dict[Hashable, tuple[int, frozenset[DeviceId]]] = {}
        self._matching: dict[tuple[str, tuple[str, ...], int], frozenset[DeviceId] | ClaimProblem] = {}
        self._needs: dict[str, tuple[Need, ...]] = {}
        self._constraints: dict[str, tuple[Constraint, ...]] = {}
        self._meter: Meter | None = None
        self._contents: dict[DeviceId, bytes] = {}

    # --- (a) may the pod move at all ----------------------------------------------------------------

    def check(self, pod: Pod) -> ClaimProblem | None:
        """None when the pod may move (its device needs then known for ``fit``), else why not."""
        needs: list[Need] = []
        constraints: list[Constraint] = []
        scope: tuple[int, frozenset[DeviceId]] | None = None
        for index, ref in enumerate(pod.resource_claims):
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
                need = self._need(claim, request, scope, index)
                if isinstance(need, ClaimProblem):
                    return need
                needs.append(need)
            constraints += [
                Constraint(index, kind, name, frozenset(names)) for kind, name, names in claim.constraints
            ]
        if scope is not None:
            problem = self._all_problem(pod, needs)
            if problem is not None:
                return problem
        self._needs[pod.uid] = tuple(needs)
        self._constraints[pod.uid] = tuple(constraints)
        return None

    def _all_problem(self, pod: Pod, needs: list[Need]) -> ClaimProblem | None:
        """An ``All`` request fails the scheduler's whole attempt (an error, not a refusal of one node)
        on any node it tries that sees a pool being updated or invalid: the replacement would stay
        Pending however many other nodes fit. One that selects a partitionable device (consuming shared
        counters) on a node the pod may go to panics kube-scheduler 1.35's allocator (its ``All`` list
        leaves the device's pool unset), which takes the whole scheduler down: found by the judge
        (``tests/controlplane/judge_dra.py``)."""
        alls = [c for n in needs for c in n.choices if c.count == 0]
        if not alls:
            return None
        for choice in alls:
            partition = next((d for d in sorted(choice.matching) if self.devices[d][1].consumes), None)
            if partition is not None:
                return ClaimProblem(
                    reasons.RESOURCE_CLAIM_UNSUPPORTED,
                    f"request {choice.label} asks for All devices and device {'/'.join(partition)} consumes "
                    "shared counters: kube-scheduler 1.35 crashes on it (nil pointer in its allocator)",
                )
        label = alls[0].label
        for node in self.nodes:
            if pod_node_affinity_matches(pod, node) and untolerated_taint(pod, node) is None:
                trouble = self._troubled_pool(node)
                if trouble:
                    return ClaimProblem(
                        reasons.RESOURCE_CLAIM_UNSUPPORTED,
                        f"request {label} asks for All devices and node {node.name} sees {trouble}: the "
                        "scheduler aborts the pod's scheduling then",
                    )
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
        for request in claim.requests:
            for sub in request.first_available or (request,):
                if sub.admin_access:
                    return ClaimProblem(
                        reasons.RESOURCE_CLAIM_UNSUPPORTED,
                        f"ResourceClaim {key} request {request.name} asks for admin access (it watches "
                        "devices other claims hold): such a pod is never moved",
                    )
        return _constraint_problem(claim) or _size_problem(claim)

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
        self, claim: ResourceClaim, request: DeviceRequest, scope: tuple[int, frozenset[DeviceId]], index: int
    ) -> Need | ClaimProblem:
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
            name = sub.name if request.first_available else ""
            choices.append(Choice(label, matching, count, request.name, name, sub.tolerations))
        return Need(tuple(choices), index)

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

    def _troubled_pool(self, node: Node) -> str:
        """A pool ``node`` sees (a slice reaching it; a slice of counters reaches every node, as in the
        allocator) whose newest generation is not all published, or that is invalid; "" if none."""
        found = self._reaches_incomplete.get(node.name)
        if found is None:
            found = next(
                (
                    f"pool {item.driver}/{item.pool} {why}"
                    for group, why in ((self.incomplete, "being updated"), (self.slices, "invalid"))
                    for item in group
                    if (group is self.incomplete or (item.driver, item.pool) in self.counters.invalid)
                    and (item.counter_sets or _reaches(item, node))
                ),
                "",
            )
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

    def _fit(self, pod: Pod, node: Node) -> Solution | None:
        needs = self._needs.get(pod.uid)
        if needs is None:
            return Solution()
        if self._leaks_counters(pod, needs, node):
            return None
        search = Search(
            needs,
            self._constraints.get(pod.uid, ()),
            self.reach(node),
            lambda d: d not in self.unavailable and d not in self.taken,
            {d: self.devices[d] for d in self.reach(node)},
            self.counters,
            bool(self._troubled_pool(node)),
        )
        return search.run()

    def _leaks_counters(self, pod: Pod, needs: Sequence[Need], node: Node) -> bool:
        """Whether kube-scheduler 1.35 may spend shared counters on a device it then refuses: its
        allocator books a free partition's counters before checking the device's taints and the claim's
        constraints, and does not give them back when those refuse it (found by the DRA judge,
        ``tests/controlplane/judge_dra.py``). Which devices it tries first is its business, so a node
        where a request may try such a device is refused: conservative, never a Pending replacement."""
        reach = self.reach(node)
        constrained = bool(self._constraints.get(pod.uid))
        for need in needs:
            for choice in need.choices:
                for device_id in choice.matching & reach:
                    device = self.devices[device_id][1]
                    if not device.consumes or device_id in self.unavailable or device_id in self.taken:
                        continue
                    if constrained or blocking_taint(device, choice.tolerations) is not None:
                        return True
        return False

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
        """The pod moves to ``node``: every device its requests could take there is taken for the rest
        of the cycle, and every partitionable device of a pool whose counters it could spend (module
        docstring: the scheduler chooses among them, not us)."""
        reach = self.reach(node)
        could = {d for need in self._needs.get(pod.uid, ()) for c in need.choices for d in c.matching & reach}
        pools = {d[:2] for d in could if self.devices[d][1].consumes}
        self.taken |= could
        self.taken |= {d for d in reach if d[:2] in pools and self.devices[d][1].consumes}


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


def _constraint_problem(claim: ResourceClaim) -> ClaimProblem | None:
    """A constraint the search cannot hold as the scheduler does: of an unknown kind, or on an ``All``
    request (the allocator then fails the whole scheduling attempt when the constraint does not hold)."""
    for kind, attribute, names in claim.constraints:
        if not kind:
            return ClaimProblem(
                reasons.RESOURCE_CLAIM_UNSUPPORTED,
                f"ResourceClaim {claim.key} has a constraint of a kind not modelled (neither matchAttribute "
                "nor distinctAttribute)",
            )
        for request in claim.requests:
            for sub in request.first_available or (request,):
                covered = not names or request.name in names or f"{request.name}/{sub.name}" in names
                if covered and sub.allocation_mode == "All":
                    return ClaimProblem(
                        reasons.RESOURCE_CLAIM_UNSUPPORTED,
                        f"ResourceClaim {claim.key}: {kind} {attribute} applies to request {request.name}, "
                        "which asks for All devices: the scheduler aborts when such a constraint fails",
                    )
    return None


def _size_problem(claim: ResourceClaim) -> ClaimProblem | None:
    """More devices than an allocation holds: the scheduler refuses the claim on every node."""
    least = sum(
        min(sub.count if sub.allocation_mode != "All" else 0 for sub in request.first_available or (request,))
        for request in claim.requests
    )
    if least > MAX_RESULTS:
        return ClaimProblem(
            reasons.RESOURCE_CLAIM_UNSUPPORTED,
            f"ResourceClaim {claim.key} asks for at least {least} devices, more than the {MAX_RESULTS} "
            "an allocation holds",
        )
    return None


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
