"""The mirror preflight's decisions, and the list of images to copy: pure, no I/O.

With ``--image-registry-mirror``, every image a release is about to run
(its plan's images after the rules, tag or digest as the plan gives them)
is looked up in the mirror before the release is installed or upgraded: a
missing one would otherwise show as ``ImagePullBackOff`` half-way through
an install. What to look up, and what the answers mean for the release,
are decided here; the lookups themselves are ``actions.registry``'s.

The same list, by where each image comes from, is what a person copies
into the mirror: ``to_copy`` gives it in ``skopeo sync``'s YAML
source form (https://github.com/containers/skopeo/blob/main/docs/skopeo-sync.1.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from modelplane.catalog.advisories import listed
from modelplane.catalog.components import BY_NAME
from modelplane.catalog.images import ImageRef, Runs
from modelplane.faults import ErrorKind, KnownError
from modelplane.plan.images import ImageUse
from modelplane.plan.model import PlannedRelease, ReleaseAction
from modelplane.plan.pull_secrets import component_namespaces
from modelplane.vocabulary import BlockedReason

# The actions that run helm with the plan's values, and so pull its images.
_RUNS_IMAGES = frozenset(
    {
        ReleaseAction.INSTALL,
        ReleaseAction.UPGRADE,
        ReleaseAction.REINSTALL,
        ReleaseAction.ROLLBACK,
    }
)
# A reference with neither tag nor digest is pulled as ``latest``.
DEFAULT_TAG = "latest"


class PreflightMode(StrEnum):
    """``--mirror-preflight``: what a mirror that cannot be asked does to a release."""

    # Held until the mirror answers: nothing is installed on a guess.
    REQUIRE = "require"
    # Said in an event, and installed: the kubelet may reach the mirror
    # where the operator cannot (another network path, another proxy).
    WARN = "warn"
    # No lookups at all.
    OFF = "off"


class Answer(StrEnum):
    """What the mirror said about one image."""

    FOUND = "found"
    MISSING = "missing"
    # The mirror refused the pull Secret's credentials, or asked for some
    # and there were none: it cannot be told whether the image is there.
    UNAUTHORIZED = "unauthorized"
    # No answer, or one that is no registry's (a 5xx, a timeout, a bad TLS).
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Lookup:
    image: str
    answer: Answer
    # Why it could not be told, for a person (never a credential).
    detail: str = ""


class ManifestRef(NamedTuple):
    """What ``HEAD /v2/<name>/manifests/<reference>`` asks for one image."""

    registry: str
    name: str
    reference: str  # the digest when there is one (what the kubelet pulls), else the tag


def manifest_ref(image: str) -> ManifestRef:
    ref = ImageRef.parse(image)
    return ManifestRef(ref.registry, ref.path, ref.digest or ref.tag or DEFAULT_TAG)


def to_look_up(uses: Iterable[ImageUse]) -> tuple[str, ...]:
    """The mirrored images that run, each once, in plan order.

    An image no rule moves is pulled from its own registry, not the
    mirror; one that runs only with a feature the product leaves off is
    not pulled at all.
    """
    return tuple(dict.fromkeys(u.mirrored for u in uses if u.mirrored and u.runs is not Runs.OFF))


def release_lookups(release: PlannedRelease) -> tuple[str, ...]:
    """The images to look up before a release's helm run; () when it runs none."""
    if release.action not in _RUNS_IMAGES:
        return ()
    return to_look_up(release.images)


def upgrade_lookups(uses: Iterable[ImageUse], upgrading: Iterable[str]) -> tuple[str, ...]:
    """The images to look up before an upgrade starts: those of the components it moves.

    ``uses``: the images of the stack planned at its desired versions, the
    product's own objects' among them (named by the component whose version
    they follow). A component the upgrade leaves at its version runs what it
    ran: its images are not the upgrade's to ask about.
    """
    names = set(upgrading)
    return to_look_up(u for u in uses if u.component in names)


def object_lookups(body: Mapping[str, Any], uses: Iterable[ImageUse]) -> tuple[str, ...]:
    """The mirrored images one of the product's own objects names, each once, in its order.

    The ModelExpress Deployment's container, the EnvoyProxy's
    ``envoyDeployment.container.image``: applied without helm, so looked up
    before they are applied, as a release's images before helm runs. Told
    by value: every string of the object that is an image the plan lists
    as run from the mirror.
    """
    mirrored = set(to_look_up(uses))
    return tuple(dict.fromkeys(s for s in _strings(body) if s in mirrored))


def _strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def pulling_namespaces(components: Iterable[str], namespace: str | None = None) -> list[str]:
    """Where the pods of ``components`` read their pull Secrets: ``namespace`` first."""
    spaces = [namespace] if namespace else []
    for name in components:
        component = BY_NAME.get(name)
        if component is not None:
            spaces += [ns for ns in component_namespaces(component) if ns not in spaces]
    return spaces


class Verdict(NamedTuple):
    """Whether a release may run, and what to say: a reason and a message, or neither."""

    hold: bool
    reason: BlockedReason | None = None
    message: str = ""


def verdict(lookups: Sequence[Lookup], mode: PreflightMode, what: str = "the release") -> Verdict:
    """What a release's lookups mean: a missing image holds it, an unknown one as ``mode`` says.

    A missing image holds it whatever the mode (but off, where nothing is
    looked up): the install would stop at ``ImagePullBackOff`` with the
    releases before it installed. An image that could not be looked up
    holds it only under ``require``; under ``warn`` the message is said
    and the release goes on. ``what`` is held: the release, or an upgrade
    waiting for its turn (plan.rollout.with_mirror).
    """
    if mode is PreflightMode.OFF:
        return Verdict(hold=False)
    missing = [x.image for x in lookups if x.answer is Answer.MISSING]
    unknown = [x for x in lookups if x.answer in (Answer.UNAUTHORIZED, Answer.UNREACHABLE)]
    if missing:
        message = f"the image mirror lacks {listed(missing)}; copy it in and {what} goes on"
        if unknown:
            message += f" ({_unknown(unknown)})"
        return Verdict(True, BlockedReason.IMAGE_NOT_IN_MIRROR, message)
    if unknown:
        held = mode is PreflightMode.REQUIRE
        then = f"{what} waits" if held else f"{what} goes on unchecked"
        message = f"the image mirror could not be asked: {_unknown(unknown)}; {then}"
        return Verdict(held, BlockedReason.MIRROR_UNREACHABLE, message)
    return Verdict(hold=False)


def _unknown(lookups: Sequence[Lookup]) -> str:
    return "; ".join(f"{x.image}: {x.detail or x.answer.value}" for x in lookups)


class MirrorPreflightError(KnownError):
    """A release held by the mirror preflight, with the verdict's reason; nothing was written."""

    def __init__(self, reason: BlockedReason, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    def condition_reason(self) -> str | None:
        return self.reason.value


class ImageNotInMirror(MirrorPreflightError):
    kind = ErrorKind.NOT_FOUND


class MirrorUnreachable(MirrorPreflightError):
    kind = ErrorKind.UNREACHABLE


def raise_for(v: Verdict) -> None:
    """The verdict as the error a component's guard records; nothing when it holds nothing."""
    if not v.hold or v.reason is None:
        return
    if v.reason is BlockedReason.IMAGE_NOT_IN_MIRROR:
        raise ImageNotInMirror(v.reason, v.message)
    raise MirrorUnreachable(v.reason, v.message)


# ---- what to copy: skopeo sync's YAML source -------------------------------------------


class SyncDocument(NamedTuple):
    """One ``skopeo sync --src yaml --dest docker <file> <destination>`` run."""

    destination: str  # registry[/path] the images land under, by their last path component
    source: dict[str, Any]  # the YAML source: registry -> {"images": {repository: [tag, ...]}}


class ToCopy(NamedTuple):
    """The images to copy: ``skopeo sync`` runs, and single copies no sync run can make."""

    syncs: list[SyncDocument]
    # (source, mirrored): a rule that renames an image's last path component
    # (``FROM`` naming one repository whole), which ``skopeo copy`` makes.
    copies: list[tuple[str, str]]


def to_copy(uses: Iterable[ImageUse]) -> ToCopy:
    """The images to copy into the mirror, one ``skopeo sync`` source per destination.

    ``skopeo sync`` from a YAML source puts each image at the destination
    followed by its repository's last path component (unless ``--scoped``,
    which adds the source registry and whole path: a layout no mirror rule
    makes). So the images are grouped by where the rules put them, less that
    last component: each group is one run. Tags and digests are listed as
    the plan has them; an image with both is copied by its digest, which is
    what the kubelet pulls.
    """
    groups: dict[str, dict[str, dict[str, list[str]]]] = {}
    copies: list[tuple[str, str]] = []
    for use in uses:
        if not use.mirrored or use.runs is Runs.OFF:
            continue
        source, moved = ImageRef.parse(use.image), ImageRef.parse(use.mirrored)
        destination, _, last = moved.repository.rpartition("/")
        if last != source.path.rpartition("/")[2]:
            if (use.image, use.mirrored) not in copies:
                copies.append((use.image, use.mirrored))
            continue
        reference = source.digest or source.tag or DEFAULT_TAG
        images = groups.setdefault(destination, {}).setdefault(source.registry, {})
        tags = images.setdefault(source.path, [])
        if reference not in tags:
            tags.append(reference)
    syncs = [
        SyncDocument(
            destination,
            {registry: {"images": images} for registry, images in sorted(by_registry.items())},
        )
        for destination, by_registry in sorted(groups.items())
    ]
    return ToCopy(syncs, copies)
