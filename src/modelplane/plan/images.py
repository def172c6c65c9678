"""Image mirror rules, and what they make of a component's images: pure, no I/O.

A rule ``FROM=TO`` moves every image whose repository starts with ``FROM``
(a registry, or a registry and a path prefix, at a path boundary) to ``TO``
in its place; ``*=TO`` replaces the registry of any image. The most specific
rule wins. Tags and digests are kept, so the mirror carries the same images
under the same tags.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from modelplane.catalog.images import (
    HOST,
    EnvEntry,
    ImageError,
    ImageRef,
    Images,
    ImageSite,
    Prefix,
    ProductImages,
    ProductObject,
    Reference,
    RegistryAndRepository,
    Repository,
    Runs,
    is_host,
    setting_paths,
    split_repository,
)
from modelplane.catalog.types import ValuesRead

ANY_REGISTRY = "*"
MAX_RULE = 512
# The Kubernetes limit on an object name, which a pull Secret's name is.
MAX_SECRET_NAME = 253

Values = dict[str, Any]

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class MirrorRule(BaseModel):
    """``source=target``: a registry (or registry/path prefix) and where its images are mirrored."""

    model_config = ConfigDict(frozen=True)

    source: str  # "*", "registry" or "registry/path"
    target: str  # "registry" or "registry/path"

    @classmethod
    def parse(cls, text: str) -> MirrorRule:
        if len(text) > MAX_RULE:
            raise ImageError(f"a mirror rule is at most {MAX_RULE} characters")
        source, eq, target = text.partition("=")
        if not eq:
            raise ImageError(f"expected FROM=TO (such as '*=mirror.internal'), got {text[:80]!r}")
        source, target = source.strip(), target.strip().rstrip("/")
        if source != ANY_REGISTRY:
            source = _prefix(source.rstrip("/"), "FROM")
        return cls(source=source, target=_prefix(target, "TO"))

    def rank(self, registry: str, path: str) -> int | None:
        """How specifically the rule names this repository, or None when it does not."""
        if self.source == ANY_REGISTRY:
            return 0
        src_registry, _, src_path = self.source.partition("/")
        if src_registry != registry:
            return None
        if not src_path:
            return 1
        if path == src_path or path.startswith(f"{src_path}/"):
            return 1 + src_path.count("/") + 1
        return None

    def move(self, registry: str, path: str) -> str:
        """The repository in the mirror; only for a repository the rule names."""
        _, _, src_path = self.source.partition("/")
        if self.source == ANY_REGISTRY or not src_path:
            rest = path
        else:
            rest = path[len(src_path) :].lstrip("/")
        return f"{self.target}/{rest}" if rest else self.target

    def __str__(self) -> str:
        return f"{self.source}={self.target}"


def _prefix(text: str, side: str) -> str:
    """A registry or a registry/path prefix, checked; the host must be explicit."""
    first, _, rest = text.partition("/")
    if not HOST.fullmatch(first) or not is_host(first):
        raise ImageError(
            f"{side} must start with a registry host such as quay.io or mirror.internal:5000, "
            f"got {text[:80]!r}"
        )
    if rest:
        # Checks each path component as a repository's.
        split_repository(text)
    return text


def parse_rules(texts: Iterable[str]) -> tuple[MirrorRule, ...]:
    """The rules, in order; two for the same FROM are refused, as one would be ignored."""
    rules: list[MirrorRule] = []
    seen: set[str] = set()
    for text in texts:
        rule = MirrorRule.parse(text)
        if rule.source in seen:
            raise ImageError(f"two mirror rules for {rule.source!r}")
        seen.add(rule.source)
        rules.append(rule)
    return tuple(rules)


def check_secret_names(names: Iterable[str]) -> tuple[str, ...]:
    """Pull Secret names, checked as the API server checks a Secret's name."""
    out: list[str] = []
    for name in names:
        if not name or len(name) > MAX_SECRET_NAME or not _DNS_SUBDOMAIN.fullmatch(name):
            raise ImageError(
                f"{name[:80]!r} is not a Secret name (lowercase letters, digits, '-' and '.', "
                f"at most {MAX_SECRET_NAME})"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def best_rule(rules: Sequence[MirrorRule], registry: str, path: str) -> MirrorRule | None:
    ranked = [(r.rank(registry, path), i, r) for i, r in enumerate(rules)]
    matching = [(rank, -i, r) for rank, i, r in ranked if rank is not None]
    if not matching:
        return None
    return max(matching, key=lambda m: (m[0], m[1]))[2]


def rewrite(image: ImageRef, rules: Sequence[MirrorRule]) -> tuple[ImageRef, MirrorRule] | None:
    """The image in the mirror and the rule that moved it, or None when no rule names it."""
    rule = best_rule(rules, image.registry, image.path)
    if rule is None:
        return None
    return image.with_repository(rule.move(image.registry, image.path)), rule


def rewrite_text(text: str, rules: Sequence[MirrorRule]) -> str:
    """A reference as text, rewritten, or as it was when no rule names it."""
    moved = rewrite(ImageRef.parse(text), rules)
    return text if moved is None else str(moved[0])


class ImageUse(BaseModel):
    """One image a component runs, before and after the mirror rules."""

    model_config = ConfigDict(frozen=True)

    component: str
    image: str  # as the chart has it at this version
    mirrored: str | None = None  # None: no rule names it, or nothing sets it
    rule: str | None = None
    runs: Runs = Runs.ALWAYS
    # False: nothing the chart reads at its version sets it, so it is never rewritten.
    settable: bool = True
    note: str = ""


def set_path(values: Values, path: str, value: Any) -> None:
    node = values
    *parents, last = path.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[last] = value


def merge(base: Values, overlay: Values) -> Values:
    """``overlay`` over ``base``: maps merged key by key, anything else replaced (as Helm does)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class ChartImages(NamedTuple):
    """What a chart's images make of its values: the overlay, every image, what was left out."""

    values: Values
    uses: list[ImageUse]
    # The paths the rules or the pull Secrets would set that the chart at
    # this version does not read (plan.chart_values): left unset.
    refused: list[str]


def image_values(
    component: str,
    images: Images,
    version: str,
    rules: Sequence[MirrorRule],
    pull_secrets: Sequence[str] = (),
    reads: ValuesRead | None = None,
) -> ChartImages:
    """The values that put a chart's images in the mirror, and every image, listed.

    Without rules nothing is set, so an install without a mirror keeps the
    values (and the digest) it always had. A path the chart does not read
    (``reads``, when known) is not set: an image whose setting it ignores is
    not moved, and is listed as nothing the product sets moves.
    """
    values: Values = {}
    uses: list[ImageUse] = []
    refused: list[str] = []
    for site in images.sites:
        if isinstance(site.setting, ProductObject):
            continue  # not the chart's: see product_images
        default = site.default(version)
        ignored = [
            p for p in setting_paths(site.setting) if reads is not None and not reads.reads(p)
        ]
        moved = _moved(site, default, rules)
        if moved is not None and ignored:
            refused += ignored
            moved = None
        uses.append(_use(component, site, default, moved, settable=not ignored))
        if moved is not None:
            _set(values, site, moved[0])
    if pull_secrets and images.pull_secrets is not None and takes_pull_secrets(uses, rules):
        for path in images.pull_secrets.paths:
            if reads is None or reads.reads(path):
                set_path(values, path, [{"name": name} for name in pull_secrets])
            else:
                refused.append(path)
    return ChartImages(values, uses, refused)


def product_images(
    components: Iterable[tuple[str, Images, str]],
    rules: Sequence[MirrorRule],
    pull_secrets: Sequence[str] = (),
) -> tuple[ProductImages, list[ImageUse]]:
    """The images of the objects the product composes itself, moved, and listed.

    ``components`` are ``(name, images, version)``. These objects are applied
    in both modes, so their images are the product's to move even when the
    cluster owner provides the charts.
    """
    moved: dict[ImageSite, str] = {}
    uses: list[ImageUse] = []
    for component, images, version in components:
        for site in images.sites:
            if not isinstance(site.setting, ProductObject):
                continue
            default = site.default(version)
            to = rewrite(default, rules)
            uses.append(_use(component, site, default, to))
            if to is not None:
                moved[site] = str(to[0])
    return ProductImages(moved, tuple(pull_secrets), mirrored_only=bool(rules)), uses


def takes_pull_secrets(uses: Sequence[ImageUse], rules: Sequence[MirrorRule]) -> bool:
    """Whether a component's pods pull with the ``--image-pull-secret`` Secrets.

    Without rules, every pod does (credentials for the registries as they
    are); with rules, only a component the rules move an image of: its
    Secrets are the mirror's.
    """
    return not rules or any(use.mirrored is not None for use in uses)


def _use(
    component: str,
    site: ImageSite,
    default: ImageRef,
    moved: tuple[ImageRef, MirrorRule] | None,
    settable: bool = True,
) -> ImageUse:
    return ImageUse(
        component=component,
        image=str(default),
        mirrored=str(moved[0]) if moved else None,
        rule=str(moved[1]) if moved else None,
        runs=site.runs,
        settable=settable and site.setting is not None,
        note=site.note,
    )


def _moved(
    site: ImageSite, default: ImageRef, rules: Sequence[MirrorRule]
) -> tuple[ImageRef, MirrorRule] | None:
    if site.setting is None:
        return None
    if isinstance(site.setting, Prefix):
        # The chart joins one prefix to every image's name, so the prefix is
        # what moves: a rule naming one image under it cannot be honoured.
        prefix, _, name = default.path.rpartition("/")
        moved = rewrite(ImageRef(default.registry, prefix), rules)
        if moved is None:
            return None
        return default.with_repository(f"{moved[0].repository}/{name}"), moved[1]
    return rewrite(default, rules)


def _set(values: Values, site: ImageSite, moved: ImageRef) -> None:
    setting = site.setting
    if isinstance(setting, Repository):
        set_path(values, setting.path, moved.repository)
    elif isinstance(setting, RegistryAndRepository):
        set_path(values, setting.registry, moved.registry)
        set_path(values, setting.repository, moved.path)
    elif isinstance(setting, Reference):
        set_path(values, setting.path, str(moved))
    elif isinstance(setting, Prefix):
        set_path(values, setting.path, moved.repository.rpartition("/")[0])
    elif isinstance(setting, EnvEntry):
        env = [{"name": setting.name, "value": moved.repository}]
        env += [{"name": n, "value": v} for n, v in setting.others]
        set_path(values, setting.path, env)
