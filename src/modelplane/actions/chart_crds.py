"""A chart's crds/ applied before Helm installs or upgrades its release.

Helm installs the CRDs of a chart's crds/ directory (and its subcharts') once
and never upgrades them, so a new controller version would run against the
old CRD, and the API server would prune every field the new version added.
Before each install or upgrade of a chart the catalog marks so
(``CrdPlacement``), its CRDs are applied with server-side apply under the
product's field manager. What to apply and whether a change is safe are the
plan's (``plan/crds.py``, and for a chart's, ``plan/chart_crds.py``: only the
component's API groups, never another owner's CRD, never a downgrade); this
only carries it out. A CRD is never deleted: one a newer chart no longer
ships is named, and kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from modelplane.actions.apply import apply_object
from modelplane.actions.helm import Helm
from modelplane.catalog.components import BY_NAME
from modelplane.faults import ErrorKind, KnownError
from modelplane.plan.chart_crds import chart_crd_change, crd_groups, foreign
from modelplane.plan.crds import (
    CHART_CRDS_LABEL,
    CrdAction,
    CrdChange,
    chart_crds,
    no_longer_shipped,
)
from modelplane.plan.model import PlannedRelease
from modelplane.untrusted import Limits, load_yaml_all

# A chart's CRDs are large: kube-prometheus-stack's ten are about 6 MiB of
# YAML, its Prometheus CRD alone over 1 MiB, and CRD schemas nest deeply.
_CRD_LIMITS = Limits(max_bytes=32 * 1024 * 1024, max_depth=256, max_nodes=4_000_000)


class CrdUpgradeRefused(KnownError):
    """A chart CRD not to write (see plan/chart_crds.py): the release stops before Helm."""

    kind = ErrorKind.INVALID


@dataclass(frozen=True)
class ChartCrdsApplied:
    changes: tuple[CrdChange, ...]
    # Marked as the release's on the cluster, no longer in its chart: kept.
    kept: tuple[str, ...]

    @property
    def written(self) -> list[CrdChange]:
        return [c for c in self.changes if c.writes]


def applies_chart_crds(release: PlannedRelease) -> bool:
    """Whether the release's chart has CRDs the product applies before Helm runs.

    Those of a chart whose own templates upgrade its CRDs are Helm's to apply.
    """
    chart = BY_NAME[release.component].chart
    return chart is not None and not chart.crds.helm_upgrades


@dataclass(frozen=True)
class ChartCrdReads:
    """What the apply of a release's chart CRDs decides on, read alike by reconcile and diff."""

    # The chart version's crds/, as the apply sends them.
    desired: list[dict[str, Any]]
    groups: frozenset[str]
    # Those of another API group than the catalog names for the component:
    # refused, and their names never sent in a GET.
    foreign: list[CrdChange]
    # The cluster's copy of each of the others that exists, by name.
    live: dict[str, dict[str, Any]]


async def read_chart_crd_state(
    helm: Helm, client: AsyncClient, release: PlannedRelease, kubeconfig: str
) -> ChartCrdReads:
    """The chart's CRDs for ``release`` and the cluster's copies of them."""
    desired = await desired_chart_crds(helm, release, kubeconfig)
    groups = crd_groups(release.component)
    refused = {c["metadata"]["name"]: r for c in desired if (r := foreign(c, release.name, groups))}
    names = [c["metadata"]["name"] for c in desired if c["metadata"]["name"] not in refused]
    found = await asyncio.gather(*(live_crd(client, name) for name in names))
    live = {name: body for name, body in zip(names, found, strict=True) if body is not None}
    return ChartCrdReads(desired, groups, list(refused.values()), live)


async def desired_chart_crds(
    helm: Helm, release: PlannedRelease, kubeconfig: str
) -> list[dict[str, Any]]:
    """The CRDs of the release's chart version's crds/, as the apply sends them."""
    text = await helm.show_crds(release, kubeconfig)
    # Megabytes of YAML: parsed off the event loop, which renews the Lease.
    return await asyncio.to_thread(read_chart_crds, text, release.name)


def read_chart_crds(text: str, release: str) -> list[dict[str, Any]]:
    """The CRDs of ``helm show crds`` output, read as the API server reads them, for ``release``."""
    return chart_crds(list(load_yaml_all(text, _CRD_LIMITS)), release)


async def live_crd(client: AsyncClient, name: str) -> dict[str, Any] | None:
    """The CRD ``name`` as the cluster holds it, or None."""
    try:
        body: dict[str, Any] = (await client.get(CustomResourceDefinition, name)).to_dict()
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
    return body


def _refuse(release: PlannedRelease, refused: list[CrdChange]) -> None:
    if refused:
        raise CrdUpgradeRefused(
            f"{release.chart} {release.version} is not installed: "
            + "; ".join(c.message for c in refused)
        )


async def apply_chart_crds(
    helm: Helm, client: AsyncClient, release: PlannedRelease, kubeconfig: str
) -> ChartCrdsApplied:
    """Bring the cluster's CRDs to those of the release's chart version, or refuse, before Helm.

    Every change is decided before the first is sent: one refused CRD (of
    another group, another owner's, a downgrade, or one dropping a stored
    version) stops the release with nothing of its set applied.
    """
    reads = await read_chart_crd_state(helm, client, release, kubeconfig)
    # Another project's CRDs are refused before any other rule is looked at.
    _refuse(release, reads.foreign)
    desired = reads.desired
    changes = [
        chart_crd_change(c, reads.live.get(c["metadata"]["name"]), release.name, reads.groups)
        for c in desired
    ]
    _refuse(release, [c for c in changes if c.action is CrdAction.REFUSE])
    for body, change in zip(desired, changes, strict=True):
        if change.writes:
            await apply_object(client, body)
    labelled = [
        c.metadata.name
        async for c in client.list(
            CustomResourceDefinition, labels={CHART_CRDS_LABEL: release.name}
        )
        if c.metadata is not None and c.metadata.name
    ]
    return ChartCrdsApplied(tuple(changes), tuple(no_longer_shipped(desired, labelled)))
