"""Where each component's images are set, as data: what an air-gapped install rewrites.

A chart sets its images in one of a few shapes (a full repository, a
registry beside a repository, a whole reference, a prefix every image hangs
from); each shape is one ``Setting`` here, so the plan rewrites every chart
the same way and a new component only lists its sites. The defaults and the
values paths are the charts' own at the pinned versions
(``shared/docs/images.md`` gives the source of each).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# A registry host (with an optional port) and the path components after it,
# as the distribution reference grammar has them; tags and digests apart.
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
HOST = re.compile(_HOST)
COMPONENT = re.compile(_COMPONENT)
TAG = re.compile(_TAG)
DIGEST = re.compile(_DIGEST)
# The distribution spec's limit on a whole reference's name part.
MAX_NAME = 255

DOCKER_HUB = "docker.io"


class ImageError(ValueError):
    """A reference or a prefix that is not one; the message names what is wrong."""


def is_host(first: str) -> bool:
    # How container runtimes tell a registry from a Docker Hub namespace.
    return "." in first or ":" in first or first == "localhost"


def split_repository(text: str) -> tuple[str, str]:
    """``registry, path`` of a repository or prefix, with Docker Hub's defaults filled in.

    ``envoyproxy/envoy`` is ``docker.io``'s, and a one-word name is
    ``docker.io/library``'s, as every runtime reads them.
    """
    if not text or len(text) > MAX_NAME:
        raise ImageError(f"a repository of 1 to {MAX_NAME} characters, got {len(text)}")
    first, _, rest = text.partition("/")
    if rest and is_host(first):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, text
        if "/" not in path:
            path = f"library/{path}"
    if not HOST.fullmatch(registry):
        raise ImageError(f"{registry[:80]!r} is not a registry host")
    for part in path.split("/"):
        if not COMPONENT.fullmatch(part):
            raise ImageError(
                f"{part[:80]!r} is not a repository path component "
                "(lowercase letters, digits and . _ - between them)"
            )
    return registry, path


@dataclass(frozen=True)
class ImageRef:
    """A container image reference, split where a mirror rewrites it."""

    registry: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        name, at, digest = text.partition("@")
        if at and not DIGEST.fullmatch(digest):
            raise ImageError(f"{digest[:80]!r} is not a digest")
        # A colon after the last slash is a tag; one before it is a port.
        slash = name.rfind("/")
        colon = name.rfind(":")
        tag = None
        if colon > slash:
            name, tag = name[:colon], name[colon + 1 :]
            if not TAG.fullmatch(tag):
                raise ImageError(f"{tag[:80]!r} is not a tag")
        registry, path = split_repository(name)
        return cls(registry, path, tag, digest or None)

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}"

    def with_repository(self, repository: str) -> ImageRef:
        registry, path = split_repository(repository)
        return ImageRef(registry, path, self.tag, self.digest)

    def __str__(self) -> str:
        out = self.repository
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


class Runs(StrEnum):
    """When an image runs with the product's values: which a mirror must carry."""

    ALWAYS = "always"  # a workload of the release
    HOOK = "hook"  # a Helm hook Job (install, upgrade or delete)
    RUNTIME = "runtime"  # started later by a controller (sidecars, solver pods)
    OFF = "off"  # only when a feature the product leaves off is turned on


@dataclass(frozen=True)
class Repository:
    """One values path holds the whole repository (registry and path); the tag is elsewhere."""

    path: str


@dataclass(frozen=True)
class RegistryAndRepository:
    """The registry and the repository path are two values; the chart joins them with '/'."""

    registry: str
    repository: str


@dataclass(frozen=True)
class Reference:
    """One values path holds the whole reference, tag included."""

    path: str


@dataclass(frozen=True)
class Prefix:
    """One values path holds a prefix every image of the chart hangs from (``<prefix>/<name>``).

    The prefix is rewritten as a repository would be, so a rule must match it
    whole: one naming a single image under it cannot be honoured and leaves
    the prefix as it is.
    """

    path: str


@dataclass(frozen=True)
class EnvEntry:
    """An environment variable of a container, in a values list of ``{name, value}``.

    Helm replaces a list whole, so the plan writes the chart's default list
    back with only this entry's value rewritten (``others`` are kept as the
    chart has them).
    """

    path: str  # the values path of the env list
    name: str
    others: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ProductObject:
    """Set in an object the product composes itself (the EnvoyProxy, ModelExpress)."""

    describe: str


Setting = Repository | RegistryAndRepository | Reference | Prefix | EnvEntry | ProductObject


def setting_paths(setting: Setting | None) -> tuple[str, ...]:
    """The chart values paths a setting writes; none for the product's own objects."""
    if isinstance(setting, RegistryAndRepository):
        return (setting.registry, setting.repository)
    if isinstance(setting, Repository | Reference | Prefix | EnvEntry):
        return (setting.path,)
    return ()


@dataclass(frozen=True)
class ImageSite:
    """One image a component runs, and where it is set.

    ``image`` is the default at the pinned version; ``{version}`` stands for
    the component's version where the chart tags the image with it, so an
    overridden version shows the tag it really pulls.
    """

    image: str
    setting: Setting | None  # None: nothing in the chart sets it (listed, never rewritten)
    runs: Runs = Runs.ALWAYS
    note: str = ""  # why it runs only sometimes, or what else it needs

    def default(self, version: str) -> ImageRef:
        return ImageRef.parse(self.image.format(version=image_tag(version)))


def image_tag(version: str) -> str:
    """The tag of the images a chart at ``version`` runs: the version less its build metadata.

    A chart version may carry SemVer build metadata (``v1.8.4+build``); an
    OCI tag cannot hold a ``+``. Build metadata names a build of the same
    release (semver.org, item 10: it plays no part in precedence), and a
    chart rebuilt so keeps running that release's images, so its tag is
    the version before the ``+``.
    """
    return version.partition("+")[0]


@dataclass(frozen=True)
class PullSecrets:
    """Where a chart takes the names of the Secrets its pods pull with.

    Each path takes a list of ``{name: ...}``. ``namespaces`` are the ones
    besides the component's own whose pods pull with them (the AI Gateway's
    extProc runs in Envoy Gateway's proxies), so each must hold the Secrets.
    """

    paths: tuple[str, ...]
    namespaces: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Images:
    """A component's images and pull-secret paths."""

    sites: tuple[ImageSite, ...] = ()
    pull_secrets: PullSecrets | None = None


@dataclass(frozen=True)
class ProductImages:
    """The product's own images (``ProductObject`` sites) as the plan moved them.

    The objects are composed in the catalog and the rules are the plan's, so
    the plan hands over what it decided: the image each site moves to, and
    the Secrets the pods pull with. A site absent from ``moved`` keeps the
    image its object has without a mirror.
    """

    moved: Mapping[ImageSite, str] = field(default_factory=dict)
    pull_secrets: tuple[str, ...] = ()
    # With mirror rules only the pods that pull from the mirror take the
    # Secrets: a Secret for the mirror means nothing to another registry, and
    # naming it would ask for it in namespaces that never pull from there.
    mirrored_only: bool = False

    def secrets_for(self, site: ImageSite) -> tuple[str, ...]:
        """The pull Secrets of the pods that run ``site``'s image."""
        if self.mirrored_only and site not in self.moved:
            return ()
        return self.pull_secrets
