"""Evaluating the advisory checks: the spec's "not checked" entries, where observable.

Pure, like the planner: facts in, results out. A result is ``met``,
``warning`` (observed and wrong) or ``unknown`` (the target does not let us
see it, and the message says why); never ``unmet``, so advisory results never
turn RequirementsMet False.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml

from modelplane.catalog.types import (
    Advisory,
    Component,
    ConfigFileWired,
    CriticalPodsAdmitted,
    GpuNodes,
    GpuNodesLabelled,
    GpuNodesPublishSlices,
    ImageTag,
    NoNodeAdvertises,
    SchedulerName,
    SelectsEverything,
    ServicePort,
    WorkloadArg,
    Workloads,
    WorkloadsAvailable,
)
from modelplane.plan.model import RequirementResult, RequirementStatus, Severity
from modelplane.plan.observed import ClusterFacts, ObservedNode, ObservedWorkload

if TYPE_CHECKING:
    from modelplane.api.models import ServingStackSpec

MET, WARNING, UNKNOWN = RequirementStatus.MET, RequirementStatus.WARNING, RequirementStatus.UNKNOWN
_MAX_LISTED = 5

Outcome = tuple[RequirementStatus, str]


def evaluate_advisory(
    component: Component, advisory: Advisory, spec: ServingStackSpec, facts: ClusterFacts
) -> RequirementResult:
    evaluator = _EVALUATORS[type(advisory)]
    status, message = evaluator(component, advisory, spec, facts)
    assert status is not RequirementStatus.UNMET
    return RequirementResult(
        component=component.name,
        requirement=advisory.title,
        status=status,
        message=message,
        severity=Severity.ADVISORY,
    )


# ---- helpers ----------------------------------------------------------------


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f" and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


def _cannot(facts: ClusterFacts, what: str) -> Outcome:
    why = facts.unobservable.get(what, "not gathered")
    return UNKNOWN, f"cannot observe {what}: {why}"


def image_repository(image: str) -> str:
    """The image without tag or digest: ``quay.io/jetstack/trust-manager``."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_tag(image: str) -> str | None:
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[colon + 1 :] if colon > slash else None


def is_image(image: str, tail: str) -> bool:
    """Whether the image's repository is ``tail`` or ends with ``/tail``."""
    repo = image_repository(image)
    return repo == tail or repo.endswith("/" + tail)


def runs_image(workload: ObservedWorkload, tail: str) -> bool:
    return any(is_image(image, tail) for image in workload.images)


def _matching(spec: Workloads, workloads: list[ObservedWorkload]) -> list[ObservedWorkload]:
    return [
        w
        for w in workloads
        if w.kind in spec.kinds and any(runs_image(w, tail) for tail in spec.images)
    ]


def _ref(w: ObservedWorkload) -> str:
    return f"{w.kind} {w.namespace}/{w.name}"


def _kinds(spec: Workloads) -> str:
    return " or ".join(spec.kinds)


def _not_found(spec: Workloads, what: str) -> Outcome:
    return UNKNOWN, (
        f"no {_kinds(spec)} runs an image {' or '.join(spec.images)}, so {what} cannot be "
        "observed (it may run under another image, or outside the cluster)"
    )


def flag_value(args: list[str], flag: str) -> str | None:
    """The last value given for ``flag`` (``--f=v`` or ``--f v``), or None."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            value = args[i + 1]
    return value


def contains(expected: Any, actual: Any, path: str = "") -> list[str]:
    """What in ``expected`` the ``actual`` document lacks, one line per difference.

    Mappings are compared key by key (extra keys in ``actual`` are fine);
    every item of an expected list must match some item of the actual list.
    """
    where = path or "the document"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where} is {_show(actual)}, not a mapping"]
        out: list[str] = []
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{sub} is missing")
            else:
                out += contains(value, actual[key], sub)
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where} is {_show(actual)}, not a list"]
        return [
            f"{where} lacks {_show(item)}"
            for item in expected
            if not any(not contains(item, candidate) for candidate in actual)
        ]
    if expected != actual:
        return [f"{where} is {_show(actual)}, not {_show(expected)}"]
    return []


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def is_nfd_vendor_label(gpus: GpuNodes, key: str, value: str) -> bool:
    """``feature.node.kubernetes.io/pci-0302_10de.present=true`` and friends."""
    suffix = ".present"
    if not (key.startswith(gpus.nfd_label_prefix) and key.endswith(suffix)):
        return False
    fields = key[len(gpus.nfd_label_prefix) : -len(suffix)].split("_")
    return gpus.pci_vendor in fields and value == "true"


def gpu_nodes(
    gpus: GpuNodes, nodes: list[ObservedNode], slices: dict[str, list[str]] | None
) -> list[ObservedNode]:
    """Nodes that look like GPU nodes by any sign: taint, labels, resources, slices."""
    with_slices = set((slices or {}).get(gpus.driver, []))
    out = []
    for node in nodes:
        if (
            gpus.taint in node.taints
            or any(node.labels.get(label, "false") != "false" for label in gpus.labels)
            or any(is_nfd_vendor_label(gpus, k, v) for k, v in node.labels.items())
            or gpus.resource in node.allocatable
            or node.name in with_slices
        ):
            out.append(node)
    return out


def _gpu_signs(gpus: GpuNodes) -> str:
    return (
        f"the {gpus.taint} taint, a label {', '.join(gpus.labels)}, an NFD PCI label of vendor "
        f"{gpus.pci_vendor}, {gpus.resource} capacity or a {gpus.driver} ResourceSlice"
    )


# ---- one evaluator per kind ------------------------------------------------------


def _workloads_available(
    component: Component, a: WorkloadsAvailable, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.workloads is None:
        return _cannot(facts, "workloads")
    found = _matching(a.workloads, facts.workloads)
    if not found:
        return _not_found(a.workloads, f"the state of {a.workloads.describe}")
    missing = [tail for tail in a.workloads.images if not any(runs_image(w, tail) for w in found)]
    down = [_ref(w) for w in found if not w.available]
    problems = [f"{ref} is not Available" for ref in down]
    problems += [f"no {_kinds(a.workloads)} runs {tail}" for tail in missing]
    if problems:
        return WARNING, f"{'; '.join(problems)}: {a.fix}"
    return MET, f"{_listed([_ref(w) for w in found])} Available"


def _config_file_wired(
    component: Component, a: ConfigFileWired, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.config_maps is None:
        return _cannot(facts, "configmaps")
    found = [cm for cm in facts.config_maps if cm.name == a.config_map]
    if not found:
        return UNKNOWN, (
            f"no ConfigMap {a.config_map} in any namespace, so the live configuration cannot "
            "be read (it may be configured another way)"
        )
    expected = a.expected(spec)
    failures: list[str] = []
    for cm in found:
        where = f"ConfigMap {cm.namespace}/{cm.name} key {a.key}"
        if a.key not in cm.data:
            failures.append(f"{where} is missing")
            continue
        try:
            doc = yaml.safe_load(cm.data[a.key])
        except yaml.YAMLError:
            failures.append(f"{where} is not YAML")
            continue
        diffs = contains(expected, doc)
        if not diffs:
            return MET, f"{where} holds the expected wiring"
        failures.append(f"{where}: {_listed(diffs)}")
    return WARNING, f"{'; '.join(failures)}: {a.fix}"


def _service_port(
    component: Component, a: ServicePort, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.services is None:
        return _cannot(facts, "services")
    address = f"{a.name}.{a.namespace}.svc.cluster.local:{a.port}"
    svc = next((s for s in facts.services if s.namespace == a.namespace and s.name == a.name), None)
    if svc is None:
        return WARNING, (
            f"Service {a.namespace}/{a.name} does not exist, so nothing answers at {address}: "
            f"{a.fix}"
        )
    if a.port not in svc.ports:
        ports = ", ".join(str(p) for p in svc.ports) or "none"
        return (
            WARNING,
            f"Service {a.namespace}/{a.name} exposes ports {ports}, not {a.port}: {a.fix}",
        )
    return MET, f"Service {a.namespace}/{a.name} exposes port {a.port} ({address})"


def _workload_arg(
    component: Component, a: WorkloadArg, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.workloads is None:
        return _cannot(facts, "workloads")
    found = _matching(a.workloads, facts.workloads)
    if not found:
        return _not_found(a.workloads, f"its {a.flag}")
    wrong: list[str] = []
    for w in found:
        value = flag_value(w.args, a.flag)
        shown = f"{a.flag}={value}" if value is not None else f"no {a.flag} (default {a.default})"
        if (value if value is not None else a.default) != a.value:
            wrong.append(f"{_ref(w)} runs with {shown}")
    if wrong:
        return WARNING, f"{'; '.join(wrong)}, not {a.flag}={a.value}: {a.fix}"
    return MET, f"{_listed([_ref(w) for w in found])} runs with {a.flag}={a.value}"


def _image_tag(
    component: Component, a: ImageTag, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.workloads is None:
        return _cannot(facts, "workloads")
    found = _matching(a.workloads, facts.workloads)
    if not found:
        return _not_found(a.workloads, "its version")
    want = component.version_for(spec)
    wrong: list[str] = []
    untagged: list[str] = []
    for w in found:
        for image in w.images:
            if not any(is_image(image, t) for t in a.workloads.images):
                continue
            tag = image_tag(image)
            if tag is None:
                untagged.append(f"{_ref(w)} runs {image}")
            elif tag.removeprefix("v") != want.removeprefix("v"):
                wrong.append(f"{_ref(w)} runs {image}")
    if wrong:
        return WARNING, f"{'; '.join(wrong)}, not {want}: {a.fix}"
    if untagged:
        return UNKNOWN, f"{'; '.join(untagged)} by digest, so its version cannot be read"
    return MET, f"{_listed([_ref(w) for w in found])} runs {want}"


def _scheduler_name(
    component: Component, a: SchedulerName, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.workloads is None:
        return _cannot(facts, "workloads")
    found = _matching(a.workloads, facts.workloads)
    if not found:
        return _not_found(a.workloads, f"the schedulerName {a.workloads.describe} answers to")
    others: list[str] = []
    for w in found:
        name = flag_value(w.args, a.flag)
        if name is None:
            # The operator names each shard's Deployment <schedulerName>-<shard>.
            name = a.name if w.name.startswith(a.name + "-") else None
        if name == a.name:
            return MET, f"{_ref(w)} answers to {a.name}"
        others.append(
            f"{_ref(w)} answers to {name}"
            if name
            else f"{_ref(w)} is not named {a.name}-<shard> and sets no {a.flag}"
        )
    return WARNING, f"{'; '.join(others)}; pods requesting {a.name} stay Pending: {a.fix}"


def _selects_everything(
    component: Component, a: SelectsEverything, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    key = a.api.key
    if key not in facts.custom:
        return _cannot(facts, key)
    objects = facts.custom[key]
    if not objects:
        return UNKNOWN, (
            f"no {a.kind} object exists in any namespace, so what scrapes the PodMonitors "
            "cannot be observed"
        )
    failures: list[str] = []
    for obj in objects:
        bad = [
            f"spec.{f} is {_show(obj.spec[f]) if f in obj.spec else 'unset'}"
            for f in a.fields
            if obj.spec.get(f) != {}
        ]
        if not bad:
            return MET, f"{a.kind} {obj.namespace}/{obj.name} sets {' and '.join(a.fields)} to {{}}"
        failures.append(f"{a.kind} {obj.namespace}/{obj.name}: {', '.join(bad)}")
    return WARNING, f"{'; '.join(failures[:_MAX_LISTED])}: {a.fix}"


def _no_node_advertises(
    component: Component, a: NoNodeAdvertises, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.nodes is None:
        return _cannot(facts, "nodes")
    r = a.gpus.resource
    offenders = [n.name for n in facts.nodes if n.allocatable.get(r, "0") not in ("0", "")]
    if offenders:
        return WARNING, (
            f"{_listed(offenders)} advertise{'s' if len(offenders) == 1 else ''} {r}: a device "
            f"plugin hands out the same GPUs behind DRA's back: {a.fix}"
        )
    return MET, f"no node advertises {r} ({len(facts.nodes)} nodes)"


def _gpu_nodes_labelled(
    component: Component, a: GpuNodesLabelled, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.nodes is None:
        return _cannot(facts, "nodes")
    gpu = gpu_nodes(a.gpus, facts.nodes, facts.resource_slices)
    if not gpu:
        return UNKNOWN, f"no node shows a sign of a GPU ({_gpu_signs(a.gpus)}): nothing to check"
    label = f"{a.gpus.nfd_label_prefix}*{a.gpus.pci_vendor}*.present"
    bare = [
        n.name
        for n in gpu
        if not any(is_nfd_vendor_label(a.gpus, k, v) for k, v in n.labels.items())
    ]
    if bare:
        return WARNING, (
            f"GPU node{'s' if len(bare) > 1 else ''} {_listed(bare)} "
            f"lack{'s' if len(bare) == 1 else ''} a {label} label, so the DRA driver's kubelet "
            f"plugin never schedules there: {a.fix}"
        )
    return MET, f"all {len(gpu)} GPU nodes carry {label}"


def _gpu_nodes_publish_slices(
    component: Component, a: GpuNodesPublishSlices, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.nodes is None:
        return _cannot(facts, "nodes")
    if facts.resource_slices is None:
        return _cannot(facts, "resourceslices")
    gpu = gpu_nodes(a.gpus, facts.nodes, facts.resource_slices)
    if not gpu:
        return UNKNOWN, f"no node shows a sign of a GPU ({_gpu_signs(a.gpus)}): nothing to check"
    published = set(facts.resource_slices.get(a.gpus.driver, []))
    missing = [n.name for n in gpu if n.name not in published]
    if missing:
        return WARNING, (
            f"GPU node{'s' if len(missing) > 1 else ''} {_listed(missing)} "
            f"ha{'ve' if len(missing) > 1 else 's'} no ResourceSlice of {a.gpus.driver}, so GPU "
            f"claims cannot be allocated there: {a.fix}"
        )
    return MET, f"all {len(gpu)} GPU nodes publish ResourceSlices of {a.gpus.driver}"


def _critical_pods_admitted(
    component: Component, a: CriticalPodsAdmitted, spec: ServingStackSpec, facts: ClusterFacts
) -> Outcome:
    if facts.quotas is None:
        return _cannot(facts, "resourcequotas")

    def admits(classes: list[str]) -> bool:
        return "*" in classes or any(c in classes for c in a.classes)

    restricting = [
        q for q in facts.quotas if q.namespace == a.restricted_in and admits(q.priority_classes)
    ]
    if not restricting:
        return MET, (
            f"no PriorityClass-scoped ResourceQuota in {a.restricted_in} (GKE's "
            "gcp-critical-pods is one), the sign of a cluster restricting system-critical "
            "pods by quota; nothing to admit"
        )
    sign = f"ResourceQuota {a.restricted_in}/{restricting[0].name} restricts them"
    if facts.workloads is None:
        return _cannot(facts, "workloads")
    found = _matching(a.workloads, facts.workloads)
    if not found:
        return UNKNOWN, (
            f"{sign}, but no {_kinds(a.workloads)} runs {' or '.join(a.workloads.images)}, so "
            "the driver's namespace is not known"
        )
    namespaces = sorted({w.namespace for w in found})
    bare = [
        ns
        for ns in namespaces
        if not any(q.namespace == ns and admits(q.priority_classes) for q in facts.quotas)
    ]
    if bare:
        return WARNING, (
            f"{sign}, and namespace {', '.join(bare)} has no ResourceQuota admitting them, so "
            f"the kubelet plugin's pods are never created: {a.fix}"
        )
    return MET, f"{sign}; namespace {', '.join(namespaces)} has a ResourceQuota admitting them"


_EVALUATORS: dict[type, Callable[[Component, Any, ServingStackSpec, ClusterFacts], Outcome]] = {
    WorkloadsAvailable: _workloads_available,
    ConfigFileWired: _config_file_wired,
    ServicePort: _service_port,
    WorkloadArg: _workload_arg,
    ImageTag: _image_tag,
    SchedulerName: _scheduler_name,
    SelectsEverything: _selects_everything,
    NoNodeAdvertises: _no_node_advertises,
    GpuNodesLabelled: _gpu_nodes_labelled,
    GpuNodesPublishSlices: _gpu_nodes_publish_slices,
    CriticalPodsAdmitted: _critical_pods_admitted,
}
