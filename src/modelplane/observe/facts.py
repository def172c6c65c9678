"""Reading what the checks need from a target, in a bounded number of requests.

The advisories say which facts they read (``Advisory.needs``); each fact
says which LIST reads it (``catalog.facts``). This module only issues those
LISTs: one per distinct listing, all at once, whatever the number of
advisories or CRDs. With the requirements' own objects (the DeviceClasses)
and discovery, a check of either stack costs a fixed 11 requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from lightkube import AsyncClient

from modelplane.catalog.components import components_of_stack
from modelplane.catalog.components.nvidia_dra_driver import KUBELET_PLUGIN, plugin_placements
from modelplane.catalog.facts import (
    NODES,
    RESOURCE_SLICES,
    ClusterFacts,
    Fact,
    Item,
    Listing,
    assemble,
)
from modelplane.catalog.types import Component, ObjectExists
from modelplane.kube.address import AddressDenied
from modelplane.kube.client import (
    METADATA_LIST,
    ApiStatusError,
    TargetError,
    get_json,
    list_objects,
)
from modelplane.kube.discovery import APIS, served_apis
from modelplane.observe.state import SECRETS, secret_namespaces
from modelplane.pins import Stack
from modelplane.plan.capacity import TargetSummary, summarize_target
from modelplane.plan.observed import Observed

# Answers that mean "you may not see this" or "there is no such thing": the
# fact becomes unobservable and its checks unknown. Anything else is raised.
_UNOBSERVABLE_STATUS = (403, 404, 405)


def needed_facts(components: Iterable[Component]) -> list[Fact]:
    """Every fact the advisories of ``components`` read, each once, in a stable order.

    A namespaced fact is read in each namespace its component is observed in
    (``Component.observed_in``), never across the cluster: a tenant's
    look-alike in a namespace of its own is not the component.
    """
    return list(
        dict.fromkeys(
            scoped
            for c in components
            for a in c.advisories
            for f in a.needs()
            for scoped in ([f.within(n) for n in c.observed_in] if c.observed_in else [f])
        )
    )


async def _read(client: AsyncClient, listing: Listing) -> list[Item] | ApiStatusError:
    try:
        return await list_objects(
            client, listing.api, namespace=listing.namespace, fields=listing.field_selector
        )
    except ApiStatusError as err:
        if err.status not in _UNOBSERVABLE_STATUS:
            raise
        return err


async def observe_cluster(
    client: AsyncClient, components: Iterable[Component], apis: APIS
) -> ClusterFacts:
    """The facts the advisory checks of ``components`` read: one LIST per listing, at once."""
    facts, _ = await _observe(client, components, apis)
    return facts


async def observe_target(
    client: AsyncClient, components: Iterable[Component], apis: APIS
) -> tuple[ClusterFacts, TargetSummary | None]:
    """The advisories' facts and ``status.target``, from the same LISTs and ``GET /version``.

    The Nodes and ResourceSlices the summary reads are the listings the
    GPU advisories make anyway, so the summary costs one request more. It is
    None when the Nodes could not be listed: nothing is then said of GPUs.
    """
    (facts, answers), version = await asyncio.gather(
        _observe(client, components, apis), _version(client)
    )
    nodes = answers.get(Listing(NODES))
    if not isinstance(nodes, list):
        return facts, None
    slices = answers.get(Listing(RESOURCE_SLICES))
    # The GPUs a cordon, a taint or the plugin's node affinity keeps from new
    # pods are not counted: where the plugin runs, its DaemonSets' pod templates say.
    return facts, summarize_target(
        version,
        nodes,
        slices if isinstance(slices, list) else [],
        plugin_placements=plugin_placements(KUBELET_PLUGIN, facts),
    )


async def _version(client: AsyncClient) -> object:
    # Only shown: a target that does not answer has no version to show.
    try:
        return await get_json(client, "/version")
    except (TargetError, AddressDenied):
        return None


async def _observe(
    client: AsyncClient, components: Iterable[Component], apis: APIS
) -> tuple[ClusterFacts, dict[Listing, list[Item] | ApiStatusError]]:
    facts = needed_facts(components)
    unobservable: dict[str, str] = {}
    listings: list[Listing] = []
    for fact in facts:
        if not fact.listing.api.served_in(apis):
            unobservable.setdefault(fact.what, fact.not_served())
        elif fact.listing not in listings:
            listings.append(fact.listing)
    answers = dict(
        zip(
            listings,
            await asyncio.gather(*(_read(client, listing) for listing in listings)),
            strict=True,
        )
    )
    read: list[tuple[Fact, list[Item]]] = []
    for fact in facts:
        answer = answers.get(fact.listing)
        if isinstance(answer, ApiStatusError):
            unobservable.setdefault(fact.what, f"{answer.status} {answer.reason}")
        elif answer is not None:
            read.append((fact, answer))
    return assemble(read, unobservable), answers


async def observe_required_objects(
    client: AsyncClient, components: Iterable[Component], apis: APIS
) -> dict[str, list[str]]:
    """Names of the objects ``ObjectExists`` requirements ask about: one LIST per kind."""
    wanted = {
        r.api.key: r.api
        for c in components
        for r in c.requirements
        if isinstance(r, ObjectExists) and r.api.served_in(apis)
    }
    lists = await asyncio.gather(*(list_objects(client, api) for api in wanted.values()))
    return {key: sorted(_name(o) for o in items) for key, items in zip(wanted, lists, strict=True)}


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


async def observe_pull_secrets(client: AsyncClient, names: Sequence[str]) -> dict[str, list[str]]:
    """Secret name -> the namespaces it is in: one metadata-only LIST per name, never data.

    A name the target does not let us list is left out: not observed, so
    nothing is said of it.
    """

    async def namespaces(name: str) -> list[str] | None:
        try:
            found = await list_objects(
                client, SECRETS, fields=f"metadata.name={name}", accept=METADATA_LIST
            )
        except ApiStatusError as err:
            if err.status not in _UNOBSERVABLE_STATUS:
                raise
            return None
        return secret_namespaces(name, found)

    answers = await asyncio.gather(*(namespaces(name) for name in names))
    return {name: found for name, found in zip(names, answers, strict=True) if found is not None}


async def observe_for_check(
    client: AsyncClient, stack: Stack, pull_secrets: Sequence[str] = ()
) -> Observed:
    """What the checks of ``stack`` read from the target, in a bounded number of requests.

    Each pull Secret name costs one request more.
    """
    components = components_of_stack(stack)
    apis = await served_apis(client)
    objects, cluster, secrets = await asyncio.gather(
        observe_required_objects(client, components, apis),
        observe_cluster(client, components, apis),
        observe_pull_secrets(client, pull_secrets),
    )
    return Observed(apis=apis, objects=objects, cluster=cluster, pull_secrets=secrets)
