"""The record types the catalog is made of."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec
    from modelplane.pins import Stack

from modelplane.wire import ApiRef

Values = dict[str, Any]


@dataclass(frozen=True)
class CRDServes:
    """A CustomResourceDefinition is present and serves one version.

    Checked per CRD from API discovery, never through the group-version's
    APIService: that one is shared by every CRD of the group, so it stays
    available when one CRD of the group is missing.
    """

    crd: str  # plural.group
    version: str
    fix: str  # what to do when unmet, for the message

    @property
    def api(self) -> ApiRef:
        plural, _, group = self.crd.partition(".")
        return ApiRef(group, self.version, plural)

    @property
    def title(self) -> str:
        return f"CRD {self.crd} serving {self.version}"


@dataclass(frozen=True)
class ObjectExists:
    """A named cluster-scoped object exists at an API version."""

    api: ApiRef
    kind: str
    name: str
    fix: str

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name} ({self.api.group_version})"


Requirement = CRDServes | ObjectExists


# Advisory checks: the spec's "not checked" entries, observed wherever the
# target lets us. Their results are warnings or unknowns, never unmet: they
# never turn RequirementsMet False (upstream-facts §17 says where each is seen).


@dataclass(frozen=True)
class Workloads:
    """The Deployments or DaemonSets a component runs, found by image in any namespace.

    Matching the image repository's tail (``jetstack/trust-manager``) finds a
    provided install whatever its release name, namespace or mirror registry.
    """

    describe: str  # "the trust-manager controller"
    images: tuple[str, ...]
    kinds: tuple[str, ...] = ("Deployment",)


@dataclass(frozen=True)
class WorkloadsAvailable:
    """Every image of ``workloads`` runs in a workload that reports Available."""

    workloads: Workloads
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe} available"


@dataclass(frozen=True)
class ConfigFileWired:
    """A ConfigMap key holds a YAML document that contains ``expected``.

    ``expected`` is computed from the spec by the same function that gives the
    Managed install its values, so the wiring is written once.
    """

    title: str
    config_map: str  # looked up in every namespace
    key: str
    expected: Callable[[ServingStackSpec], Values]
    fix: str


@dataclass(frozen=True)
class ServicePort:
    """A Service exists at a fixed address and exposes a port."""

    namespace: str
    name: str
    port: int
    fix: str

    @property
    def title(self) -> str:
        return f"Service {self.name}.{self.namespace} exposes port {self.port}"


@dataclass(frozen=True)
class WorkloadArg:
    """The workload runs with ``flag=value`` (``default`` when the flag is absent)."""

    workloads: Workloads
    flag: str
    value: str
    default: str | None
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe} runs with {self.flag}={self.value}"


@dataclass(frozen=True)
class ImageTag:
    """The workload's image tag is the component's pinned version."""

    workloads: Workloads
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe} runs the pinned version"


@dataclass(frozen=True)
class SchedulerName:
    """A scheduler answers to ``name``: its Deployment is ``<name>-<shard>``.

    KAI's operator names each shard's scheduler Deployment after the
    schedulerName it serves; a ``--scheduler-name`` argument, where present,
    says it directly.
    """

    workloads: Workloads
    name: str
    flag: str
    fix: str

    @property
    def title(self) -> str:
        return f"a scheduler answers to schedulerName {self.name}"


@dataclass(frozen=True)
class SelectsEverything:
    """Some object of a kind has each of ``fields`` (spec.*) set to ``{}`` (select all)."""

    api: ApiRef
    kind: str
    fields: tuple[str, ...]
    title: str
    fix: str


@dataclass(frozen=True)
class GpuNodes:
    """How a GPU node is recognised, and what DRA on it looks like."""

    taint: str  # nodes tainted with this key are GPU nodes
    labels: tuple[str, ...]  # any of these labels (not "false") marks a GPU node
    nfd_label_prefix: str  # NFD's PCI labels: <prefix><class>_<vendor>.present or <prefix><vendor>
    pci_vendor: str
    resource: str  # the extended resource a device plugin advertises
    driver: str  # the DRA driver name on ResourceSlices


@dataclass(frozen=True)
class NoNodeAdvertises:
    """No Node advertises the GPU extended resource (a device plugin next to DRA)."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"no node advertises {self.gpus.resource} through a device plugin"


@dataclass(frozen=True)
class GpuNodesLabelled:
    """Every GPU node carries NFD's PCI vendor label."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"GPU nodes carry NFD's PCI vendor label ({self.gpus.pci_vendor})"


@dataclass(frozen=True)
class GpuNodesPublishSlices:
    """Every GPU node has a ResourceSlice of the driver."""

    gpus: GpuNodes
    fix: str

    @property
    def title(self) -> str:
        return f"GPU nodes publish ResourceSlices of {self.gpus.driver}"


@dataclass(frozen=True)
class CriticalPodsAdmitted:
    """Where quota restricts system-critical pods, the driver's namespace admits them.

    A ResourceQuota scoped to these PriorityClasses in ``restricted_in`` (GKE's
    ``gcp-critical-pods`` in kube-system) is the sign of the restriction; the
    driver's namespace is where ``workloads`` runs.
    """

    workloads: Workloads
    classes: tuple[str, ...]
    restricted_in: str
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe}'s namespace admits system-critical pods"


Advisory = (
    WorkloadsAvailable
    | ConfigFileWired
    | ServicePort
    | WorkloadArg
    | ImageTag
    | SchedulerName
    | SelectsEverything
    | NoNodeAdvertises
    | GpuNodesLabelled
    | GpuNodesPublishSlices
    | CriticalPodsAdmitted
)


@dataclass(frozen=True)
class ChartSource:
    """Where a chart comes from: a classic HTTP repository or an OCI registry."""

    chart: str
    repository: str  # https://... (index.yaml) or oci://registry/path (without the chart)


@dataclass(frozen=True)
class ManifestSource:
    """Manifests fetched from an upstream release when applied.

    The URL is built from a base that an air-gapped install points at a mirror.
    """

    base_url: str
    path: str  # relative to base_url; "{version}" is substituted
    # CRDs the file carries besides those the requirements check. Nothing
    # else is applied from it: a file holding anything more is refused whole.
    other_crds: tuple[str, ...] = ()

    def url(self, version: str, base_url: str | None = None) -> str:
        base = (base_url or self.base_url).rstrip("/")
        return f"{base}/{self.path.format(version=version)}"


@dataclass(frozen=True)
class Component:
    """One unit of the serving substrate.

    ``values`` and ``objects`` are functions of the spec, so every value the
    spec decides is computed here and nowhere else.
    """

    name: str
    summary: str
    namespace: str
    version: str
    stacks: frozenset[Stack]
    version_field: str | None = None  # dotted spec path that overrides ``version``
    # substrate: installed in Managed mode, only checked in Provided mode.
    # config: the product's own, applied in both modes (ModelExpress CRDs).
    role: Literal["substrate", "config"] = "substrate"
    chart: ChartSource | None = None
    manifests: ManifestSource | None = None
    values: Callable[[ServingStackSpec], Values] = field(default=lambda _spec: {})
    # Kubernetes objects the component is made of when it is not a chart.
    objects: Callable[[ServingStackSpec], list[dict[str, Any]]] | None = None
    # Whether the component belongs to this spec at all (beyond the stack).
    enabled: Callable[[ServingStackSpec], bool] = field(default=lambda _spec: True)
    depends_on: tuple[str, ...] = ()
    # Wait for the release's workloads before dependents go on.
    wait: bool = False
    # The CRDs the component serves: checked in Provided mode, and used as the
    # evidence that a Managed install serves what it should.
    requirements: tuple[Requirement, ...] = ()
    # Observed "not checked" entries: warnings, never unmet (see Advisory).
    advisories: tuple[Advisory, ...] = ()
    not_checked: tuple[str, ...] = ()
    not_needed: tuple[str, ...] = ()

    @property
    def kind(self) -> Literal["chart", "manifests", "objects"]:
        if self.chart is not None:
            return "chart"
        return "manifests" if self.manifests is not None else "objects"

    @property
    def release_name(self) -> str:
        # mp-<chart>: stable across version bumps and never the name a cluster
        # owner's own release of the chart would have.
        assert self.chart is not None, f"{self.name} is not a chart"
        return f"mp-{self.chart.chart}"

    def version_for(self, spec: ServingStackSpec) -> str:
        if self.version_field is None:
            return self.version
        value: Any = spec
        for part in self.version_field.split("."):
            value = getattr(value, _snake(part))
        return str(value)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
