"""Per-component overrides of where charts and manifests come from.

``--chart-repository-for``, ``--manifests-url-for`` and
``--gaie-manifests-url`` name components of the catalog. The command line
and the operator's options both check those names and combine the flags
here, so the two cannot accept different names or build different sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from modelplane.catalog.components import COMPONENTS

# The component --gaie-manifests-url is the base URL of (an older, shorter
# spelling of --manifests-url-for gaie-crds=URL).
GAIE_MANIFESTS = "gaie-crds"


def components_of_kind(kind: str) -> list[str]:
    """The names of the catalog's components made of a chart, or of fetched manifests."""
    return [c.name for c in COMPONENTS if c.kind == kind]


def unknown_components(names: Iterable[str], kind: str) -> str | None:
    """What is wrong with a per-component override's names, or None when all are known.

    A name the catalog does not know (or one of another kind) would be
    ignored, and that component's chart or manifests fetched from the public
    upstream the override was meant to replace.
    """
    known = components_of_kind(kind)
    unknown = [n for n in names if n not in known]
    if not unknown:
        return None
    what = "a chart" if kind == "chart" else "fetched manifests"
    return (
        f"no component made of {what} is named "
        f"{', '.join(repr(n[:80]) for n in unknown)}; known: {', '.join(known)}"
    )


def manifests_base_urls(
    gaie_manifests_url: str | None, manifests_url_for: Mapping[str, str]
) -> dict[str, str]:
    """Each fetched component's base URL; ``--manifests-url-for`` wins over the GAIE flag."""
    out = dict(manifests_url_for)
    if gaie_manifests_url:
        out.setdefault(GAIE_MANIFESTS, gaie_manifests_url)
    return out
