"""The record types the catalog is made of."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from modelplane.catalog.facts import ClusterFacts, Fact, WorkloadsOfKind
from modelplane.catalog.images import Images
from modelplane.catalog.versions import parse_version
from modelplane.wire import ApiRef

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec
    from modelplane.pins import Stack

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
    # What the CRD defines besides its name: the stand-in CRDs of the test
    # substrate are made from these, so a new component brings its own.
    kind: str
    namespaced: bool = True

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


class RequirementStatus(StrEnum):
    MET = "met"
    UNMET = "unmet"
    WARNING = "warning"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    """Whether a requirement's result decides RequirementsMet."""

    # The spec's checked entries: met or unmet, and RequirementsMet follows them.
    REQUIRED = "required"
    # The spec's "not checked" entries, where observable: met, warning or
    # unknown, never unmet, so they never turn RequirementsMet False.
    ADVISORY = "advisory"


# An advisory's verdict and the message that says why.
Finding = tuple[RequirementStatus, str]


class Advisory(Protocol):
    """A spec "not checked" entry, observed wherever the target lets us.

    Each kind (shared ones in ``catalog.advisories``, one component's own in
    its module) says which facts it reads and how it judges them, so adding
    one is one class: ``observe.facts`` reads what ``needs`` asks for, the
    plan calls ``evaluate``. Evaluation is pure and
    never answers UNMET (upstream-facts §17 says where each is seen).
    """

    @property
    def title(self) -> str: ...

    def needs(self) -> tuple[Fact, ...]: ...

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding: ...


@dataclass(frozen=True)
class Workloads:
    """The Deployments or DaemonSets a component runs, found by image in any namespace.

    Matching the image repository's tail (``jetstack/trust-manager``) finds a
    provided install whatever its release name, namespace or mirror registry.
    """

    describe: str  # "the trust-manager controller"
    images: tuple[str, ...]
    kinds: tuple[str, ...] = ("Deployment",)

    def facts(self) -> tuple[Fact, ...]:
        return tuple(WorkloadsOfKind(kind) for kind in self.kinds)


@dataclass(frozen=True)
class GpuNodes:
    """How a GPU node is recognised, and what DRA on it looks like."""

    taint: str  # nodes tainted with this key are GPU nodes
    labels: tuple[str, ...]  # any of these labels (not "false") marks a GPU node
    nfd_label_prefix: str  # NFD's PCI labels: <prefix><class>_<vendor>.present or <prefix><vendor>
    pci_vendor: str
    resource: str  # the extended resource a device plugin advertises
    driver: str  # the DRA driver name on ResourceSlices


class NodeProof(StrEnum):
    """What says a node is served again once its agent's pod was restarted there."""

    # The node's ResourceSlices of the driver are published again, with the
    # same device names as before; they may lapse while the plugin restarts.
    SLICES = "slices"
    # The node keeps the NFD vendor labels the DRA plugin's node affinity
    # selects on: they must never lapse, not even while the worker restarts.
    LABELS = "labels"


@dataclass(frozen=True)
class NodeAgent:
    """A component's DaemonSet that serves the node it runs on, rolled by the operator.

    Its chart's values set the DaemonSet's update strategy to OnDelete, so
    an upgrade changes the template and restarts nothing; the operator then
    restarts its pods a node at a time (``plan.node_agents``), each node
    proven served again (``proof``, read by ``gpus``) before the next.
    """

    daemon_set: str  # in the component's namespace
    proof: NodeProof
    gpus: GpuNodes


@dataclass(frozen=True)
class VersionRange:
    """The versions of a component the product supports.

    A pin outside it is accepted, and reported: in the plan's notes, the
    component's status, an event, and ``modelplane check`` for what runs.
    """

    at_least: str | None = None
    below: str | None = None  # the first version out; its pre-releases are out too
    why: str = ""  # what goes wrong outside, for the message

    def __post_init__(self) -> None:
        for name in ("at_least", "below"):
            bound = getattr(self, name)
            if bound is not None and parse_version(bound) is None:
                raise ValueError(f"VersionRange.{name}: {bound!r} is not a version")

    def contains(self, version: str) -> bool | None:
        """Whether ``version`` is supported; None when it is not a version at all."""
        v = parse_version(version)
        if v is None:
            return None
        low = parse_version(self.at_least) if self.at_least else None
        high = parse_version(self.below) if self.below else None
        if low is not None and v < low:
            return False
        # "Before v1.9.0" leaves out v1.9.0-rc.1 too: it is the v1.9 line.
        return high is None or not (
            v >= high or (not high.is_prerelease and v.release == high.release)
        )

    def __str__(self) -> str:
        parts = []
        if self.at_least:
            parts.append(f"{self.at_least} or later")
        if self.below:
            parts.append(f"before {self.below}")
        return " and ".join(parts) or "any version"


class CrdPlacement(StrEnum):
    """Where a chart ships its CRDs, which decides whether ``helm upgrade`` upgrades them.

    Helm installs a chart's ``crds/`` directory (and its subcharts') once and
    never upgrades it; CRDs among the templates are upgraded as any object.
    """

    NONE = "none"
    CRDS_DIR = "crds/"
    # A subchart (named crds) whose own crds/ holds them: Helm treats them alike.
    SUBCHART = "a crds subchart's crds/"
    TEMPLATES = "templates/"

    @property
    def helm_upgrades(self) -> bool:
        return self in (CrdPlacement.NONE, CrdPlacement.TEMPLATES)


@dataclass(frozen=True)
class ValuesRead:
    """The values paths one version of a chart reads, of those the product can set.

    Not the chart's whole values: at least every path the product may
    compose for it (its fixed values, the image settings a mirror rewrites,
    the pull-secret paths). A path is read with everything under it
    (``config.envoyGateway`` is rendered whole into one document). The plan
    sets no value outside these, and says so: Helm takes a value no
    template reads without a word, so the setting would fail silently.

    ``paths`` are each in the chart's values.yaml at that version (or a
    subchart's, or its values.schema.json), which the real chart data
    checks. ``unlisted`` are read by a template though values.yaml does not
    list them (commented out, or read defensively), each with the source
    that says so: the chart's data files alone cannot show it.
    """

    version: str
    paths: tuple[str, ...]
    unlisted: tuple[tuple[str, str], ...] = ()  # (path, where a template reads it)

    def reads(self, path: str) -> bool:
        """Whether the chart reads ``path``: it, or a path it lies under, is read."""
        return any(
            path == read or path.startswith(f"{read}.")
            for read in (*self.paths, *(p for p, _ in self.unlisted))
        )


class DisruptionClass(StrEnum):
    """What an upgrade of one part of a component disrupts, the most disruptive first."""

    # (The docstring is the CRD's description of status.rollout.disruption's items.)
    # Ranked by how far a failed upgrade of the part reaches into serving: a
    # node agent on every GPU node (no claim prepared, a pod holding one
    # stuck terminating), the proxies every request goes through, the
    # placement of new pods, and last the controllers nothing running waits on.
    NODE_AGENT = "NodeAgent"
    TRAFFIC = "Traffic"
    SCHEDULER = "Scheduler"
    CONTROL = "Control"

    @property
    def rank(self) -> int:
        """0 for the most disruptive."""
        return list(DisruptionClass).index(self)

    @property
    def words(self) -> str:
        """For a person: ``node agent``."""
        return _DISRUPTION_WORDS[self]


_DISRUPTION_WORDS = {
    DisruptionClass.NODE_AGENT: "node agent",
    DisruptionClass.TRAFFIC: "traffic",
    DisruptionClass.SCHEDULER: "scheduler",
    DisruptionClass.CONTROL: "control",
}


@dataclass(frozen=True)
class Disruption:
    """One part of a component and what an upgrade of it does to what runs.

    A node-agent part the operator rolls a node at a time names its
    DaemonSet (``agent``): what diff says and what the roll does are one
    record. One without is rolled by its chart or its own controller (the
    GPU Operator's driver upgrades, say).
    """

    kind: DisruptionClass
    effect: str  # "restarts the kubelet plugin on every GPU node"
    agent: NodeAgent | None = None

    def __post_init__(self) -> None:
        if self.agent is not None and self.kind is not DisruptionClass.NODE_AGENT:
            raise ValueError(f"{self.effect!r}: only a node-agent part is rolled by node")

    def __str__(self) -> str:
        return f"{self.kind.words}: {self.effect}"


# What an upgrade of a component with no part that serves does.
CONTROL_ONLY = (Disruption(DisruptionClass.CONTROL, "restarts its controllers"),)


def release_name_of(chart: str) -> str:
    """The release the product installs ``chart`` as: mp-<chart>, stable across version bumps
    and never the name a cluster owner's own release of the chart would have."""
    return f"mp-{chart}"


@dataclass(frozen=True)
class HelmHook:
    """One object a chart renders as a Helm hook (annotation ``helm.sh/hook``).

    Helm keeps hooks out of the release's manifest, so ``helm uninstall``
    never deletes one: what is left of it is the delete policy's doing
    (``helm.sh/hook-delete-policy``; none means ``before-hook-creation``).
    """

    api_version: str
    kind: str
    name: str
    namespaced: bool  # in the release's namespace; else cluster-scoped
    events: tuple[str, ...]  # helm.sh/hook: pre-install, post-delete, ...
    delete_policies: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChartSource:
    """Where a chart comes from: a classic HTTP repository or an OCI registry."""

    chart: str
    repository: str  # https://... (index.yaml) or oci://registry/path (without the chart)
    # Where the chart keeps its CRDs (upstream-facts.md, per component).
    crds: CrdPlacement = CrdPlacement.NONE
    # The API groups of the CRDs its crds/ ships besides those its
    # component's requirements name: with those, the only groups the
    # product applies from crds/ (``Component.crd_groups``). From the real
    # chart's ``helm show crds`` (tests/unit/test_real_chart_yaml.py holds
    # every group there to the catalog).
    crd_groups: tuple[str, ...] = ()
    # Every hook the pinned version renders with the product's values (its
    # helm template, ../shared/fixtures/charts/<chart>/<version>/rendered-standard.yaml;
    # tests/unit/test_teardown_hooks_real.py holds the two equal). Teardown
    # removes what of them Helm leaves (plan.teardown).
    hooks: tuple[HelmHook, ...] = ()

    # What the chart reads at the versions the catalog knows (the pin at
    # least). At another version its values are composed unchecked: what
    # it reads is not known, so nothing is refused.
    reads: tuple[ValuesRead, ...] = ()

    def __post_init__(self) -> None:
        versions = [r.version for r in self.reads]
        if len(set(versions)) != len(versions):
            raise ValueError(f"{self.chart}: two ValuesRead records for one version")

    def reads_at(self, version: str) -> ValuesRead | None:
        return next((r for r in self.reads if r.version == version), None)


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
    version: str  # the pin: what Managed mode installs unless the spec says otherwise
    stacks: frozenset[Stack]
    # Where the component goes among those it does not depend on: lower
    # installs first and is torn down last. Dependencies must have a lower one
    # (the catalog refuses to load otherwise), so the number only breaks ties.
    order: int
    # The ServingStack field that overrides ``version``, as a dotted path from
    # spec ("versions.certManager"); the API model and the CRD are generated
    # from these. The group is the stacks': versions (both), standard, dynamo.
    version_field: str | None = None
    version_description: str = ""  # the field's description in the CRD
    version_format: Literal["chart", "image"] = "chart"  # a chart version or an image tag
    # The versions the product supports; a pin outside is accepted, and reported.
    supported: VersionRange | None = None
    # substrate: installed in Managed mode, only checked in Provided mode.
    # config: the product's own, applied in both modes (ModelExpress CRDs).
    role: Literal["substrate", "config"] = "substrate"
    chart: ChartSource | None = None
    manifests: ManifestSource | None = None
    values: Callable[[ServingStackSpec], Values] = field(default=lambda _spec: {})
    # Kubernetes objects the component is made of when it is not a chart.
    objects: Callable[[ServingStackSpec], list[dict[str, Any]]] | None = None
    # Whether the component belongs to this spec at all (beyond the stack),
    # and the same in words for the reference ("when `nvidiaDriverRoot` is not `/`").
    enabled: Callable[[ServingStackSpec], bool] = field(default=lambda _spec: True)
    enabled_when: str = ""
    depends_on: tuple[str, ...] = ()
    # Wait for the release's workloads before dependents go on.
    wait: bool = False
    # The CRDs the component serves: checked in Provided mode, and used as the
    # evidence that a Managed install serves what it should.
    requirements: tuple[Requirement, ...] = ()
    # Observed "not checked" entries: warnings, never unmet (see Advisory).
    advisories: tuple[Advisory, ...] = ()
    # Where else than ``namespace`` its upstream documents installing it: the
    # advisories read its objects there too (see ``observed_in``).
    also_installed_in: tuple[str, ...] = ()
    not_checked: tuple[str, ...] = ()
    not_needed: tuple[str, ...] = ()
    # Every image the component runs and where it is set: what an
    # air-gapped install rewrites (see catalog.images).
    images: Images = field(default_factory=Images)
    # The DRA driver it runs (the ``driver`` of its ResourceSlices and of the
    # claims it allocates): its release is not uninstalled while pods hold
    # such claims, as no plugin would be left to unprepare them (plan.claims).
    dra_driver: str | None = None
    # What an upgrade disrupts, one entry per part of another class (NFD's
    # worker is a node agent, its master control). Parts, not one class:
    # diff and the hub say what each does, and a roll one node at a time
    # needs to know which part is the node agent. ``disruption`` is the
    # headline. An upgrade (a version change) is taken to touch every part.
    disruptions: tuple[Disruption, ...] = CONTROL_ONLY

    def __post_init__(self) -> None:
        if not self.disruptions:
            raise ValueError(f"{self.name}: an upgrade disrupts something; name at least one part")
        if sum(d.agent is not None for d in self.disruptions) > 1:
            # The operator rolls one DaemonSet a component (plan.node_agents).
            raise ValueError(f"{self.name}: at most one node-agent part")

    @property
    def kind(self) -> Literal["chart", "manifests", "objects"]:
        if self.chart is not None:
            return "chart"
        return "manifests" if self.manifests is not None else "objects"

    @property
    def crd_groups(self) -> frozenset[str]:
        """The API groups whose CRDs the component's chart may bring in its crds/.

        Its requirements' CRDs and the groups its chart lists besides: a
        CRD of any other group in crds/ is some other project's, and is
        refused (``plan.chart_crds``).
        """
        required = {r.api.group for r in self.requirements if isinstance(r, CRDServes)}
        listed = self.chart.crd_groups if self.chart is not None else ()
        return frozenset((*required, *listed))

    @property
    def release_name(self) -> str:
        # mp-<chart>: stable across version bumps and never the name a cluster
        # owner's own release of the chart would have.
        assert self.chart is not None, f"{self.name} is not a chart"
        return release_name_of(self.chart.chart)

    @property
    def observed_in(self) -> tuple[str, ...]:
        """The namespaces its advisories read its workloads and ConfigMaps in, and only those.

        Its own namespace, and where its upstream installs it: a provided
        install elsewhere is not found (``unknown``), and a tenant's
        namespace, whose objects may say anything, is never read.
        """
        return tuple(dict.fromkeys(n for n in (self.namespace, *self.also_installed_in) if n))

    @property
    def node_agent(self) -> NodeAgent | None:
        """The DaemonSet the operator rolls a node at a time after an upgrade, if any."""
        return next((d.agent for d in self.disruptions if d.agent is not None), None)

    @property
    def disruption(self) -> DisruptionClass:
        """The most disruptive class of its parts."""
        return min((d.kind for d in self.disruptions), key=lambda k: k.rank)

    @property
    def disrupts(self) -> str:
        """What its upgrade disrupts, most disruptive part first, for a person."""
        parts = sorted(self.disruptions, key=lambda d: d.kind.rank)
        return "; ".join(str(d) for d in parts)

    def version_for(self, spec: ServingStackSpec) -> str:
        if self.version_field is None:
            return self.version
        value: Any = spec
        for part in self.version_field.split("."):
            value = getattr(value, _snake(part))
        return str(value)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
