"""The ServingStack's status: what the operator last saw and did on its target."""

from __future__ import annotations

from pydantic import Field

from modelplane.api.base import ApiModel
from modelplane.catalog.types import DisruptionClass
from modelplane.pins import ComponentsMode


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str
    status: str
    reason: str
    message: str
    observed_generation: int | None = None
    last_transition_time: str | None = None


class ComponentStatus(ApiModel):
    name: str
    mode: ComponentsMode
    version: str | None = Field(default=None, description="The desired version.")
    installed_version: str | None = Field(
        default=None,
        description="The version installed on the target; differs from version while an "
        "upgrade waits for the rollout or runs.",
    )
    state: str
    message: str = ""


class RolloutStatus(ApiModel):
    """This stack's place in the fleet's staged rollout of upgrades (plan.rollout)."""

    phase: str = Field(description="UpToDate, Pending, Upgrading, Failed or Resumed.")
    started_at: str | None = Field(default=None, description="When its upgrade started.")
    paused_by: str | None = Field(
        default=None, description="The stack whose failed upgrade pauses the rollout."
    )
    disruption: list[DisruptionClass] = Field(
        default_factory=list,
        description="What its upgrade disrupts, by the disruption class of each part of the "
        "components it upgrades, the most disruptive first: NodeAgent, Traffic, Scheduler, "
        "Control. Set while the stack is behind its desired versions.",
    )


class GatewayStatus(ApiModel):
    address: str | None = Field(
        default=None,
        max_length=256,
        description="The gateway's external address, once assigned.",
    )
    ca_certificate: str | None = Field(
        default=None,
        max_length=16384,
        description="PEM certificate of the CA that signed this gateway's serving certificate.",
    )


class DeviceGroupStatus(ApiModel):
    product: str = Field(description="The GPU's product name, as the DRA driver publishes it.")
    count: int = Field(ge=0, description="GPUs of this product, memory and driver version.")
    memory: str = Field(default="", description="Memory per GPU, a quantity (81559Mi).")
    driver_version: str = Field(default="", description="The NVIDIA driver version.")
    nodes: int = Field(ge=0, description="Nodes that have them.")


class TargetStatus(ApiModel):
    """What the target cluster offers, as last read (plan.capacity.summarize_target)."""

    kubernetes_version: str = Field(default="", description="The target's GET /version.")
    gpu_nodes: int = Field(default=0, ge=0, description="Nodes with any sign of a GPU.")
    gpus: int = Field(
        default=0, ge=0, description="GPU devices the DRA driver publishes in ResourceSlices."
    )
    devices: list[DeviceGroupStatus] = Field(
        default_factory=list, description="The GPUs by product, most numerous first."
    )
    other_devices: int = Field(
        default=0, ge=0, description="GPUs of the products left out of devices."
    )


class ReleaseRecord(ApiModel):
    """One Helm release as the operator last wrote it: what its target storage must hold.

    Helm keeps a release in Secrets of the release's namespace on the target,
    where a tenant may write; this record is kept on the hub, where only the
    operator writes a stack's status (plan.release_trust).
    """

    name: str = Field(description="The Helm release.")
    namespace: str = Field(description="The release's namespace on the target.")
    revision: int = Field(ge=1, description="The revision the operator's helm run wrote.")
    manifest_digest: str = Field(
        description="sha256 of the revision's manifest and hooks, as helm wrote them."
    )


class ServingStackStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    components: list[ComponentStatus] = Field(default_factory=list)
    gateway: GatewayStatus | None = None
    image_mirrors: list[str] = Field(
        default_factory=list,
        description="The image mirror rules in force (FROM=TO), as the operator was given them.",
    )
    target: TargetStatus | None = None
    rollout: RolloutStatus | None = None
    releases: list[ReleaseRecord] = Field(
        default_factory=list,
        description="Managed mode: the revision of each release the operator last wrote, and "
        "its manifest's digest; a revision on the target that differs is not trusted.",
    )
