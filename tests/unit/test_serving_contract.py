"""The substrate contract in both modes: the Gateway programmed, the Bundle synced, the GPUs.

The rules are the plan's (``plan.gateway``, ``plan.capacity``); the status
only reports them. Managed mode: a Gateway its controller says is not
programmed makes Ready False. Provided mode: the same finding is an
advisory, observed and reported, and Ready does not follow it.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from modelplane.api.models import ServingStack
from modelplane.api.status_limits import GATEWAY_MESSAGE, string_limit
from modelplane.catalog.configuration import CLUSTER_CA, GATEWAY_NAME, NS
from modelplane.catalog.facts import ClusterFacts, ObservedNode
from modelplane.observe.state import Listed, to_observed
from modelplane.operator.status import GPUS_AVAILABLE, READY, Outcome, bounded, desired_status
from modelplane.plan import Observed, plan
from modelplane.plan.capacity import DeviceGroup, TargetSummary
from modelplane.plan.findings import GATEWAY_TITLE
from modelplane.plan.gateway import GATEWAY_NOT_PROGRAMMED, bundle_finding, not_programmed
from modelplane.plan.model import NotServing, RequirementStatus
from modelplane.plan.observed import ObservedCondition
from modelplane.wire import DIGEST_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL


def _stack(mode: str) -> ServingStack:
    return ServingStack.model_validate(
        yaml.safe_load(f"""
apiVersion: infrastructure.modelplane.ai/v1alpha1
kind: ServingStack
metadata: {{name: s, namespace: ns, generation: 3}}
spec:
  components: {mode}
  secrets: [{{type: Kubeconfig, name: k, key: kubeconfig}}]
""")
    )


def cond(type_: str, status: str, reason: str = "", message: str = "") -> ObservedCondition:
    return ObservedCondition(type=type_, status=status, reason=reason, message=message)


ACCEPTED = cond("Accepted", "True", "Accepted")
PROGRAMMED = cond("Programmed", "True", "Programmed")
NOT_PROGRAMMED = cond("Programmed", "False", "AddressNotAssigned", "no address yet")


@pytest.mark.parametrize(
    ("conditions", "says"),
    [
        ([], None),  # no controller has written, and the CRD defaulted nothing
        ([ACCEPTED, PROGRAMMED], None),
        ([ACCEPTED, NOT_PROGRAMMED], "is not programmed: Programmed is False (AddressNotAssigned)"),
        ([ACCEPTED], "is not programmed: it has no Programmed condition"),
        (
            [cond("Accepted", "False", "InvalidParameters", "bad class"), PROGRAMMED],
            "is not accepted: Accepted is False (InvalidParameters): bad class",
        ),
        # The upstream CRD's default: no controller yet, not serving yet.
        (
            [cond("Accepted", "Unknown", "Pending"), cond("Programmed", "Unknown", "Pending")],
            "is not accepted: Accepted is Unknown (Pending)",
        ),
        ([cond("Ready", "False")], None),  # not a condition a serving Gateway is judged by
    ],
)
def test_not_programmed(conditions: list[ObservedCondition], says: str | None) -> None:
    got = not_programmed(conditions)
    if says is None:
        assert got is None
    else:
        assert got is not None and says in got, got
        assert got.startswith(f"Gateway {NS}/{GATEWAY_NAME} ")


def test_a_controllers_message_is_bounded_and_made_printable() -> None:
    got = not_programmed([ACCEPTED, cond("Programmed", "False", "X", "\x1b[2J" + "m" * 99999)])
    assert got is not None and len(got) <= GATEWAY_MESSAGE and "\x1b" not in got


@pytest.mark.parametrize(
    ("conditions", "finding"),
    [
        ([], None),
        ([cond("Synced", "True")], True),
        ([cond("Synced", "False", "SourceNotFound", "no Secret")], False),
    ],
)
def test_bundle_finding(conditions: list[ObservedCondition], finding: bool | None) -> None:
    got = bundle_finding(conditions)
    assert (got[0] if got else None) is finding


@pytest.mark.parametrize(
    ("mode", "conditions", "not_serving", "advisory"),
    [
        ("Managed", [ACCEPTED, NOT_PROGRAMMED], GATEWAY_NOT_PROGRAMMED, None),
        ("Managed", [ACCEPTED, PROGRAMMED], None, None),
        ("Managed", [], None, None),
        # Provided: observed and reported, never Ready's business.
        ("Provided", [ACCEPTED, NOT_PROGRAMMED], None, RequirementStatus.WARNING),
        ("Provided", [ACCEPTED, PROGRAMMED], None, RequirementStatus.MET),
        ("Provided", [], None, None),
    ],
)
def test_ready_follows_the_gateway_in_managed_mode_only(
    mode: str,
    conditions: list[ObservedCondition],
    not_serving: str | None,
    advisory: RequirementStatus | None,
) -> None:
    p = plan(_stack(mode), Observed(gateway_conditions=conditions))
    assert (p.not_serving.reason if p.not_serving else None) == not_serving
    found = [r.status for r in p.requirements if r.requirement == GATEWAY_TITLE]
    assert found == ([advisory] if advisory else [])


def _served_plan(**update: Any) -> Any:
    # A plan with nothing left to do, as the status sees it.
    p = plan(_stack("Managed"))
    return p.model_copy(
        update={"work": [], "requirements": [r for r in p.requirements if r.status == "met"]}
        | update
    )


def test_ready_says_the_gateway_is_not_programmed_once_nothing_is_left_to_do() -> None:
    problem = NotServing(reason=GATEWAY_NOT_PROGRAMMED, message="Gateway x is not programmed")
    ready = {
        c["type"]: c
        for c in desired_status(Outcome(plan=_served_plan(not_serving=problem)), 3)["conditions"]
    }[READY]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        GATEWAY_NOT_PROGRAMMED,
        "Gateway x is not programmed",
    )
    ok = {c["type"]: c for c in desired_status(Outcome(plan=_served_plan()), 3)["conditions"]}
    assert ok[READY]["status"] == "True"
    # Work left still reads as progress, whatever the Gateway says.
    busy = plan(_stack("Managed")).model_copy(update={"not_serving": problem})
    progressing = {c["type"]: c for c in desired_status(Outcome(plan=busy), 3)["conditions"]}
    assert progressing[READY]["reason"] == "Progressing"


GPU_NODE = ObservedNode(
    name="g0", labels={"feature.node.kubernetes.io/pci-0302_10de.present": "true"}
)
H200 = TargetSummary(
    kubernetes_version="v1.34.2",
    gpu_nodes=2,
    gpus=2,
    devices=[
        DeviceGroup(
            product="NVIDIA H200", count=2, memory="143771Mi", driver_version="570.1.0", nodes=2
        )
    ],
)


@pytest.mark.parametrize(
    ("cluster", "target", "status", "reason"),
    [
        (None, None, None, None),  # not read: no condition at all
        (ClusterFacts(nodes=[], resource_slices={}), TargetSummary(), "Unknown", "NoGPUNodes"),
        (
            ClusterFacts(nodes=[GPU_NODE], resource_slices={"gpu.nvidia.com": ["g0"]}),
            H200,
            "True",
            "GPUsPublished",
        ),
        (
            ClusterFacts(nodes=[GPU_NODE], resource_slices={}),
            TargetSummary(gpu_nodes=1),
            "False",
            "ResourceSlicesMissing",
        ),
    ],
)
def test_gpus_available_and_status_target_in_both_modes(
    cluster: ClusterFacts | None,
    target: TargetSummary | None,
    status: str | None,
    reason: str | None,
) -> None:
    for mode in ("Managed", "Provided"):
        p = plan(_stack(mode), Observed(cluster=cluster, target=target))
        out = desired_status(Outcome(plan=p), 3)
        gpus = {c["type"]: c for c in out["conditions"]}.get(GPUS_AVAILABLE)
        got = (gpus["status"], gpus["reason"]) if gpus else (None, None)
        assert got == (status, reason), (mode, gpus)
        if status == "True":
            assert gpus is not None and gpus["message"].startswith("2 GPUs on 2 nodes: NVIDIA H200")
        assert out.get("target") == (target.model_dump(by_alias=True) if target else None)


def test_status_target_is_cut_to_the_crds_limits() -> None:
    long = TargetSummary.model_construct(
        kubernetes_version="v" * 999,
        gpus=1,
        devices=[DeviceGroup.model_construct(product="\x1b" + "p" * 999, count=1, nodes=1)],
    )
    out = bounded({"target": long.model_dump(by_alias=True)})
    assert len(out["target"]["kubernetesVersion"]) <= string_limit("target.kubernetesVersion")
    product = out["target"]["devices"][0]["product"]
    assert len(product) <= string_limit("target.devices[].product") and "\x1b" not in product


def _object(api_version: str, kind: str, name: str, namespace: str | None, status: Any) -> Any:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "annotations": {DIGEST_ANNOTATION: "d"},
    }
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "status": status}


def test_conditions_are_read_only_from_the_products_gateway_and_bundle() -> None:
    programmed = {"conditions": [{"type": "Programmed", "status": "False", "reason": "R"}]}
    synced = {"conditions": [{"type": "Synced", "status": "True"}, "junk", {"type": 3}]}
    listed = Listed(
        apis={},
        items={
            ("gateway.networking.k8s.io/v1", "Gateway"): [
                _object("", "", "tenant", "tenant-a", {"conditions": [{"type": "Programmed"}]}),
                _object("", "", GATEWAY_NAME, NS, programmed),
            ],
            ("trust.cert-manager.io/v1alpha1", "Bundle"): [
                _object("", "", CLUSTER_CA, None, synced)
            ],
        },
    )
    observed = to_observed(listed)
    assert observed.gateway_conditions == [cond("Programmed", "False", "R")]
    assert observed.bundle_conditions == [cond("Synced", "True")]
