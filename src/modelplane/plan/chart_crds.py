"""``chart_crd_change``: whether a chart's crds/ may write one CRD, decided before any is sent.

Whoever serves a chart repository decides what its crds/ holds, and the
product applies it with force, before Helm and outside the release. Helm
itself only creates a crds/ CRD that does not exist and never changes one.
So beyond ``crd_change`` (the stored-version rule the hub's own CRD shares),
a chart's CRD is refused, and with it the whole set, when:

- **its group is not the component's**: a component writes only CRDs of the
  API groups the catalog names for it (``Component.crd_groups``); an
  Argo CD or cert-manager CRD in crds/ is some other project's;
- **it exists and is not the release's**: the product labels what it
  applies from crds/ (``app.kubernetes.io/managed-by=modelplane`` and
  ``modelplane.ai/chart-crds=<release>``); a live CRD without both is
  another owner's (the cluster's owner, another Helm release, a cloud's
  add-on manager), left as it is. Labels rather than managedFields: a field
  manager's name is whatever a client says, and a label is also how a CRD's
  owner hands it over on purpose;
- **it would be downgraded**: see ``downgrade``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from modelplane.catalog.components import BY_NAME
from modelplane.catalog.versions import Version, parse_version
from modelplane.plan.crds import CHART_CRDS_LABEL, CrdAction, CrdChange, crd_change
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

# Annotations that say which release a CRD was generated for, most telling
# first; the first that both the live and the desired CRD carry decides.
VERSION_ANNOTATIONS = (
    # The Gateway API bundle (gateway-helm's crds subchart).
    "gateway.networking.k8s.io/bundle-version",
    # prometheus-operator's release (kube-prometheus-stack's crds subchart).
    "operator.prometheus.io/version",
    # The generator's: a project moves to newer controller-gen, not back.
    "controller-gen.kubebuilder.io/version",
)

# Kubernetes' version priority (apiextensions' "version priority"): GA over
# beta over alpha, then the higher major, then the higher minor. Names out
# of that form sort below all.
# Bounded digits: a chart's text is no one's to make int() refuse.
_KUBE_VERSION = re.compile(r"^v(\d{1,9})(?:(alpha|beta)(\d{1,9}))?$")
# An annotation's version longer than any release tag is not read as one.
_MAX_VERSION = 64
_STABILITY = {"alpha": 1, "beta": 2, None: 3}


def crd_groups(component: str) -> frozenset[str]:
    """The API groups whose CRDs ``component``'s chart may write; none for one unknown."""
    known = BY_NAME.get(component)
    return known.crd_groups if known is not None else frozenset()


def version_priority(name: str) -> tuple[int, int, int]:
    """An API version's place in Kubernetes' order: the greater, the newer."""
    match = _KUBE_VERSION.match(name)
    if match is None:
        return (0, 0, 0)
    major, level, minor = match.groups()
    return (_STABILITY[level], int(major), int(minor or 0))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _meta(body: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return _mapping(_mapping(body.get("metadata")).get(key))


def _newest_served(crd: Mapping[str, Any]) -> str | None:
    versions = _mapping(crd.get("spec")).get("versions")
    if not isinstance(versions, list):
        return None
    served = [
        str(v["name"])
        for v in versions
        if isinstance(v, Mapping) and v.get("name") and v.get("served", True)
    ]
    return max(served, key=version_priority, default=None)


def _annotated_version(value: Any) -> Version | None:
    if not isinstance(value, str) or len(value) > _MAX_VERSION:
        return None
    return parse_version(value)


def downgrade(desired: Mapping[str, Any], live: Mapping[str, Any]) -> str | None:
    """Why writing ``desired`` over ``live`` would take its schema back; None when it would not.

    A downgrade is either of:
    - the newest API version ``live`` serves, by Kubernetes' version
      priority, is newer than the newest ``desired`` serves (v1 served,
      the chart's newest is v1beta1). Dropping an older version, as
      upstreams do once v1 is out, is not one;
    - the first of ``VERSION_ANNOTATIONS`` both carry, each a version, is
      older in ``desired``. Equal there, a later annotation is not asked:
      the same bundle regenerated is not older.
    """
    have, want = _newest_served(live), _newest_served(desired)
    if have is not None and want is not None and version_priority(have) > version_priority(want):
        return f"it serves {have}, and the chart's newest version is {want}"
    have_notes, want_notes = _meta(live, "annotations"), _meta(desired, "annotations")
    for note in VERSION_ANNOTATIONS:
        live_version = _annotated_version(have_notes.get(note))
        desired_version = _annotated_version(want_notes.get(note))
        if live_version is None or desired_version is None:
            continue
        if desired_version < live_version:
            return f"its {note} is {live_version}, and the chart's is {desired_version}"
        return None
    return None


def other_owner(live: Mapping[str, Any], release: str) -> str | None:
    """Who, other than ``release``, the live CRD is said to be managed by; None when it is ours."""
    labels = _meta(live, "labels")
    if labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(CHART_CRDS_LABEL) == release:
        return None
    managed = _mapping(live.get("metadata")).get("managedFields")
    if not isinstance(managed, list):
        managed = []
    # The API server's own status writes (Established, NamesAccepted) say nothing of an owner.
    managers = sorted(
        {
            str(m["manager"])
            for m in managed
            if isinstance(m, Mapping) and m.get("manager") and m.get("subresource") != "status"
        }
    )
    if labels.get(CHART_CRDS_LABEL):
        return f"release {labels[CHART_CRDS_LABEL]}'s crds/"
    if labels.get(MANAGED_BY_LABEL):
        return f"{MANAGED_BY_LABEL}={labels[MANAGED_BY_LABEL]}"
    return f"written by {', '.join(managers)}" if managers else "not labelled as the product's"


def _refused(name: str, why: str) -> CrdChange:
    return CrdChange(name, CrdAction.REFUSE, refusal=why)


def foreign(desired: Mapping[str, Any], release: str, groups: frozenset[str]) -> CrdChange | None:
    """The refusal of a CRD outside ``groups``, or not named ``<plural>.<group>``; else None.

    Decided before the cluster is asked anything: the name is only used in a
    GET once it is the API server's own form of one of the component's CRDs.
    """
    name = str(desired["metadata"]["name"])
    spec = _mapping(desired.get("spec"))
    group = spec.get("group")
    if group in groups and name == f"{_mapping(spec.get('names')).get('plural')}.{group}":
        return None
    allowed = ", ".join(sorted(groups)) or "none"
    return _refused(
        name,
        f"CRD {name} is of API group {group}, which the catalog does not name for "
        f"release {release} (it may write {allowed}): some other project's CRD, "
        "not applied",
    )


def chart_crd_change(
    desired: Mapping[str, Any],
    live: Mapping[str, Any] | None,
    release: str,
    groups: frozenset[str],
) -> CrdChange:
    """What bringing ``live`` to ``desired``, from ``release``'s chart, takes; or why it may not."""
    outside = foreign(desired, release, groups)
    if outside is not None:
        return outside
    name = str(desired["metadata"]["name"])
    if live is None:
        return crd_change(desired, live)
    owner = other_owner(live, release)
    if owner is not None:
        return _refused(
            name,
            f"CRD {name} exists and is not release {release}'s ({owner}): it is left as it "
            f"is. If it is the one {release} should keep up to date, label it "
            f"{MANAGED_BY_LABEL}={MANAGED_BY} {CHART_CRDS_LABEL}={release} to hand it over; "
            "else install the component yourself (Provided mode)",
        )
    change = crd_change(desired, live)
    if change.action is not CrdAction.UPDATE:
        return change
    older = downgrade(desired, live)
    if older is not None:
        return _refused(
            name,
            f"CRD {name} on the cluster is newer than the chart's ({older}): it is not "
            "downgraded. Pin a version whose CRDs are at least as new, or apply the older "
            "CRD yourself if that is what you want",
        )
    return change
