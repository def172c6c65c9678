"""Facts about a target cluster, gathered by the operator or the checker.

A pydantic model because it crosses a boundary: ``modelplane render
--observed FILE`` reads it from a file, and tests write it by hand.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from modelplane.wire import ApiRef


class ObservedRelease(BaseModel):
    """The newest revision of a Helm release, from Helm's storage on the target."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    revision: int
    status: str  # deployed, failed, pending-install, pending-upgrade, ...
    digest: str | None = None  # the modelplane.ai/digest release label, if we set it


class ObservedWorkload(BaseModel):
    """A Deployment or DaemonSet, reduced to what the advisory checks read."""

    model_config = ConfigDict(frozen=True)

    kind: str  # Deployment or DaemonSet
    namespace: str
    name: str
    images: list[str] = Field(default_factory=list)
    # command and args of every container, in order
    args: list[str] = Field(default_factory=list)
    available: bool = False


class ObservedNode(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[str] = Field(default_factory=list)  # keys
    # extended resources only (names with a "/"), e.g. nvidia.com/gpu
    allocatable: dict[str, str] = Field(default_factory=dict)


class ObservedService(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    ports: list[int] = Field(default_factory=list)


class ObservedConfigMap(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    data: dict[str, str] = Field(default_factory=dict)


class ObservedQuota(BaseModel):
    """A ResourceQuota, reduced to the PriorityClasses its scope selector admits."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    priority_classes: list[str] = Field(default_factory=list)


class ObservedObject(BaseModel):
    """A custom object, reduced to the spec fields a check asks about."""

    model_config = ConfigDict(frozen=True)

    namespace: str = ""
    name: str
    spec: dict[str, Any] = Field(default_factory=dict)


class ClusterFacts(BaseModel):
    """What the advisory checks read. ``None`` means not observed (see ``unobservable``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[ObservedNode] | None = None
    # DRA driver name -> nodes that have a ResourceSlice of it
    resource_slices: dict[str, list[str]] | None = None
    workloads: list[ObservedWorkload] | None = None
    config_maps: list[ObservedConfigMap] | None = None
    services: list[ObservedService] | None = None
    quotas: list[ObservedQuota] | None = None
    # "group/version/resource" -> objects; absent when the kind is not served
    custom: dict[str, list[ObservedObject]] = Field(default_factory=dict)
    # fact ("nodes", "workloads", ...) -> why it could not be observed
    unobservable: dict[str, str] = Field(default_factory=dict)


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
    # Helm releases by release name.
    releases: dict[str, ObservedRelease] = Field(default_factory=dict)
    gateway_addresses: list[str] = Field(default_factory=list)
    # data["ca.crt"] of the ConfigMap trust-manager writes for the Bundle.
    bundle_ca_certificate: str | None = None
    # Facts for the advisory checks; None when they were not gathered (the
    # advisory checks are then left out of the plan).
    cluster: ClusterFacts | None = None

    def serves(self, api: ApiRef) -> bool:
        return api.version in self.apis.get(api.group, {}).get(api.resource, [])

    def served_versions(self, api: ApiRef) -> list[str]:
        return sorted(self.apis.get(api.group, {}).get(api.resource, []))

    def has_object(self, api: ApiRef, name: str) -> bool:
        return name in self.objects.get(api.key, [])
