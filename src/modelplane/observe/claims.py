"""Reading who holds a DRA driver's claims on a target (``plan.claims``).

One paginated LIST of the ResourceClaims in every namespace, only before the
driver's release would be uninstalled: nothing is watched for it. The claims
are the tenants' objects, so the LIST is bounded like every collection a
target sends (``kube.budget``: objects, bytes, and what their parse builds),
and each claim is cut at once to what ``plan.claims.holders`` reads.
"""

from __future__ import annotations

import httpx2
from lightkube import AsyncClient

from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_error
from modelplane.kube.budget import Budget, MiB
from modelplane.kube.client import ApiStatusError, TargetError, list_pages, raw_http
from modelplane.plan.claims import Holder, holders, outline
from modelplane.wire import ApiRef

RESOURCE_CLAIMS = ApiRef("resource.k8s.io", "v1", "resourceclaims")
# One claim per GPU pod or so, of a few KiB each: a cluster of thousands of
# GPU pods is well inside. What is kept of each is its outline, some 200 bytes.
CLAIMS_BUDGET = Budget(items=20_000, bytes=64 * MiB, memory=512 * MiB)
# A cluster that does not serve resource.k8s.io/v1 has no claim of it.
_NOT_SERVED = 404


async def claim_holders(
    client: AsyncClient, driver: str, budget: Budget = CLAIMS_BUDGET
) -> list[Holder]:
    """The pods holding claims ``driver`` allocated on the target, read within ``budget``."""
    try:
        found = await list_pages(raw_http(client), RESOURCE_CLAIMS, outline=outline, budget=budget)
    except ApiStatusError as err:
        if err.status == _NOT_SERVED:
            return []
        raise
    except AddressDenied:
        raise
    except httpx2.TransportError as err:
        raise TargetError(f"cannot reach the API server: {describe_error(err)}") from err
    return holders(found.items, driver)
