"""The seed of a Managed target for the simulated fleet: a real install, dumped.

A Managed Standard stack is installed once, for real: a real kube-apiserver
as its target, another as its hub, the fixture charts served on loopback
(tests/integration/substrate.py, without workloads, as the Managed tests on a
bare API server use them) and the operator's own ``modelplane run`` with its
helm, until the stack is Ready. The operator is then stopped and the target
dumped as a Provided target's seed is (``tests.testenv.fleet.dump``): every
release's Secrets (``sh.helm.release.v1.<name>.v<rev>``), the objects of each
stored manifest, the release namespaces, the CRDs the charts brought.

Every simulated target then serves a copy of that state. A copy is not a
forgery to the operator: its record of a release (``status.releases``) is a
revision and the digest of the stored manifest and hooks
(``plan.release_trust``), nothing that names the cluster or the stack, so a
stack with no record yet takes the copy's newest revision as found
(``Unrecorded``) and a later reconcile finds it ``Verified``. Left out:

- the claim (the Lease ``modelplane-claim``), which names the seeding
  stack's hub UID: every fleet target's stack claims its target itself, as
  a Provided one does;
- the Events (``LEFT_OUT``), the API server's own noise.

With ``crds`` (``real_crds()``) the seed carries the upstream CRDs, as an
install of the real charts would: each CRD the fixture charts brought is
replaced by its upstream namesake, the operator's digest kept on it
(``tests.testenv.kube.replace_crds``), and the upstream CRDs they did not
bring are added; the operator is then run over it again, to restore what
the new schemas read differently, as an install with them would have
written it. The upstream Gateway CRDs default a Gateway's status to
"Waiting for controller", which the fixture's did not, so the seed's
Gateways and GatewayClasses are then given what Envoy Gateway would write
(``program_gateways``): there is no controller on a copy.

What a copy cannot carry: its objects' UIDs and creation times are the
seed's on every target, which the operator does not read for a release.

``managed_spec`` is the spec the seed was installed with: a fleet stack must
ask for the same, or it asks for an upgrade.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Namespace
from tests.testenv.env import TestEnv
from tests.testenv.fleet import dump, healthy_target, wait_for_discovery
from tests.testenv.kube import replace_crds

from modelplane.api.models import API_GROUP, API_VERSION, PLURAL
from modelplane.catalog.configuration import GATEWAY_CLASSES, GATEWAYS

if TYPE_CHECKING:
    from tests.integration.substrate import Substrate

CLAIM = ("coordination.k8s.io/v1/leases", "modelplane-system", "modelplane-claim")
SEED_NAMESPACE = "seed"
SEED_STACK = "seed"
MERGE = {"Content-Type": "application/merge-patch+json"}


def managed_spec(secret: str) -> dict[str, Any]:
    """A Managed Standard stack's spec, reaching its target through ``secret``."""
    return {
        "components": "Managed",
        "secrets": [{"type": "Kubeconfig", "name": secret, "key": "kubeconfig"}],
    }


def without_claim(seed: dict[str, Any]) -> dict[str, Any]:
    """``seed`` without the claim Lease: it names the seeding stack, not a fleet one."""

    def is_claim(o: dict[str, Any]) -> bool:
        meta = o["object"].get("metadata") or {}
        return (o["resource"], meta.get("namespace"), meta.get("name")) == CLAIM

    return {**seed, "objects": [o for o in seed["objects"] if not is_claim(o)]}


def _install(hub: TestEnv, target: TestEnv, substrate: Substrate, log: Path) -> None:
    """Run the operator over one Managed stack on ``target`` until it is Ready, then stop it.

    The stack's status is dropped first, so a second run waits for a Ready
    of its own, not the first run's.
    """
    from tests.integration.hubs import (
        SS,
        install_servingstack_crd,
        put_kubeconfig,
        stack_body,
    )
    from tests.integration.substrate import run_operator
    from tests.waiting import wait_for

    hub_client = Client(KubeConfig.from_dict(hub.kubeconfig), field_manager="seed")
    install_servingstack_crd(hub_client, hub, deadline=60)
    hub_client.apply(Namespace.from_dict({"metadata": {"name": SEED_NAMESPACE}}))
    put_kubeconfig(hub_client, SEED_NAMESPACE, target.kubeconfig, name=SEED_STACK)
    body = stack_body(SEED_NAMESPACE, SEED_STACK, managed_spec(SEED_STACK), secret=SEED_STACK)
    hub_client.apply(SS.from_dict(body), field_manager="seed", force=True)
    with hub.http_client() as http:
        dropped = http.patch(
            f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{SEED_NAMESPACE}/{PLURAL}/{SEED_STACK}/status",
            json={"status": None},
            headers=MERGE,
        )
        dropped.raise_for_status()
    proc = run_operator(hub.kubeconfig_path, substrate, SEED_NAMESPACE, log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("the operator exited: " + log.read_text()[-3000:])
        return _ready(hub_client.get(SS, SEED_STACK, namespace=SEED_NAMESPACE).to_dict())

    try:
        wait_for(
            "the seed's Managed stack Ready",
            ready,
            deadline=600,
            detail=lambda: log.read_text()[-3000:],
        )
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def program_gateways(target: TestEnv) -> None:
    """Mark ``target``'s Gateways and GatewayClasses Accepted, Programmed, as a controller would."""
    now = "2026-01-01T00:00:00Z"

    def conditions(kinds: tuple[str, ...], generation: int) -> list[dict[str, Any]]:
        return [
            {
                "type": kind,
                "status": "True",
                "reason": kind,
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": now,
            }
            for kind in kinds
        ]

    with target.http_client() as http:
        for api, kinds in (
            (GATEWAY_CLASSES, ("Accepted",)),
            (GATEWAYS, ("Accepted", "Programmed")),
        ):
            root = f"/apis/{api.group_version}/"
            listed = http.get(root + api.resource)
            listed.raise_for_status()
            for item in listed.json().get("items") or []:
                meta = item["metadata"]
                where = f"namespaces/{meta['namespace']}/" if meta.get("namespace") else ""
                body = {"status": {"conditions": conditions(kinds, meta.get("generation", 1))}}
                answer = http.patch(
                    f"{root}{where}{api.resource}/{meta['name']}/status", json=body, headers=MERGE
                )
                answer.raise_for_status()


def _ready(stack: dict[str, Any]) -> bool:
    conditions = (stack.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def write_managed_seed(
    path: Path, work: Path, substrate: Substrate, crds: Sequence[Path] = ()
) -> Path:
    """A Managed target's seed, installed for real under ``work``, written to ``path``.

    ``crds``: folders of the upstream CRDs the seed carries instead of the
    fixture charts' ones, once the install is done.

    Installed from ``substrate``: the operators the fleet is measured with
    must be given the same chart repository and manifests URLs, for the
    digest of the GAIE manifests the operator applies is of their URL
    (``plan.applied.manifests_digest``); from another one it applies them
    again, three CRD writes a target, as it would on a real cluster.
    """
    hub, target = TestEnv(work / "seed-hub"), TestEnv(work / "seed-managed-target")
    hub.start()
    try:
        target.start()
        try:
            client = Client(KubeConfig.from_dict(target.kubeconfig), field_manager="seed")
            # The GPU nodes only: the CRDs and the DeviceClass are the charts' to bring.
            healthy_target(client, substrate=False)
            _install(hub, target, substrate, work / "seed-operator.log")
            if crds:
                replace_crds(target, crds)
                program_gateways(target)
                # What the new schemas read differently (defaults, fields the
                # fixture's pruned) the operator restores once, as it would
                # have at install on a real cluster: the copy is of after.
                _install(hub, target, substrate, work / "seed-operator-crds.log")
            wait_for_discovery(target)
            path.write_text(json.dumps(without_claim(dump(target))))
        finally:
            target.stop()
    finally:
        hub.stop()
    return path
