"""What a reconcile would change on a target: the plan set against what the target holds.

Pure: the plan says what it would do (install, upgrade, apply); the reads
say what is there now (Helm's stored values and manifest per release, the
live object and the server-side apply dry run's answer per object). This
module only compares them and names each change, so ``modelplane diff``
and its tests share one rule.

Everything taken from the target (stored values, manifests, live objects,
dry-run answers, error messages) passes ``printable`` here, with newlines
kept, so both the text and the JSON output are safe to show.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from typing import Any

import yaml
from pydantic import Field, computed_field

from modelplane.catalog.components import BY_NAME
from modelplane.catalog.configuration import Hold
from modelplane.catalog.types import DisruptionClass
from modelplane.plan.chart_crds import chart_crd_change, crd_groups
from modelplane.plan.conflicts import Conflict
from modelplane.plan.crds import CrdAction
from modelplane.plan.frozen import Frozen
from modelplane.plan.manifest import MANIFEST_LIMITS
from modelplane.plan.model import ObjectAction, Plan, ReleaseAction, ReleaseState
from modelplane.untrusted import UntrustedInputError, load_yaml_all, printable
from modelplane.wire import object_key

# A diff is shown whole; this only keeps a hostile target's megabytes of
# text from becoming megabytes of terminal output.
MAX_DIFF = 1_000_000
# A version, an error message: one line.
MAX_LINE = 1024
# What the API server adds to an object that no apply sets: identity,
# bookkeeping and status. Left out of an object diff, as they would differ
# on every read.
VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")


class DeployedRelease(Frozen):
    """The revision of a release Helm's storage holds, as far as a diff reads it."""

    name: str
    namespace: str
    revision: int
    chart_version: str | None = None
    # The values the release was installed with (Helm's "config": only
    # those given, not the chart's defaults).
    values: dict[str, Any] = Field(default_factory=dict)
    manifest: str = ""


class MirrorFinding(Frozen):
    """A release or object whose images the mirror lacks, or could not be asked about."""

    # ``release ns/name`` or an object as ``Kind ns/name``.
    what: str
    component: str
    # ImageNotInMirror or MirrorUnreachable (vocabulary.BlockedReason).
    reason: str
    message: str
    # Whether the operator would hold it: a missing image always does.
    held: bool


class Reads(Frozen):
    """What was read from the target (and rendered) for one plan, beyond the plan's facts."""

    # Release name -> its stored revision, for the releases the plan acts on
    # that Helm's storage holds.
    deployed: dict[str, DeployedRelease] = Field(default_factory=dict)
    # Release name -> what ``helm template`` gives for the desired chart and values.
    rendered: dict[str, str] = Field(default_factory=dict)
    # Release name -> why its stored revision or its rendering could not be read.
    release_problems: dict[str, str] = Field(default_factory=dict)
    # Object key -> the live object, for objects the plan applies that exist.
    live: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Object key -> the server-side apply dry run's answer.
    dry_run: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Object key -> why the dry run gave no answer.
    object_problems: dict[str, str] = Field(default_factory=dict)
    # Component -> the objects of its fetched manifests, as the apply sends
    # them (stamped); their live objects and dry runs are in the maps above.
    manifest_objects: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    # Component -> why its manifests could not be fetched or were refused.
    manifest_problems: dict[str, str] = Field(default_factory=dict)
    # Release name -> the CRDs of its chart's crds/ as the apply sends them
    # (plan/crds.chart_crds), for the charts Helm leaves them to the product.
    chart_crds: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    # CRD name -> the live CRD, for those CRDs that exist.
    live_crds: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # What each change would clash with on the target (plan.conflicts), and
    # what spec.adopt takes over instead of being held back.
    conflicts: list[Conflict] = Field(default_factory=list)
    # What the image mirror lacks of each change (plan.mirror_images).
    mirror: list[MirrorFinding] = Field(default_factory=list)
    adopted: list[Conflict] = Field(default_factory=list)


class ReleaseChangeKind(StrEnum):
    INSTALL = "install"
    UPGRADE = "upgrade"
    # A first install that never deployed: uninstalled, then installed again.
    REINSTALL = "reinstall"


class ObjectChangeKind(StrEnum):
    CREATE = "create"
    UPDATE = "update"


class DisruptedPart(Frozen):
    """One part of a component an upgrade restarts, and what that does to what runs."""

    kind: DisruptionClass
    effect: str

    def __str__(self) -> str:
        return f"{self.kind.words}: {self.effect}"


def disrupted_parts(component: str, change: ReleaseChangeKind) -> list[DisruptedPart]:
    """What of ``component`` the change restarts, the most disruptive part first.

    An install restarts nothing that runs; an upgrade or a reinstall is
    taken to touch every part (catalog ``Component.disruptions``). A
    component the catalog does not know names nothing.
    """
    known = BY_NAME.get(component)
    if change is ReleaseChangeKind.INSTALL or known is None:
        return []
    parts = sorted(known.disruptions, key=lambda d: d.kind.rank)
    return [DisruptedPart(kind=d.kind, effect=d.effect) for d in parts]


def disrupted_classes(parts: list[DisruptedPart]) -> list[DisruptionClass]:
    """The classes of ``parts``, each once, the most disruptive first."""
    return sorted({p.kind for p in parts}, key=lambda k: k.rank)


class ReleaseChange(Frozen):
    component: str
    release: str
    namespace: str
    change: ReleaseChangeKind
    # The plan's own word for the step (a rollback before an upgrade, a wait).
    action: ReleaseAction
    old_version: str | None = None
    new_version: str
    chart: str
    waiting_for: list[str] = Field(default_factory=list)
    values_diff: str = ""
    manifest_diff: str = ""
    # CRDs of its chart's crds/ that the apply would create or update.
    crds: list[str] = Field(default_factory=list)
    # What the change would destroy or cannot do in place, each for a person.
    destructive: list[str] = Field(default_factory=list)
    # The parts of the component an upgrade restarts (none for an install).
    disruption: list[DisruptedPart] = Field(default_factory=list)
    problem: str | None = None


class ObjectChange(Frozen):
    key: str
    object: str  # Kind namespace/name
    component: str
    change: ObjectChangeKind
    diff: str = ""
    # The fields a hand edit took over, which the apply takes back.
    drift: list[str] = Field(default_factory=list)
    problem: str | None = None


class ManifestsChange(Frozen):
    component: str
    url: str
    version: str
    crds: list[str]
    # Each object the manifests bring that would be created or changed.
    objects: list[ObjectChange] = Field(default_factory=list)
    problem: str | None = None


class HeldObject(Frozen):
    key: str
    object: str
    component: str
    hold: Hold
    reason: str


class Drift(Frozen):
    """Fields the product owns that someone changed by hand on the target."""

    key: str
    object: str
    fields: list[str]


class Diff(Frozen):
    name: str
    namespace: str
    server: str
    releases: list[ReleaseChange] = Field(default_factory=list)
    manifests: list[ManifestsChange] = Field(default_factory=list)
    objects: list[ObjectChange] = Field(default_factory=list)
    held: list[HeldObject] = Field(default_factory=list)
    drift: list[Drift] = Field(default_factory=list)
    # What the target runs that a change would clash with: each holds its
    # component back (plan.conflicts).
    conflicts: list[Conflict] = Field(default_factory=list)
    # With mirror rules: what the mirror lacks of each change, or could not
    # be asked about (plan.mirror_images); a missing image holds its change.
    mirror: list[MirrorFinding] = Field(default_factory=list)
    # What a release takes over instead (spec.adopt): listed first.
    adopted: list[Conflict] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def changes(self) -> bool:
        """Whether a reconcile would change anything (held objects change nothing)."""
        return bool(self.releases or self.manifests or self.objects)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def destructive(self) -> bool:
        """Whether a change would destroy something, or fail half-way."""
        return any(r.destructive for r in self.releases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def disrupts(self) -> list[DisruptionClass]:
        """The disruption classes the upgrades touch, the most disruptive first."""
        return disrupted_classes([p for r in self.releases for p in r.disruption])


# Fields the API server refuses to change on a live object: an upgrade that
# changes one fails half-way, with some of the release's objects updated.
# (kind -> paths under spec).
IMMUTABLE: dict[str, tuple[tuple[str, ...], ...]] = {
    "Deployment": (("selector",),),
    "ReplicaSet": (("selector",),),
    "DaemonSet": (("selector",),),
    "StatefulSet": (
        ("selector",),
        ("serviceName",),
        ("podManagementPolicy",),
        ("volumeClaimTemplates",),
    ),
    "Job": (("selector",), ("template",)),
}


def _objects(manifest: str, namespace: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The manifest's objects of the kinds ``IMMUTABLE`` names, by (kind, namespace, name)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    try:
        docs = list(load_yaml_all(manifest, MANIFEST_LIMITS))
    except UntrustedInputError:
        return out  # a stored manifest that cannot be read is the release health's to judge
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in IMMUTABLE:
            continue
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            continue
        out[(doc["kind"], str(meta.get("namespace") or namespace), meta["name"])] = doc
    return out


def _field(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = doc.get("spec")
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def immutable_changes(before: str, after: str, namespace: str) -> list[str]:
    """The fields an upgrade from manifest ``before`` to ``after`` would change that cannot be."""
    old, new = _objects(before, namespace), _objects(after, namespace)
    out: list[str] = []
    for key in sorted(old.keys() & new.keys()):
        kind, ns, name = key
        for path in IMMUTABLE[kind]:
            if _field(old[key], path) != _field(new[key], path):
                out.append(
                    printable(
                        f"{kind} {ns}/{name}: spec.{'.'.join(path)} would change, which the "
                        "API server refuses in place: helm upgrade would fail half-way "
                        "(delete the object first, or reinstall the release)",
                        MAX_LINE,
                    )
                )
    return out


def _crds_of(release: str, component: str, reads: Reads) -> tuple[list[str], list[str]]:
    """CRDs of the release's crds/ the apply would write, and what of them destroys or refuses."""
    written: list[str] = []
    destructive: list[str] = []
    groups = crd_groups(component)
    for body in reads.chart_crds.get(release, []):
        name = body["metadata"]["name"]
        change = chart_crd_change(body, reads.live_crds.get(name), release, groups)
        if change.writes:
            written.append(f"{name} ({change.action.value.lower()})")
        if change.action is CrdAction.REFUSE or change.removed:
            destructive.append(printable(change.message, MAX_LINE))
    return written, destructive


def unified(before: str, after: str, name: str) -> str:
    """A unified diff of two texts, ``a/name`` against ``b/name``; "" when they agree."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    # A last line without a newline would run into the next header.
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def as_yaml(doc: Any) -> str:
    """``doc`` as block YAML with sorted keys: one stable text for both sides of a diff."""
    if not doc:
        return ""
    return str(yaml.safe_dump(doc, sort_keys=True, default_flow_style=False))


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without status and the metadata the API server keeps for itself."""
    out = {k: v for k, v in body.items() if k != "status"}
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = {k: v for k, v in metadata.items() if k not in VOLATILE_METADATA}
    return out


def _shown(text: str) -> str:
    return printable(text, MAX_DIFF, newlines=True)


_RELEASE_CHANGE = {
    ReleaseAction.INSTALL: ReleaseChangeKind.INSTALL,
    ReleaseAction.WAIT: ReleaseChangeKind.INSTALL,
    ReleaseAction.UPGRADE: ReleaseChangeKind.UPGRADE,
    ReleaseAction.ROLLBACK: ReleaseChangeKind.UPGRADE,
    ReleaseAction.REINSTALL: ReleaseChangeKind.REINSTALL,
}


def diff(plan: Plan, reads: Reads, server: str) -> Diff:
    """Every change a reconcile of ``plan`` would make, with its diffs, in plan order."""
    releases: list[ReleaseChange] = []
    for r in plan.releases:
        change = _RELEASE_CHANGE.get(r.action)
        if change is None:
            continue
        if r.action is ReleaseAction.WAIT and r.state is not ReleaseState.ABSENT:
            # An upgrade held back until its dependencies have theirs.
            change = ReleaseChangeKind.UPGRADE
        deployed = reads.deployed.get(r.name)
        # A reinstall starts from nothing: the old revision is uninstalled first.
        before = deployed if change is not ReleaseChangeKind.REINSTALL else None
        name = f"{r.namespace}/{r.name}"
        problem = reads.release_problems.get(r.name)
        crds, destructive = _crds_of(r.name, r.component, reads)
        if change is ReleaseChangeKind.REINSTALL and deployed is not None:
            destructive.insert(
                0,
                f"release {r.name} would be uninstalled and installed again: every object "
                "of it is deleted first",
            )
        if before is not None and r.name in reads.rendered:
            destructive += immutable_changes(before.manifest, reads.rendered[r.name], r.namespace)
        releases.append(
            ReleaseChange(
                component=r.component,
                release=r.name,
                namespace=r.namespace,
                change=change,
                action=r.action,
                old_version=(
                    printable(deployed.chart_version, MAX_LINE)
                    if deployed is not None and deployed.chart_version is not None
                    else None
                ),
                new_version=r.version,
                chart=r.chart,
                waiting_for=r.waiting_for,
                values_diff=_shown(
                    unified(
                        as_yaml(before.values if before else {}),
                        as_yaml(r.values),
                        f"{name} values",
                    )
                ),
                manifest_diff=(
                    _shown(
                        unified(
                            before.manifest.strip() + "\n" if before else "",
                            reads.rendered[r.name].strip() + "\n",
                            f"{name} manifest",
                        )
                    )
                    if r.name in reads.rendered
                    else ""
                ),
                crds=crds,
                destructive=destructive,
                disruption=disrupted_parts(r.component, change),
                problem=printable(problem, MAX_LINE) if problem else None,
            )
        )
    objects: list[ObjectChange] = []
    held: list[HeldObject] = []
    drift: list[Drift] = []
    for o in plan.objects:
        if o.action is ObjectAction.HOLD:
            assert o.hold is not None and o.hold_reason is not None
            held.append(
                HeldObject(
                    key=o.key,
                    object=o.shown,
                    component=o.component,
                    hold=o.hold,
                    reason=o.hold_reason,
                )
            )
        elif o.action is ObjectAction.APPLY:
            objects.append(_object_change(o.object, o.component, o.drift, reads))
            if o.drift:
                drift.append(Drift(key=o.key, object=o.shown, fields=o.drift))
    return Diff(
        name=plan.name,
        namespace=plan.namespace,
        server=printable(server, MAX_LINE),
        releases=releases,
        manifests=[
            ManifestsChange(
                component=m.component,
                url=m.url,
                version=m.version,
                crds=m.crds,
                objects=_manifest_objects(m.component, reads),
                problem=(
                    printable(reads.manifest_problems[m.component], MAX_LINE)
                    if m.component in reads.manifest_problems
                    else None
                ),
            )
            for m in plan.manifests
            if m.action is ObjectAction.APPLY
        ],
        objects=objects,
        held=held,
        drift=drift,
        conflicts=reads.conflicts,
        mirror=reads.mirror,
        adopted=reads.adopted,
    )


def _manifest_objects(component: str, reads: Reads) -> list[ObjectChange]:
    """The objects of a component's manifests that the apply would create or change."""
    changes = [
        _object_change(body, component, [], reads)
        for body in reads.manifest_objects.get(component, [])
    ]
    return [c for c in changes if c.diff or c.problem]


def shown(body: dict[str, Any]) -> str:
    """``Kind namespace/name`` (``Kind name`` when cluster-scoped), for a person."""
    meta = body["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{body['kind']} {where}{meta['name']}"


def _object_change(
    body: dict[str, Any], component: str, drift: list[str], reads: Reads
) -> ObjectChange:
    key = object_key(body)
    live = reads.live.get(key)
    # Without the server's answer, the body the apply sends is the best account.
    after = reads.dry_run.get(key, body)
    problem = reads.object_problems.get(key)
    name = shown(body)
    return ObjectChange(
        key=key,
        object=printable(name, MAX_LINE),
        component=component,
        change=ObjectChangeKind.CREATE if live is None else ObjectChangeKind.UPDATE,
        diff=_shown(
            unified(
                as_yaml(comparable(live)) if live is not None else "",
                as_yaml(comparable(after)),
                name.replace(" ", "/"),
            )
        ),
        drift=drift,
        problem=printable(problem, MAX_LINE) if problem else None,
    )
