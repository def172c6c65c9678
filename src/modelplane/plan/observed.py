"""Facts about a target cluster, gathered by the operator or the checker.

A pydantic model because it crosses a boundary: ``modelplane render
--observed FILE`` reads it from a file, and tests write it by hand.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The advisory checks' facts are the catalog's (its advisories are written in
# them); re-exported here, next to the rest of what is observed.
from modelplane.catalog.facts import ClusterFacts as ClusterFacts
from modelplane.catalog.facts import ObservedConfigMap as ObservedConfigMap
from modelplane.catalog.facts import ObservedNode as ObservedNode
from modelplane.catalog.facts import ObservedObject as ObservedObject
from modelplane.catalog.facts import ObservedQuota as ObservedQuota
from modelplane.catalog.facts import ObservedService as ObservedService
from modelplane.catalog.facts import ObservedWorkload as ObservedWorkload
from modelplane.plan.capacity import TargetSummary
from modelplane.plan.release_health import (
    NodeFacts,
    RefusedRevision,
    ReleaseObject,
    ReleaseWorkload,
    UnjudgedRelease,
)
from modelplane.plan.release_trust import TamperedRelease
from modelplane.wire import ApiRef


class ObservedRelease(BaseModel):
    """The newest revision of a Helm release, from Helm's storage on the target."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    revision: int
    status: str  # deployed, failed, pending-install, pending-upgrade, ...
    digest: str | None = None  # the modelplane.ai/digest release label, if we set it


class ObservedCondition(BaseModel):
    """A condition the target's controller wrote on one of the product's objects."""

    model_config = ConfigDict(frozen=True)

    type: str
    status: str
    reason: str = ""
    message: str = ""


class Observed(BaseModel):
    """What the target serves and holds, as far as the plan cares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # group ("" for the core group) -> resource plural -> served versions, from
    # API discovery. Each CRD is looked up on its own, so a missing CRD is
    # missing even while its siblings keep the group-version served.
    apis: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    # "group/version/resource" -> names of the objects that exist (only the
    # objects requirements ask about, e.g. DeviceClasses).
    objects: dict[str, list[str]] = Field(default_factory=dict)
    # object key (see catalog.configuration.object_key) -> the digest
    # annotation it carries, for objects the product applied.
    applied: dict[str, str] = Field(default_factory=dict)
    # object key -> the fields (managedFields fieldsV1) the operator's field
    # manager owns on it, for applied objects other than CRDs: what the
    # drift verdict (plan.drift) reads. A key left out was not observed, and
    # the digest alone decides; {} means the operator owns none of it.
    owned: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Helm releases by release name.
    releases: dict[str, ObservedRelease] = Field(default_factory=dict)
    gateway_addresses: list[str] = Field(default_factory=list)
    # The product Gateway's Accepted and Programmed conditions, as its
    # controller wrote them; empty when it wrote none (or there is no
    # Gateway). Judged by the plan (plan.gateway.not_programmed).
    gateway_conditions: list[ObservedCondition] = Field(default_factory=list)
    # The product Bundle's Synced condition, likewise (trust-manager's).
    bundle_conditions: list[ObservedCondition] = Field(default_factory=list)
    # data["ca.crt"] of the ConfigMap trust-manager writes for the Bundle, as
    # the target holds it: the plan decides what of it is published
    # (``plan.gateway.published_ca``).
    bundle_ca_certificate: str | None = None
    # Pull Secret name -> the namespaces a Secret of that name exists in
    # (their presence only, never their data), for the --image-pull-secret
    # names. A name left out was not observed, and nothing is said of it.
    pull_secrets: dict[str, list[str]] = Field(default_factory=dict)
    # Managed mode: the workloads each release's stored manifest installs,
    # with what the target holds of them (plan.release_health judges them);
    # the nodes, when a release runs a DaemonSet (None: not observed); and
    # when all this was observed, the "now" of the health rules.
    # The releases' other objects (Services, ConfigMaps, RBAC, webhook
    # configurations, ...) and what the target holds of them.
    release_objects: list[ReleaseObject] = Field(default_factory=list)
    release_workloads: list[ReleaseWorkload] = Field(default_factory=list)
    # The releases whose stored manifest was refused (over its bounds, not
    # YAML): their workloads are not judged, and the plan says why.
    unjudged_releases: list[UnjudgedRelease] = Field(default_factory=list)
    # The revisions whose workloads reach outside their release's namespace.
    refused_revisions: list[RefusedRevision] = Field(default_factory=list)
    # The releases whose storage on the target is not what the operator wrote
    # and cannot be repaired (plan.release_trust): not judged, not acted on.
    tampered_releases: list[TamperedRelease] = Field(default_factory=list)
    nodes: list[NodeFacts] | None = None
    observed_at: datetime | None = None
    # Facts for the advisory checks; None when they were not gathered (the
    # advisory checks are then left out of the plan).
    cluster: ClusterFacts | None = None
    # What the cluster offers (``status.target``), read with the facts; None
    # when it was not read.
    target: TargetSummary | None = None

    def serves(self, api: ApiRef) -> bool:
        return api.served_in(self.apis)

    def served_versions(self, api: ApiRef) -> list[str]:
        return sorted(self.apis.get(api.group, {}).get(api.resource, []))

    def has_object(self, api: ApiRef, name: str) -> bool:
        return name in self.objects.get(api.key, [])
