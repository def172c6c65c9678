"""``chart_crd_change``: a chart's crds/ writes only its component's groups, never another
owner's CRD, and never takes one back to an older schema."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.catalog.components import BY_NAME
from modelplane.plan.chart_crds import (
    chart_crd_change,
    crd_groups,
    downgrade,
    foreign,
    other_owner,
    version_priority,
)
from modelplane.plan.crds import CHART_CRDS_LABEL, CrdAction, chart_crds
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

RELEASE = "mp-lws"
GROUPS = frozenset({"leaderworkerset.x-k8s.io"})
NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
OURS = {MANAGED_BY_LABEL: MANAGED_BY, CHART_CRDS_LABEL: RELEASE}
GEN = "controller-gen.kubebuilder.io/version"
BUNDLE = "gateway.networking.k8s.io/bundle-version"


def _crd(
    *versions: str,
    group: str = "leaderworkerset.x-k8s.io",
    plural: str = "leaderworkersets",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    managers: tuple[str, ...] = (),
    stored: tuple[str, ...] = (),
    served: dict[str, bool] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    if managers:
        metadata["managedFields"] = [{"manager": m, "operation": "Apply"} for m in managers]
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "names": {"plural": plural},
            "versions": [
                {"name": v, "served": (served or {}).get(v, True), "storage": i == 0}
                for i, v in enumerate(versions or ("v1",))
            ],
        },
    }
    if stored:
        body["status"] = {"storedVersions": list(stored)}
    return body


def _desired(*versions: str, **kw: Any) -> dict[str, Any]:
    (out,) = chart_crds([_crd(*versions, **kw)], RELEASE)
    return out


@pytest.mark.parametrize(
    ("desired", "live", "action", "says"),
    [
        pytest.param(_desired(), None, CrdAction.CREATE, "", id="absent: create"),
        pytest.param(
            _desired(),
            _crd(labels=OURS, stored=("v1",)),
            CrdAction.UPDATE,
            "",
            id="the release's own: update",
        ),
        pytest.param(_desired(), _desired(), CrdAction.UNCHANGED, "", id="at our digest"),
        pytest.param(
            _desired(group="argoproj.io", plural="applications"),
            None,
            CrdAction.REFUSE,
            "API group argoproj.io, which the catalog does not name",
            id="another project's group, absent",
        ),
        pytest.param(
            _desired(group="argoproj.io", plural="applications"),
            _crd(group="argoproj.io", plural="applications", managers=("argocd",)),
            CrdAction.REFUSE,
            "API group argoproj.io",
            id="another project's group, present",
        ),
        pytest.param(
            {**_desired(), "metadata": {"name": "secrets"}},
            None,
            CrdAction.REFUSE,
            "which the catalog does not name",
            id="a name not plural.group",
        ),
        pytest.param(
            _desired(),
            _crd(managers=("kubectl-client-side-apply",), stored=("v1",)),
            CrdAction.REFUSE,
            "not release mp-lws's (written by kubectl-client-side-apply)",
            id="the cluster owner's",
        ),
        pytest.param(
            _desired(),
            _crd(labels={CHART_CRDS_LABEL: "mp-other"}, stored=("v1",)),
            CrdAction.REFUSE,
            "release mp-other's crds/",
            id="another release's",
        ),
        pytest.param(
            _desired(),
            _crd(labels={MANAGED_BY_LABEL: "Helm"}, stored=("v1",)),
            CrdAction.REFUSE,
            "app.kubernetes.io/managed-by=Helm",
            id="a Helm release's template",
        ),
        pytest.param(
            _desired(),
            _crd(labels={CHART_CRDS_LABEL: RELEASE}, stored=("v1",)),
            CrdAction.REFUSE,
            "is not release mp-lws's",
            id="our release label without our managed-by",
        ),
        pytest.param(
            _desired(annotations={GEN: "v0.16.0"}),
            _crd(labels=OURS, annotations={GEN: "v0.17.2"}, stored=("v1",)),
            CrdAction.REFUSE,
            "controller-gen.kubebuilder.io/version is v0.17.2, and the chart's is v0.16.0",
            id="older generator: downgrade",
        ),
        pytest.param(
            _desired(annotations={GEN: "v0.17.2"}),
            _crd(labels=OURS, annotations={GEN: "v0.16.0"}, stored=("v1",)),
            CrdAction.UPDATE,
            "",
            id="newer generator: update",
        ),
        pytest.param(
            _desired("v1alpha1"),
            _crd("v1alpha1", "v1beta1", labels=OURS, stored=("v1alpha1",)),
            CrdAction.REFUSE,
            "it serves v1beta1, and the chart's newest version is v1alpha1",
            id="newest served version dropped: downgrade",
        ),
        pytest.param(
            _desired("v1"),
            _crd("v1", "v1beta1", labels=OURS, stored=("v1",)),
            CrdAction.UPDATE,
            "no longer serves v1beta1",
            id="an older served version dropped: update, named",
        ),
        pytest.param(
            _desired("v1", "v1beta1", served={"v1": False}),
            _crd("v1", "v1beta1", labels=OURS, stored=("v1",)),
            CrdAction.REFUSE,
            "it serves v1",
            id="newest version no longer served: downgrade",
        ),
        pytest.param(
            _desired("v1beta1"),
            _crd("v1", labels=OURS, stored=("v1",)),
            CrdAction.REFUSE,
            "still stores objects at v1",
            id="a stored version dropped: crd_change's refusal",
        ),
    ],
)
def test_chart_crd_change(
    desired: dict[str, Any], live: dict[str, Any] | None, action: CrdAction, says: str
) -> None:
    change = chart_crd_change(desired, live, RELEASE, GROUPS)
    assert change.action is action
    assert says in change.message


@pytest.mark.parametrize(
    ("desired", "live", "older"),
    [
        pytest.param({BUNDLE: "v1.4.0"}, {BUNDLE: "v1.5.1"}, True, id="older bundle"),
        pytest.param({BUNDLE: "v1.5.1"}, {BUNDLE: "v1.5.1"}, False, id="same bundle"),
        pytest.param(
            {BUNDLE: "v1.5.1", GEN: "v0.16.0"},
            {BUNDLE: "v1.5.1", GEN: "v0.17.0"},
            False,
            id="same bundle decides before the generator",
        ),
        pytest.param(
            {BUNDLE: "v1.6.0", GEN: "v0.16.0"},
            {BUNDLE: "v1.5.1", GEN: "v0.17.0"},
            False,
            id="newer bundle, older generator",
        ),
        pytest.param(
            {"operator.prometheus.io/version": "0.89.0"},
            {"operator.prometheus.io/version": "0.90.1"},
            True,
            id="older prometheus-operator",
        ),
        pytest.param({GEN: "v0.16.0"}, {}, False, id="the live one says nothing"),
        pytest.param({GEN: "unknown"}, {GEN: "v0.17.0"}, False, id="not a version"),
        pytest.param({BUNDLE: "v1.5.1-rc.1"}, {BUNDLE: "v1.5.1"}, True, id="a pre-release"),
        pytest.param({GEN: "v" + "9" * 5000}, {GEN: "v0.17.0"}, False, id="too long to be one"),
        pytest.param({GEN: "v0.1.0"}, {GEN: 17}, False, id="not text"),
    ],
)
def test_a_version_annotation_downgrade(
    desired: dict[str, Any], live: dict[str, Any], older: bool
) -> None:
    found = downgrade(_crd(annotations=desired), _crd(annotations=live))
    assert (found is not None) is older


@pytest.mark.parametrize(
    ("newer", "older"),
    [
        ("v1", "v1beta2"),
        ("v2", "v1"),
        ("v1beta2", "v1beta1"),
        ("v1beta1", "v1alpha3"),
        ("v2beta1", "v1beta3"),
        ("v1alpha1", "foo1"),
        ("v1alpha1", "v" + "9" * 5000),
    ],
)
def test_kubernetes_version_priority(newer: str, older: str) -> None:
    assert version_priority(newer) > version_priority(older)


@pytest.mark.parametrize(
    "spec",
    [{"versions": "v1"}, "not an object", {"versions": [7, {"served": True}]}],
    ids=["versions not a list", "spec not an object", "versions without names"],
)
def test_a_malformed_crd_is_not_called_a_downgrade(spec: Any) -> None:
    assert downgrade({**_crd(), "spec": spec}, _crd()) is None


def test_the_release_owns_only_what_it_labelled() -> None:
    assert other_owner(_crd(labels=OURS), RELEASE) is None
    assert other_owner(_crd(labels=OURS), "mp-grove-charts") == "release mp-lws's crds/"
    assert other_owner(_crd(), RELEASE) == "not labelled as the product's"


def test_another_owners_crd_says_how_to_hand_it_over() -> None:
    change = chart_crd_change(_desired(), _crd(managers=("argocd",)), RELEASE, GROUPS)
    assert f"{MANAGED_BY_LABEL}={MANAGED_BY} {CHART_CRDS_LABEL}={RELEASE}" in change.message
    assert "Provided mode" in change.message


def test_foreign_is_decided_without_the_cluster() -> None:
    assert foreign(_desired(), RELEASE, GROUPS) is None
    assert foreign(_desired(), RELEASE, frozenset()) is not None


@pytest.mark.parametrize(
    ("component", "groups"),
    [
        ("leader-worker-set", {"leaderworkerset.x-k8s.io"}),
        ("kai-scheduler", {"scheduling.run.ai", "kai.scheduler"}),
        ("grove", {"grove.io", "scheduler.grove.io"}),
        ("nvidia-dra-driver-gpu", {"resource.nvidia.com"}),
        (
            "envoy-gateway",
            {"gateway.envoyproxy.io", "gateway.networking.k8s.io", "gateway.networking.x-k8s.io"},
        ),
        ("no-such-component", set()),
    ],
)
def test_a_components_groups_come_from_the_catalog(component: str, groups: set[str]) -> None:
    assert crd_groups(component) == groups
    if component in BY_NAME:
        assert BY_NAME[component].crd_groups == groups
