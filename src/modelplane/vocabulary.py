"""Every word the product writes to a ServingStack: condition types, their reasons, event reasons.

Users match on these (``kubectl wait --for=condition=Ready``, alert rules on
an event's reason, a script reading ``status.conditions[].reason``), so a
value, once shipped, stays. Each set is a ``StrEnum``: a member is the
string on the wire, and compares equal to it. No writer spells one out as
a literal (``tests/unit/test_vocabulary.py`` reads ``src/`` to hold it so),
and ``docs/status.md`` lists exactly these (the same test checks it).

The bottom layer: it imports nothing of the product, so every layer may
name what it writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class ConditionType(StrEnum):
    """The conditions of ``status.conditions``."""

    READY = "Ready"
    # kstatus's pair beside Ready, abnormal-true (plan.progress): True while
    # work is in progress, or while the stack is blocked for good.
    # https://github.com/kubernetes-sigs/cli-utils/blob/master/pkg/kstatus/README.md
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    REQUIREMENTS_MET = "RequirementsMet"
    VERSIONS_SUPPORTED = "VersionsSupported"
    # Whether the target's serving certificate is checked on every connection.
    TARGET_VERIFIED = "TargetVerified"
    # Whether the target publishes GPUs (plan.capacity.gpus_available); never stops Ready.
    GPUS_AVAILABLE = "GPUsAvailable"
    # The stack's place in the fleet's staged rollout (plan.rollout).
    UP_TO_DATE = "UpToDate"
    # Whether status.gateway.caCertificate holds the gateway's CA; only once a CA is found.
    CA_CERTIFICATE_PUBLISHED = "CACertificatePublished"
    # Whether every --image-pull-secret Secret exists where the pods that name it run.
    PULL_SECRETS_PRESENT = "PullSecretsPresent"
    # While the stack is deleted: what teardown waits for, or what stops it.
    TEARDOWN = "Teardown"


# ---- reasons of conditions -------------------------------------------------------------


class BlockedReason(StrEnum):
    """Why Ready (or Teardown) is False: the round stopped, or an action failed."""

    INVALID_SPEC = "InvalidSpec"
    TARGET_CLAIMED = "TargetClaimed"
    CLAIM_CONTENDED = "ClaimContended"
    TARGET_UNREACHABLE = "TargetUnreachable"
    TARGET_UNAUTHORIZED = "TargetUnauthorized"
    # A write into a namespace the target is deleting: a wait until it is gone.
    TARGET_NAMESPACE_TERMINATING = "TargetNamespaceTerminating"
    TARGET_ERROR = "TargetError"
    # A collection on the target past the budget the operator reads of one.
    TARGET_COLLECTION_TOO_LARGE = "TargetCollectionTooLarge"
    TARGET_ADDRESS_DENIED = "TargetAddressDenied"
    WEBHOOK_NOT_READY = "WebhookNotReady"
    ACTION_FAILED = "ActionFailed"
    HELM_FAILED = "HelmFailed"
    RECONCILE_ERROR = "ReconcileError"
    TEARDOWN_ERROR = "TeardownError"
    # A release's storage on the target is not the operator's: not uninstalled.
    RELEASE_STORAGE_TAMPERED = "ReleaseStorageTampered"
    # The hub refused the status the operator wrote (it writes Ready alone).
    STATUS_REFUSED = "StatusRefused"
    # The credentials' own reasons (modelplane.credentials.connect).
    SECRET_NOT_FOUND = "SecretNotFound"
    SECRET_KEY_MISSING = "SecretKeyMissing"
    HUB_FORBIDDEN = "HubForbidden"
    KUBECONFIG_INVALID = "KubeconfigInvalid"
    KUBECONFIG_REFUSED = "KubeconfigRefused"
    CROSS_NAMESPACE_REF_DENIED = "CrossNamespaceRefDenied"
    CLOUD_IDENTITY_UNSUPPORTED = "CloudIdentityUnsupported"
    # A cloud identity's (IdentityFailure, below).
    IDENTITY_INVALID = "IdentityInvalid"
    IDENTITY_REJECTED = "IdentityRejected"
    IDENTITY_UNREACHABLE = "IdentityUnreachable"
    # The mirror preflight (--mirror-preflight): an image a release would run
    # is not in the image mirror, so the release is not installed or upgraded.
    IMAGE_NOT_IN_MIRROR = "ImageNotInMirror"
    # The mirror could not be asked (no answer, or credentials refused), and
    # --mirror-preflight=require holds the release until it can.
    MIRROR_UNREACHABLE = "MirrorUnreachable"
    # A release held back before any write: the target runs what it would
    # clash with (plan.conflicts). Stalled: a person removes or adopts it.
    CONFLICTS_FOUND = "ConflictsFound"
    # The DRA driver's release is not uninstalled (by teardown or a reinstall)
    # while pods hold claims it allocated, up to spec.claimWaitTimeout (plan.claims).
    CLAIMS_HELD = "ClaimsHeld"
    # A node agent's roll stopped at a node not served again in time
    # (plan.node_agents): the other nodes keep the old agent.
    NODE_AGENT_FAILED = "NodeAgentFailed"
    # Managed KAI did not bind its probe pod within the bound (plan.scheduler_probe).
    SCHEDULER_NOT_BINDING = "SchedulerNotBinding"


class IdentityFailure(StrEnum):
    """Why a cloud identity gave no token: the identity's own part of ``BlockedReason``."""

    # The Secret's data cannot be used: malformed JSON, a missing field, a bad key.
    INVALID = BlockedReason.IDENTITY_INVALID.value
    # The provider's token service answered and refused (revoked key, unknown role).
    REJECTED = BlockedReason.IDENTITY_REJECTED.value
    # The provider's token service could not be reached or answered nonsense.
    UNREACHABLE = BlockedReason.IDENTITY_UNREACHABLE.value


class ReadyReason(StrEnum):
    """Ready's reasons other than a blocked stack's or a workload's."""

    RECONCILED = "Reconciled"
    # Work left: a release to install or upgrade, an object waiting for its API.
    PROGRESSING = "Progressing"
    # Managed mode: the Gateway the product installed is not accepted or programmed.
    GATEWAY_NOT_PROGRAMMED = "GatewayNotProgrammed"
    # Nothing left but node agents rolled a node at a time (plan.node_agents).
    NODE_AGENTS_ROLLING = "NodeAgentsRolling"


class WorkloadReason(StrEnum):
    """Why a release's workload (and the component running it) is in its state (plan.health)."""

    AVAILABLE = "Available"
    # Short of its target, within the grace period.
    PROGRESSING = "Progressing"
    # Short of its target past the grace period, and no pod says why.
    WORKLOAD_UNAVAILABLE = "WorkloadUnavailable"
    # In the release's manifest, not on the target.
    WORKLOAD_MISSING = "WorkloadMissing"
    # Scaled to zero while the release asks for replicas.
    WORKLOAD_SCALED_DOWN = "WorkloadScaledDown"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    POD_CRASH_LOOPING = "PodCrashLooping"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    # CreateContainerConfigError and its kin: a ConfigMap, Secret or key missing.
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    UNSCHEDULABLE = "Unschedulable"
    JOB_FAILED = "JobFailed"
    # The release's stored revision installs a workload outside the release's
    # namespace: refused, none of its workloads judged or restored.
    RELEASE_OUTSIDE_NAMESPACE = "ReleaseOutsideNamespace"
    # The release's storage on the target is not what the operator wrote, and
    # cannot be made so: nothing of it is judged, restored, upgraded or
    # uninstalled (plan.release_trust).
    RELEASE_STORAGE_TAMPERED = BlockedReason.RELEASE_STORAGE_TAMPERED.value


class RequirementsReason(StrEnum):
    MET = "RequirementsMet"
    UNMET = "RequirementsUnmet"


class VersionsReason(StrEnum):
    IN_RANGE = "InRange"
    # A pin outside its supported range: accepted, and said.
    OUT_OF_RANGE = "OutOfRange"


class VerifiedReason(StrEnum):
    VERIFIED = "Verified"
    INSECURE_SKIP_TLS_VERIFY = "InsecureSkipTLSVerify"


class GpuCheck(StrEnum):
    """The advisories GPUsAvailable follows; each value is its reason when it fails.

    In the order a person fixes them: without NFD's labels the kubelet
    plugin never schedules; without the quota its pods are never created;
    a cordon or a maintenance taint keeps it (and new pods) off a node;
    without the plugin no slices are published. A device plugin is a
    separate fault and comes last.
    """

    NFD_LABELS = "NFDLabelsMissing"
    CRITICAL_PODS_QUOTA = "CriticalPodsNotAdmitted"
    # A cordon or a maintenance taint: the cause when the plugin also went.
    NODES_UNAVAILABLE = "GPUNodesUnavailable"
    KUBELET_PLUGIN = "KubeletPluginNotRunning"
    RESOURCE_SLICES = "ResourceSlicesMissing"
    DEVICE_PLUGIN = "DevicePluginAdvertises"


class GpuReason(StrEnum):
    """GPUsAvailable's reasons other than a failing advisory's."""

    PUBLISHED = "GPUsPublished"
    NO_GPU_NODES = "NoGPUNodes"
    NO_GPU_DEVICES = "NoGPUDevicesPublished"
    NOT_OBSERVED = "GPUsNotObserved"


class UpToDateReason(StrEnum):
    """The ``UpToDate`` condition's reasons (plan.rollout)."""

    UP_TO_DATE = "UpToDate"
    PENDING = "UpgradePending"
    UPGRADING = "Upgrading"
    PAUSED = "RolloutPaused"
    FAILED = "UpgradeFailed"
    # A first install (or a component just enabled): not an upgrade, never held.
    INSTALLING = "Installing"
    # Waiting before its upgrade starts: the image mirror lacks an image the
    # upgrade would run, or (--mirror-preflight=require) could not be asked.
    IMAGE_NOT_IN_MIRROR = "ImageNotInMirror"
    MIRROR_UNREACHABLE = "MirrorUnreachable"


class CAReason(StrEnum):
    PUBLISHED = "Published"
    # Published whole or not at all: a Bundle of other things, or too large.
    NOT_PUBLISHED = "NotPublished"


class PullSecretsReason(StrEnum):
    PRESENT = "Present"
    PULL_SECRET_MISSING = "PullSecretMissing"


class TeardownReason(StrEnum):
    """Teardown's reasons other than a blocked teardown's."""

    # Progress: objects are being deleted, releases uninstalled.
    WAITING = "Waiting"


ConditionReason = (
    BlockedReason
    | ReadyReason
    | WorkloadReason
    | RequirementsReason
    | VersionsReason
    | VerifiedReason
    | GpuCheck
    | GpuReason
    | UpToDateReason
    | CAReason
    | PullSecretsReason
    | TeardownReason
)

# The reasons blocked_reason(fault) never gives a teardown: the reconcile's own.
_RECONCILE_ONLY = frozenset(
    {
        BlockedReason.RECONCILE_ERROR,
        BlockedReason.TARGET_CLAIMED,
        BlockedReason.ACTION_FAILED,
        BlockedReason.STATUS_REFUSED,
        BlockedReason.IMAGE_NOT_IN_MIRROR,
        BlockedReason.MIRROR_UNREACHABLE,
        BlockedReason.CONFLICTS_FOUND,
        BlockedReason.NODE_AGENT_FAILED,
        BlockedReason.SCHEDULER_NOT_BINDING,
    }
)

_READY_REASONS = frozenset(
    {*BlockedReason, *ReadyReason, *WorkloadReason}
    - {BlockedReason.TEARDOWN_ERROR}
    # A healthy workload gives Ready no reason: Reconciled does.
    - {WorkloadReason.AVAILABLE}
)
# The conditions that carry Ready's reason, to say what it means to a
# reader that asks kstatus's questions (plan.progress).
READY_MIRRORS = frozenset({ConditionType.RECONCILING, ConditionType.STALLED})

# Which reasons each condition carries: what docs/status.md lists, and what
# a reader of the status may meet.
CONDITION_REASONS: Mapping[ConditionType, frozenset[str]] = {
    ConditionType.READY: _READY_REASONS,
    **{mirror: _READY_REASONS for mirror in READY_MIRRORS},
    ConditionType.REQUIREMENTS_MET: frozenset(RequirementsReason),
    ConditionType.VERSIONS_SUPPORTED: frozenset(VersionsReason),
    ConditionType.TARGET_VERIFIED: frozenset(VerifiedReason),
    ConditionType.GPUS_AVAILABLE: frozenset({*GpuCheck, *GpuReason}),
    ConditionType.UP_TO_DATE: frozenset(UpToDateReason),
    ConditionType.CA_CERTIFICATE_PUBLISHED: frozenset(CAReason),
    ConditionType.PULL_SECRETS_PRESENT: frozenset(PullSecretsReason),
    ConditionType.TEARDOWN: frozenset({*BlockedReason, *TeardownReason} - _RECONCILE_ONLY),
}


# ---- reasons of events -----------------------------------------------------------------


class EventReason(StrEnum):
    """The reasons of the events on a ServingStack; some are a condition's reason too."""

    # A hand edit of fields the operator owns, taken back (plan.drift).
    DRIFT_CORRECTED = "DriftCorrected"
    # A release's object deleted or changed by hand (restored, or only reported).
    RELEASE_DRIFT = "ReleaseDrift"
    # A release revision refused: it installs workloads outside its namespace.
    RELEASE_REVISION_REFUSED = "ReleaseRevisionRefused"
    # The target connection is allowed but unsafe (Target.warnings).
    INSECURE_TARGET = "InsecureTarget"
    VERSION_OUT_OF_RANGE = "VersionOutOfRange"
    CLIENT_CA_WARNING = "ClientCAWarning"
    # A helm run that succeeded, one per ReleaseAction that runs helm.
    INSTALL_SUCCEEDED = "InstallSucceeded"
    UPGRADE_SUCCEEDED = "UpgradeSucceeded"
    REINSTALL_SUCCEEDED = "ReinstallSucceeded"
    ROLLBACK_SUCCEEDED = "RollbackSucceeded"
    # The CRDs Helm would leave at their first version, applied before Helm runs.
    CRDS_APPLIED = "CRDsApplied"
    CRD_KEPT = "CRDKept"
    # Objects a release took over (spec.adopt), each named with its former owner.
    ADOPTED = "Adopted"
    CLAIM_ACQUIRED = "ClaimAcquired"
    CLAIM_RELEASED = "ClaimReleased"
    TEARDOWN_SKIPPED = "TeardownSkipped"
    TEARDOWN_TIMEOUT = "TeardownTimeout"
    TEARDOWN_BLOCKED = "TeardownBlocked"
    HOOK_OBJECTS_DELETED = "HookObjectsDeleted"
    UNINSTALLED = "Uninstalled"
    TORN_DOWN = "TornDown"
    # Said once in an event, and in Ready for as long as they stand.
    INVALID_SPEC = BlockedReason.INVALID_SPEC.value
    TARGET_CLAIMED = BlockedReason.TARGET_CLAIMED.value
    TARGET_COLLECTION_TOO_LARGE = BlockedReason.TARGET_COLLECTION_TOO_LARGE.value
    ACTION_FAILED = BlockedReason.ACTION_FAILED.value
    WEBHOOK_NOT_READY = BlockedReason.WEBHOOK_NOT_READY.value
    RELEASE_STORAGE_TAMPERED = BlockedReason.RELEASE_STORAGE_TAMPERED.value
    STATUS_REFUSED = BlockedReason.STATUS_REFUSED.value
    IMAGE_NOT_IN_MIRROR = BlockedReason.IMAGE_NOT_IN_MIRROR.value
    # Also when --mirror-preflight=warn lets the release go on without asking.
    MIRROR_UNREACHABLE = BlockedReason.MIRROR_UNREACHABLE.value
    # The event names each object and its owner.
    CONFLICTS_FOUND = BlockedReason.CONFLICTS_FOUND.value
    # The pods named, when the wait starts or they change.
    CLAIMS_HELD = BlockedReason.CLAIMS_HELD.value
    # spec.claimWaitTimeout passed with pods holding claims: the uninstall went on.
    CLAIM_WAIT_TIMEOUT = "ClaimWaitTimeout"
    # A node agent's roll stopped at a node; the event names it.
    NODE_AGENT_FAILED = BlockedReason.NODE_AGENT_FAILED.value
    # The operator restarted a node agent's pod on one node (plan.node_agents).
    NODE_AGENT_RESTARTED = "NodeAgentRestarted"
    # Every node of a node agent runs its new revision, each served again.
    NODE_AGENTS_ROLLED = "NodeAgentsRolled"
    # Once per failure; the scheduler bound its probe pod (plan.scheduler_probe).
    SCHEDULER_NOT_BINDING = BlockedReason.SCHEDULER_NOT_BINDING.value
    SCHEDULER_PROVEN = "SchedulerProven"
