"""``crd_change(desired, live) -> CrdChange``: whether, and how, a CRD may be brought up to date.

Pure: the caller reads the live CRD (or finds none) and carries the answer
out. One rule serves the hub's own ServingStack CRD and the CRDs a chart
ships in ``crds/`` (which Helm installs once and never upgrades); those are
held to more besides, whoever serves the chart (``plan.chart_crds``).

- The desired CRD is stamped with the product's digest (``wire.stamp``), so
  a live CRD that carries the same digest costs no write at all.
- A CRD is never deleted here: dropping one deletes every object of its
  kind, tenants' included.
- The API server refuses an update whose versions leave out one still in
  ``status.storedVersions``; that is named before anything is sent, with
  what to do about it, rather than found as a 422 half-way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from modelplane.wire import DIGEST_ANNOTATION, stamp


class CrdAction(StrEnum):
    CREATE = "Create"
    UNCHANGED = "Unchanged"
    UPDATE = "Update"
    # The update would drop a version objects are still stored at.
    REFUSE = "Refuse"


@dataclass(frozen=True)
class CrdChange:
    name: str
    action: CrdAction
    # Versions the live CRD serves that the desired one no longer lists.
    removed: tuple[str, ...] = ()
    # Of those, the ones objects are still stored at (a reason for REFUSE).
    still_stored: tuple[str, ...] = ()
    # Any other reason for REFUSE, in words (a chart's CRD: plan.chart_crds).
    refusal: str = ""

    @property
    def writes(self) -> bool:
        return self.action in (CrdAction.CREATE, CrdAction.UPDATE)

    @property
    def message(self) -> str:
        """What a person reads: which CRD, what happens, and what to do when refused."""
        if self.refusal:
            return self.refusal
        if self.action is CrdAction.REFUSE:
            versions = ", ".join(self.still_stored)
            return (
                f"CRD {self.name} still stores objects at {versions}, which the new "
                f"definition no longer serves: migrate the stored objects to a served "
                f"version and remove {versions} from the CRD's status.storedVersions, "
                "then retry"
            )
        if self.removed:
            return (
                f"CRD {self.name}: {self.action.value.lower()}; it no longer serves "
                f"{', '.join(self.removed)} (no object is stored there)"
            )
        return f"CRD {self.name}: {self.action.value.lower()}"


def _versions(crd: Mapping[str, Any]) -> list[str]:
    versions = (crd.get("spec") or {}).get("versions") or []
    return [str(v.get("name")) for v in versions if isinstance(v, Mapping) and v.get("name")]


def crd_change(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> CrdChange:
    """What bringing ``live`` to ``desired`` (stamped, see ``wire.stamp``) takes."""
    name = str(desired["metadata"]["name"])
    if live is None:
        return CrdChange(name, CrdAction.CREATE)
    want = (desired["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION)
    have = ((live.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
    if want is not None and want == have:
        return CrdChange(name, CrdAction.UNCHANGED)
    kept = set(_versions(desired))
    removed = tuple(v for v in _versions(live) if v not in kept)
    stored = (live.get("status") or {}).get("storedVersions") or []
    still_stored = tuple(str(v) for v in stored if str(v) not in kept)
    if still_stored:
        return CrdChange(name, CrdAction.REFUSE, removed, still_stored)
    return CrdChange(name, CrdAction.UPDATE, removed)


# Marks a CRD the product applied from a chart's crds/, with the release's
# name: a later version that no longer ships it is then found, and named.
CHART_CRDS_LABEL = "modelplane.ai/chart-crds"


class ChartCrdsRefused(ValueError):
    """A chart's crds/ holds something other than CRDs: nothing of it is applied."""


def chart_crds(docs: list[Any], release: str) -> list[dict[str, Any]]:
    """A chart's crds/ as the product applies them: stamped, and marked as the release's.

    A document that is not a CustomResourceDefinition refuses the whole set:
    crds/ is applied before Helm and outside the release, so nothing else may
    ride along with it.
    """
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if (
            not isinstance(doc, dict)
            or doc.get("apiVersion") != "apiextensions.k8s.io/v1"
            or doc.get("kind") != "CustomResourceDefinition"
            or not isinstance(doc.get("metadata"), dict)
            or not isinstance(doc["metadata"].get("name"), str)
        ):
            raise ChartCrdsRefused(
                f"the chart of release {release} holds something other than an "
                "apiextensions.k8s.io/v1 CustomResourceDefinition in crds/; nothing of it "
                "is applied"
            )
        meta = dict(doc["metadata"])
        meta["labels"] = {**(meta.get("labels") or {}), CHART_CRDS_LABEL: release}
        out.append(stamp({**doc, "metadata": meta}))
    return out


def no_longer_shipped(applied: list[dict[str, Any]], labelled: list[str]) -> list[str]:
    """CRDs marked as the release's that its chart no longer ships: kept, and named."""
    shipped = {c["metadata"]["name"] for c in applied}
    return sorted(n for n in labelled if n not in shipped)
