"""A Managed install onto a simulated cluster whose image mirror lacks one image, end to end.

The operator runs with ``--image-registry-mirror *=<loopback registry>``
(Debian's docker-registry, HTTPS with the test CA, htpasswd auth; see
tests/registry.py) and the pull Secret holding its credentials in each
namespace the stack pulls in. The mirror holds every image the fixture
charts and the product's objects run (one tiny image copied in under each
name and tag) but LeaderWorkerSet's: the operator installs the rest, never
installs the release that would run it, and names the image in Ready and an
event; once skopeo copies it in, the stack converges. ``modelplane diff``
with the same flags names that release and image first, and exits 1.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Event, Namespace, Secret
from tests.integration.hubs import Harness, stack_body
from tests.integration.substrate import Substrate
from tests.registry import LoopbackRegistry, loopback_registry, missing_tools
from tests.testenv import TestEnv, find_binaries
from tests.waiting import wait_for

from modelplane.api.models import ServingStack
from modelplane.catalog import components as catalog
from modelplane.plan import plan
from modelplane.plan.images import parse_rules
from modelplane.plan.mirror_images import release_lookups, to_look_up
from modelplane.plan.pull_secrets import component_namespaces
from modelplane.plan.sources import Sources

PULL_SECRET = "mirror-cred"
HELD = "leader-worker-set"
DEADLINE = 600


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackRegistry]:
    assert not missing_tools(), f"run hack/test-deps.sh: missing {missing_tools()}"
    with loopback_registry(tmp_path_factory.mktemp("registry")) as registry:
        yield registry


def _images(mirror: LoopbackRegistry, namespace: str) -> tuple[list[str], tuple[str, ...], str]:
    """Every image the stack runs from the mirror, the held release's images, and its name."""
    stack = ServingStack.model_validate(stack_body(namespace, "stack", {}))
    p = plan(stack, None, Sources(image_mirrors=parse_rules([f"*={mirror.host}"])))
    held = next(r for r in p.releases if r.component == HELD)
    return list(to_look_up(p.images)), release_lookups(held), held.name


def _put_pull_secret(target: Client, mirror: LoopbackRegistry) -> None:
    """The mirror's credentials wherever the stack's pods pull, as a cluster owner puts them."""
    config = base64.b64encode(json.dumps(mirror.docker_config()).encode()).decode()
    spaces = {
        ns
        for c in catalog.components_of_stack(catalog.Stack.STANDARD)
        for ns in (c.namespace, *component_namespaces(c))
        if ns
    }
    for ns in sorted(spaces):
        target.apply(Namespace.from_dict({"metadata": {"name": ns}}), field_manager="test")
        target.apply(
            Secret.from_dict(
                {
                    "metadata": {"name": PULL_SECRET, "namespace": ns},
                    "type": "kubernetes.io/dockerconfigjson",
                    "data": {".dockerconfigjson": config},
                }
            ),
            field_manager="test",
            force=True,
        )


def _diff(h: Harness, mirror: LoopbackRegistry) -> subprocess.CompletedProcess[str]:
    stack = h.tmp / "stack.yaml"
    stack.write_text(yaml.safe_dump(stack_body(h.ns, "stack", {})))
    return subprocess.run(
        [
            sys.executable, "-m", "modelplane.cli.main", "diff", "-f", str(stack),
            "--kubeconfig", str(h.target_env.kubeconfig_path),
            "--chart-repository", h.substrate.chart_repository,
            "--gaie-manifests-url", f"{h.substrate.manifests_base}/gaie-crds",
            "--manifests-url-for",
            f"modelexpress-crds={h.substrate.manifests_base}/modelexpress-crds",
            "--image-registry-mirror", f"*={mirror.host}", "--image-pull-secret", PULL_SECRET,
        ],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])},
    )  # fmt: skip


def _events(h: Harness, reason: str) -> list[str]:
    return [e.message or "" for e in h.hub.list(Event, namespace=h.ns) if e.reason == reason]


@pytest.fixture
def harness(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    mirror: LoopbackRegistry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Harness]:
    # The operator trusts the registry's CA as it would a private mirror's: by SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(mirror.ca))
    h = Harness(hub, hub_env, sim_nodes_target, workload_substrate, tmp_path, "mirror-install")
    try:
        yield h
        # The session's simulated cluster is the other modules' too.
        h.tear_down()
    finally:
        h.stop()


def test_a_missing_image_holds_its_release_and_the_stack_converges_once_copied(
    harness: Harness, mirror: LoopbackRegistry
) -> None:
    h = harness
    every, held_images, held_release = _images(mirror, h.ns)
    assert held_images, f"{HELD} runs no mirrored image"
    missing = held_images[0]
    for image in every:
        if image not in held_images:
            mirror.push(image.removeprefix(f"{mirror.host}/"))
    _put_pull_secret(h.target, mirror)
    # diff names the release the mirror lacks an image of, and only it.
    proc = _diff(h, mirror)
    assert proc.returncode == 1, proc.stderr
    said = [line for line in proc.stdout.splitlines() if line.startswith("mirror: ")]
    assert len(said) == 1 and held_release in said[0] and missing in said[0], proc.stdout

    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({})
    # require: a mirror the operator could not ask would hold every release,
    # so the others going in shows each lookup was answered, with credentials.
    h.start(
        "--image-registry-mirror", f"*={mirror.host}",
        "--image-pull-secret", PULL_SECRET,
        "--mirror-preflight", "require",
    )  # fmt: skip

    ready = h.wait_condition("Ready", "False", "ImageNotInMirror", deadline=DEADLINE)
    assert missing in ready["message"], ready
    assert any(missing in m for m in _events(h, "ImageNotInMirror"))
    wait_for(
        "the releases whose images are there installed",
        lambda: "mp-node-feature-discovery" in h.helm_releases(),
        deadline=DEADLINE,
    )
    assert held_release not in h.helm_releases()

    # Copied in: the held release goes in at its next try, and the stack converges.
    for image in held_images:
        mirror.push(image.removeprefix(f"{mirror.host}/"))
    h.wait_condition("Ready", "True", deadline=DEADLINE)
    assert held_release in h.helm_releases()
