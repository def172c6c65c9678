"""What a component's install or upgrade would clash with on the target, decided before any write.

Platform teams rarely hand over an empty cluster. Helm refuses an object
another release owns only once it has written the objects before it, and
succeeds beside a second cert-manager, Prometheus Operator or GPU
allocator. So before a Managed release is installed or upgraded, what it
would write is set against what the target holds, and each clash is named
with its owner where one can be told:

- **taken**: an object the release renders exists and belongs to no release
  of the product (its ``meta.helm.sh/release-name``/``-namespace`` name none);
- **a CRD of its crds/** that exists with another owner, or would be taken
  back to an older schema (``plan.chart_crds``' rules, not repeated here);
- **a second instance** of what must be alone on a cluster (``SINGLETONS``):
  another cert-manager, Prometheus Operator or NFD master, a device plugin
  advertising ``nvidia.com/gpu`` next to the DRA driver, and a GatewayClass
  of the product's name with another controller.

Pure: the caller reads the live objects' metadata (``observe.conflicts``);
everything read is the target's and hostile, so names and owners pass
``printable`` before they reach a message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from modelplane.plan.chart_crds import downgrade, other_owner
from modelplane.plan.frozen import Frozen
from modelplane.plan.restorable import RELEASE_NAME, RELEASE_NAMESPACE
from modelplane.untrusted import printable
from modelplane.wire import MANAGED_BY_LABEL

# A name, an owner: one line each.
MAX_TEXT = 300
# Past this many objects of one release, the rest are not looked up (a
# stack's largest release renders a few hundred).
MAX_OBJECTS = 512
# Nodes named in one conflict; the rest are counted.
MAX_NAMED = 5

# Kinds the charts render that are not namespaced: an object of one without
# a namespace is looked up cluster-wide, any other in the release's namespace.
CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "ClusterIssuer",
        "ClusterRole",
        "ClusterRoleBinding",
        "CSIDriver",
        "CustomResourceDefinition",
        "DeviceClass",
        "GatewayClass",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "NodeFeatureRule",
        "NodeFeatureGroup",
        "PersistentVolume",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    }
)

# Labels that say who manages an object, most telling first.
OLM_OWNER = "olm.owner"
OLM_LABEL_PREFIX = "operators.coreos.com/"
ADDON_MODE = "addonmanager.kubernetes.io/mode"


class ConflictKind(StrEnum):
    # An object the release would create exists, and is no release's of the product.
    TAKEN = "taken"
    CRD_OWNER = "crd-owner"
    CRD_DOWNGRADE = "crd-downgrade"
    # Another instance of something that must be alone on a cluster.
    SECOND_INSTANCE = "second-instance"


class Conflict(Frozen):
    """One clash: which object, whose it is, and what it stands in the way of."""

    component: str
    kind: ConflictKind
    object: str  # Kind namespace/name, for a person
    owner: str
    detail: str = ""

    @property
    def adoptable(self) -> bool:
        """Whether ``spec.adopt`` may take it over (Helm's --take-ownership): only objects."""
        return self.kind is ConflictKind.TAKEN

    @property
    def adopted(self) -> str:
        """What adopting it takes over, and from whom, for a person."""
        return f"{self.object} from {self.owner}"

    @property
    def message(self) -> str:
        text = f"{self.object} ({self.owner})"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True, order=True)
class ObjectRef:
    """One object a release would write, as the API server names it."""

    api_version: str
    kind: str
    namespace: str  # "" when cluster-scoped
    name: str

    @property
    def shown(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return printable(f"{self.kind} {where}{self.name}", MAX_TEXT)


@dataclass(frozen=True)
class Release:
    component: str
    name: str
    namespace: str


# (release name, namespace) of every release of the product on the target.
Ours = frozenset[tuple[str, str]]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def release_of(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Helm release (name, namespace) an object's annotations name; None when none."""
    notes = _mapping(meta.get("annotations"))
    name, namespace = notes.get(RELEASE_NAME), notes.get(RELEASE_NAMESPACE)
    if isinstance(name, str) and name and isinstance(namespace, str):
        return name, namespace
    return None


def _managers(meta: Mapping[str, Any]) -> list[str]:
    entries = meta.get("managedFields")
    # The API server's own status writes say nothing of an owner.
    return sorted(
        {
            str(m["manager"])
            for m in (entries if isinstance(entries, list) else [])
            if isinstance(m, Mapping) and m.get("manager") and m.get("subresource") != "status"
        }
    )


def owner_of(meta: Mapping[str, Any]) -> str:
    """Who an object belongs to, as far as its metadata tells, for a person."""
    labels = _mapping(meta.get("labels"))
    release = release_of(meta)
    if release is not None:
        found = f"Helm release {release[1]}/{release[0]}"
    elif isinstance(labels.get(OLM_OWNER), str):
        found = f"OLM operator {labels[OLM_OWNER]}"
    elif olm := sorted(k for k in labels if isinstance(k, str) and k.startswith(OLM_LABEL_PREFIX)):
        found = f"OLM ({olm[0]})"
    elif isinstance(labels.get(ADDON_MODE), str):
        found = f"the add-on manager ({ADDON_MODE}={labels[ADDON_MODE]})"
    elif isinstance(labels.get(MANAGED_BY_LABEL), str):
        found = f"{MANAGED_BY_LABEL}={labels[MANAGED_BY_LABEL]}"
    elif managers := _managers(meta):
        found = f"written by {', '.join(managers)}"
    else:
        found = "owner unknown"
    return printable(found, MAX_TEXT)


def planned_refs(docs: Iterable[Any], namespace: str) -> list[ObjectRef]:
    """The objects of a rendered manifest, each once, as the API server would name them.

    A namespaced object the chart leaves without a namespace is Helm's to
    put in the release's namespace; what is not an object is skipped.
    """
    out: set[ObjectRef] = set()
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        meta = _mapping(doc.get("metadata"))
        kind, api_version, name = doc.get("kind"), doc.get("apiVersion"), meta.get("name")
        if not (isinstance(kind, str) and isinstance(api_version, str) and isinstance(name, str)):
            continue
        if kind in CLUSTER_SCOPED:
            where = ""
        else:
            given = meta.get("namespace")
            where = given if isinstance(given, str) and given else namespace
        out.add(ObjectRef(api_version, kind, where, name))
    return sorted(out)[:MAX_OBJECTS]


def taken(
    release: Release,
    planned: Sequence[ObjectRef],
    live: Mapping[ObjectRef, Mapping[str, Any]],
    ours: Ours,
) -> list[Conflict]:
    """The planned objects that exist and belong to no release of the product.

    ``live``: the metadata of those that exist. One of this release is its
    own (an upgrade); one of another of the product's releases is the plan's
    business, not a clash with the cluster's owner.
    """
    out = []
    for ref in planned:
        meta = live.get(ref)
        if meta is None:
            continue
        owner = release_of(meta)
        if owner == (release.name, release.namespace) or owner in ours:
            continue
        out.append(
            Conflict(
                component=release.component,
                kind=ConflictKind.TAKEN,
                object=ref.shown,
                owner=owner_of(meta),
                detail=f"exists, and release {release.name} would take it over",
            )
        )
    return out


def crd_conflicts(
    release: Release,
    desired: Sequence[Mapping[str, Any]],
    live: Mapping[str, Mapping[str, Any]],
) -> list[Conflict]:
    """The CRDs of the release's crds/ that exist with another owner, or would be downgraded.

    The rules are ``plan.chart_crds``': a CRD the product did not label as
    this release's is another owner's, whoever wrote it.
    """
    out = []
    for body in desired:
        name = str(_mapping(body.get("metadata")).get("name"))
        current = live.get(name)
        if current is None:
            continue
        shown = printable(f"CustomResourceDefinition {name}", MAX_TEXT)
        owner = other_owner(current, release.name)
        if owner is not None:
            out.append(
                Conflict(
                    component=release.component,
                    kind=ConflictKind.CRD_OWNER,
                    object=shown,
                    owner=printable(owner, MAX_TEXT),
                    detail=f"exists, and is not release {release.name}'s",
                )
            )
            continue
        older = downgrade(body, current)
        if older is not None:
            out.append(
                Conflict(
                    component=release.component,
                    kind=ConflictKind.CRD_DOWNGRADE,
                    object=shown,
                    owner=f"release {printable(release.name, MAX_TEXT)}'s",
                    detail=f"newer on the cluster than the chart's: {printable(older, MAX_TEXT)}",
                )
            )
    return out


# ---- what must be alone on a cluster ---------------------------------------------------


@dataclass(frozen=True)
class LiveWorkload:
    """A Deployment or DaemonSet of the target, reduced to what tells which program it runs."""

    kind: str
    namespace: str
    name: str
    # The last segment of each container image's repository (no registry, tag or digest).
    images: frozenset[str]
    # Every container's command and args.
    args: frozenset[str]
    release: tuple[str, str] | None
    owner: str

    @property
    def shown(self) -> str:
        return printable(f"{self.kind} {self.namespace}/{self.name}", MAX_TEXT)


def image_name(image: str) -> str:
    """The last segment of an image's repository: ``quay.io/jetstack/x:v1@sha256:..`` -> ``x``.

    A mirror's prefix, a tag or a digest do not change which program it is.
    """
    repository = image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


# Containers and words read of one workload: a hostile one is cut, not refused.
_MAX_CONTAINERS = 32
_MAX_WORDS = 64


def live_workload(kind: str, item: Mapping[str, Any]) -> LiveWorkload:
    """A listed Deployment or DaemonSet, as ``second_instances`` reads it."""
    meta = _mapping(item.get("metadata"))
    pod = _mapping(_mapping(_mapping(item.get("spec")).get("template")).get("spec"))
    containers: list[Mapping[str, Any]] = []
    for key in ("initContainers", "containers"):
        found = pod.get(key)
        containers += [
            c for c in (found if isinstance(found, list) else []) if isinstance(c, Mapping)
        ]
    containers = containers[:_MAX_CONTAINERS]
    words: set[str] = set()
    for c in containers:
        for key in ("command", "args"):
            found = c.get(key)
            words |= {
                w
                for w in (found if isinstance(found, list) else [])[:_MAX_WORDS]
                if isinstance(w, str)
            }
    return LiveWorkload(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        images=frozenset(
            image_name(c["image"]) for c in containers if isinstance(c.get("image"), str)
        ),
        args=frozenset(words),
        release=release_of(meta),
        owner=owner_of(meta),
    )


@dataclass(frozen=True)
class Singleton:
    """Something of which a cluster runs one: the workload that tells it is there."""

    what: str
    kinds: frozenset[str]
    # Any of these images (``image_name``) ...
    images: frozenset[str]
    # ... running this command, when one image runs several programs.
    command: str | None = None

    def runs(self, w: LiveWorkload) -> bool:
        return (
            w.kind in self.kinds
            and bool(w.images & self.images)
            and (self.command is None or self.command in w.args)
        )


_DEPLOYMENT = frozenset({"Deployment"})
# The images of each upstream release's workloads: cert-manager's chart
# (quay.io/jetstack/cert-manager-controller, -webhook), prometheus-operator's
# (quay.io/prometheus-operator/prometheus-operator), NFD's one image for
# master, worker and gc (registry.k8s.io/nfd/node-feature-discovery), the
# NVIDIA device plugin's (nvcr.io/nvidia/k8s-device-plugin) and the GPU
# Operator's (nvcr.io/nvidia/gpu-operator), which runs the device plugin.
SINGLETONS: Mapping[str, tuple[Singleton, ...]] = {
    "cert-manager": (
        Singleton(
            "another cert-manager",
            _DEPLOYMENT,
            frozenset({"cert-manager-controller", "cert-manager-webhook"}),
        ),
    ),
    "kube-prometheus-stack": (
        Singleton("another Prometheus Operator", _DEPLOYMENT, frozenset({"prometheus-operator"})),
    ),
    "node-feature-discovery": (
        Singleton(
            "another NFD master",
            _DEPLOYMENT,
            frozenset({"node-feature-discovery"}),
            command="nfd-master",
        ),
    ),
    "nvidia-dra-driver-gpu": (
        Singleton(
            "an NVIDIA device plugin, which hands out the same GPUs behind DRA's back",
            frozenset({"DaemonSet"}),
            frozenset({"k8s-device-plugin"}),
        ),
        Singleton(
            "the NVIDIA GPU Operator, which runs a device plugin",
            _DEPLOYMENT,
            frozenset({"gpu-operator"}),
        ),
    ),
}
# The extended resource a device plugin advertises, which DRA's driver must not share.
GPU_RESOURCE = "nvidia.com/gpu"
DRA_DRIVER = "nvidia-dra-driver-gpu"


def second_instances(
    component: str,
    workloads: Sequence[LiveWorkload],
    ours: Ours,
    planned: Collection[ObjectRef] = (),
) -> list[Conflict]:
    """Workloads of another instance of what ``component`` must be alone on a cluster as.

    A workload the release itself renders (``planned``) is no second
    instance: it is the very object, a ``taken`` conflict, which adopting
    takes over and leaves one.
    """
    own = {(r.kind, r.namespace, r.name) for r in planned}
    out = []
    for rule in SINGLETONS.get(component, ()):
        for w in workloads:
            if w.release in ours or (w.kind, w.namespace, w.name) in own or not rule.runs(w):
                continue
            out.append(
                Conflict(
                    component=component,
                    kind=ConflictKind.SECOND_INSTANCE,
                    object=w.shown,
                    owner=w.owner,
                    detail=f"{rule.what} runs on the cluster",
                )
            )
    return out


def advertising(nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The nodes (name -> allocatable) that advertise a GPU through a device plugin."""
    return sorted(
        name
        for name, allocatable in nodes.items()
        if str(allocatable.get(GPU_RESOURCE, "0")) not in ("0", "")
    )


def device_plugin_nodes(component: str, nodes: Sequence[str]) -> list[Conflict]:
    """The DRA driver's clash with a device plugin that nodes show by advertising the GPUs."""
    if component != DRA_DRIVER or not nodes:
        return []
    named = ", ".join(printable(n, MAX_TEXT) for n in nodes[:MAX_NAMED])
    more = f" and {len(nodes) - MAX_NAMED} more" if len(nodes) > MAX_NAMED else ""
    return [
        Conflict(
            component=component,
            kind=ConflictKind.SECOND_INSTANCE,
            object=f"Node {named}{more}",
            owner="a device plugin",
            detail=f"advertises {GPU_RESOURCE}: a second allocator would hand out the same "
            "GPUs behind DRA's back (disable the device plugin; GPU Operator: "
            "devicePlugin.enabled=false)",
        )
    ]


def gateway_class(
    component: str, name: str, controller: str, live: Mapping[str, Any] | None
) -> list[Conflict]:
    """A GatewayClass ``name`` the cluster holds with another controller than ``controller``.

    ``controllerName`` cannot change once set, and the class is another
    gateway's: the product's Gateway would be served by it, or by none.
    """
    if live is None:
        return []
    have = _mapping(live.get("spec")).get("controllerName")
    if have == controller:
        return []
    return [
        Conflict(
            component=component,
            kind=ConflictKind.SECOND_INSTANCE,
            object=printable(f"GatewayClass {name}", MAX_TEXT),
            owner=owner_of(_mapping(live.get("metadata"))),
            detail=f"its controller is {printable(have, MAX_TEXT)}, not {controller}: set "
            "spec.gateway.className to another name",
        )
    ]


def messages(conflicts: Sequence[Conflict]) -> str:
    """Every conflict of one component, for a condition or an event."""
    return "; ".join(c.message for c in conflicts)


# ---- adopting -----------------------------------------------------------------------------

# Why spec.adopt leaves a conflict of an adopted component standing, said beside it.
NOT_ADOPTED: Mapping[ConflictKind, str] = {
    ConflictKind.CRD_OWNER: "spec.adopt does not take over a CRD of another owner, whose "
    "objects of every namespace depend on it: its owner hands it over or removes it",
    ConflictKind.CRD_DOWNGRADE: "spec.adopt does not take a CRD back to an older version",
    ConflictKind.SECOND_INSTANCE: "spec.adopt does not take over a second instance: adopting "
    "would leave two on the cluster",
}


def adoption(
    conflicts: Sequence[Conflict], adopt: Collection[str]
) -> tuple[list[Conflict], list[Conflict]]:
    """The conflicts ``spec.adopt`` takes over, and those that still hold a component back.

    Only an object of a component the spec names is taken over (Helm's
    ``--take-ownership``). The others of such a component say why not.
    """
    adopted: list[Conflict] = []
    held: list[Conflict] = []
    for c in conflicts:
        if c.component not in adopt:
            held.append(c)
        elif c.adoptable:
            adopted.append(c)
        else:
            why = NOT_ADOPTED[c.kind]
            detail = f"{c.detail} ({why})" if c.detail else why
            held.append(c.model_copy(update={"detail": detail}))
    return adopted, held


def taken_over(adopted: Sequence[Conflict]) -> str:
    """What adopting takes over, by former owner and kind, for an event of bounded length.

    ``from Helm release a/b: Deployment ns/x, ns/y; Service ns/z``: an
    event holds 1 KiB, and a chart's CRDs and workloads all come from one
    owner.
    """
    by_owner: dict[str, dict[str, list[str]]] = {}
    for c in adopted:
        kind, _, name = c.object.partition(" ")
        by_owner.setdefault(c.owner, {}).setdefault(kind, []).append(name)
    return "; ".join(
        f"from {owner}: " + "; ".join(f"{kind} {', '.join(names)}" for kind, names in kinds.items())
        for owner, kinds in by_owner.items()
    )
