"""Before a device-holding pod is evicted, its ResourceClaims as the server holds them must still be its
own, allocated and reserved for it alone (``service/verify.claim_disagreement``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from descheduler.cluster.types import OwnerRef, Pod, PodClaimRef, ResourceClaim
from descheduler.kube.verify import ClaimsView
from descheduler.planner import reasons
from descheduler.service.verify import claim_disagreement

POD = Pod(
    "ml", "trainer-0", "uid-0", "node-a",
    resource_claims=(PodClaimRef("gpu", template_name="one-gpu", generated_claim_name="trainer-0-gpu-x"),),
)  # fmt: skip
OWN = ResourceClaim(
    "ml", "trainer-0-gpu-x", "c-uid", allocated=True, node_name="node-a", reserved_for=("uid-0",),
    owner=OwnerRef("Pod", "trainer-0", "uid-0", "v1"),
)  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "claims", "code", "words"),
    [
        (POD, {OWN.name: OWN}, None, ""),
        (
            POD,
            {OWN.name: replace(OWN, allocated=False, reserved_for=())},
            reasons.VERIFY_REFUSED,
            "not allocated",
        ),
        (
            POD,
            {OWN.name: replace(OWN, reserved_for=("uid-0", "uid-9"))},
            reasons.VERIFY_REFUSED,
            "1 other pod",
        ),
        (
            POD,
            {OWN.name: replace(OWN, owner=OwnerRef("Pod", "x", "uid-x", "v1"))},
            reasons.VERIFY_REFUSED,
            "not owned",
        ),
        (POD, {OWN.name: None}, reasons.VERIFY_REFUSED, "is gone"),
        (
            replace(POD, resource_claims=(PodClaimRef("gpu", template_name="one-gpu"),)),
            {},
            reasons.VERIFY_REFUSED,
            "no claim generated yet",
        ),
        (
            replace(POD, resource_claims=(PodClaimRef("gpu", claim_name="team-gpu"),)),
            {},
            reasons.VERIFY_REFUSED,
            "team-gpu by name: shared",
        ),
    ],
    ids=[
        "own-allocated",
        "unallocated",
        "became-shared",
        "not-owned",
        "gone",
        "not-generated",
        "named-claim",
    ],
)
def test_a_claim_that_is_not_the_pods_own_allocated_device_stops_the_eviction(
    pod: Pod, claims: dict[str, ResourceClaim | None], code: str | None, words: str
) -> None:
    found = claim_disagreement(pod, ClaimsView(claims, requests=len(claims)))
    assert (found.code if found else None) == code
    if found is not None:
        assert words in found.message and pod.key in found.message
        assert found.stale == (() if "by name" in words else ("resourceclaims",))


def test_a_claim_that_cannot_be_read_stops_the_eviction_as_unreadable() -> None:
    found = claim_disagreement(POD, ClaimsView({}, problem="GET ...: timed out"))
    assert found is not None and found.code == reasons.VERIFY_UNREADABLE and "timed out" in found.message
