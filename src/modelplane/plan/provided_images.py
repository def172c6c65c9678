"""Whether a provided substrate pulls from where the mirror rules say: pure, no I/O.

In Provided mode nothing is installed, so the rules move no image; but a
provided workload that still pulls from a registry a rule names is one an
air-gapped cluster cannot restart. The workloads are the ones the
advisories already find by image tail (``catalog.Workloads``), so this costs
no read of its own. The result is advice only: never unmet.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelplane.catalog.advisories import cannot, listed, matching, ref
from modelplane.catalog.facts import ClusterFacts, ObservedWorkload
from modelplane.catalog.images import ImageError, ImageRef
from modelplane.catalog.types import Component, Finding, RequirementStatus, Workloads
from modelplane.plan.images import MirrorRule, rewrite
from modelplane.untrusted import printable

TITLE = "images pulled from the mirror"
# One image reference, as a message shows it (the distribution spec's name
# limit, a tag and a digest).
MAX_IMAGE = 400


def workloads_of(component: Component) -> list[Workloads]:
    """The workload specs the component's advisories find it by, each once."""
    found: list[Workloads] = []
    for advisory in component.advisories:
        spec = getattr(advisory, "workloads", None)
        if isinstance(spec, Workloads) and spec not in found:
            found.append(spec)
    return found


def in_mirror(image: ImageRef, rules: Sequence[MirrorRule]) -> bool:
    """Whether the image already comes from a rule's target (at a path boundary)."""
    for rule in rules:
        target = rule.target
        if image.repository == target or image.repository.startswith(f"{target}/"):
            return True
    return False


def unmirrored(
    workload: ObservedWorkload, rules: Sequence[MirrorRule]
) -> list[tuple[str, str, MirrorRule]]:
    """The workload's images a rule would move: (image, where it would be, rule)."""
    out: list[tuple[str, str, MirrorRule]] = []
    for text in workload.images:
        try:
            image = ImageRef.parse(text)
        except ImageError:
            continue  # not a reference a runtime pulls; no rule can speak of it
        if in_mirror(image, rules):
            continue
        moved = rewrite(image, rules)
        if moved is not None:
            out.append((text, str(moved[0]), moved[1]))
    return out


def mirror_finding(
    component: Component, facts: ClusterFacts, rules: Sequence[MirrorRule]
) -> Finding | None:
    """The advisory for one provided component; None when nothing finds its workloads."""
    specs = workloads_of(component)
    if not specs or not rules:
        return None
    if facts.workloads is None:
        return cannot(facts, "workloads")
    found = [w for spec in specs for w in matching(spec, facts.workloads)]
    found = list({(w.kind, w.namespace, w.name): w for w in found}.values())
    if not found:
        return None
    problems = [
        f"{ref(w)} pulls {printable(image, MAX_IMAGE)}, which rule {rule} moves to "
        f"{printable(moved, MAX_IMAGE)}"
        for w in found
        for image, moved, rule in unmirrored(w, rules)
    ]
    if problems:
        return RequirementStatus.WARNING, (
            f"{listed(problems, sep='; ')}: on a cluster that reaches only the mirror "
            "its pods cannot start again; point the install at the mirror"
        )
    return RequirementStatus.MET, f"{listed([ref(w) for w in found])} pull from the mirror"
