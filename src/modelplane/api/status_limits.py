"""How much the operator may write to a ServingStack's status, its events and its log.

One table, read by both sides: ``api.crd`` puts every limit in the CRD's
status schema (``maxLength``, ``maxItems``), and ``operator.status`` cuts
every value to the same limit before it writes, so what the operator sends
is always what the hub accepts, whatever a target holds. A string or list in
the schema without an entry here is an error, so a new status field cannot
go out unbounded.

The limits of a condition are metav1.Condition's (type 316 with its
pattern, reason 1-1024 with its pattern, message 32768), so ``kubectl`` and
condition libraries read ours as theirs. The rest are sized to what lands
there, and so that a status at every limit (about 0.9 MiB) stays below
etcd's 1.5 MiB request limit: an address is a DNS name or IP (Gateway API
caps one at 253), a component's message is one action's failure, and the CA
certificate is the one the Bundle publishes, 16 KiB holding some eight PEM
certificates of 4096-bit keys. A CA that does not fit is not published at
all (never a cut PEM), and a condition says why.

A limit counts characters, as the API server's ``maxLength`` does (runes).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

# schema path (list items as "[]") -> longest string the field takes
STRINGS: MappingProxyType[str, int] = MappingProxyType(
    {
        "conditions[].type": 316,
        "conditions[].status": 16,
        "conditions[].reason": 1024,
        "conditions[].message": 32768,
        "conditions[].lastTransitionTime": 64,
        "components[].name": 253,
        "components[].mode": 16,
        "components[].version": 128,
        "components[].installedVersion": 128,
        "components[].state": 64,
        "components[].message": 4096,
        "gateway.address": 256,
        "gateway.caCertificate": 16384,
        # One rule as given ("FROM=TO"); a rule is at most 512 characters.
        "imageMirrors[]": 512,
        # "v1.34.2-gke.1234000": a version with a provider's suffix.
        "target.kubernetesVersion": 64,
        # A product name as NVML gives it ("NVIDIA H100 80GB HBM3"), with room.
        "target.devices[].product": 128,
        # A quantity as text ("81559Mi"); the API's own quantities are far shorter.
        "target.devices[].memory": 32,
        # A SemVer the API server accepts as a version attribute ("580.159.4").
        "target.devices[].driverVersion": 64,
        # A plan.rollout.Phase; a timestamp; a stack's namespace/name.
        "rollout.phase": 16,
        "rollout.startedAt": 64,
        "rollout.pausedBy": 317,
        # A catalog DisruptionClass (NodeAgent).
        "rollout.disruption[]": 16,
        # A Helm release name (53 at most, Helm's own limit) and a namespace.
        "releases[].name": 53,
        "releases[].namespace": 63,
        # "sha256:" and 64 hex digits.
        "releases[].manifestDigest": 71,
    }
)

# schema path -> most items the list takes
LISTS: MappingProxyType[str, int] = MappingProxyType(
    {
        # Ours: Ready, RequirementsMet, VersionsSupported, CACertificatePublished,
        # TargetVerified, PullSecretsPresent, GPUsAvailable, UpToDate, Teardown,
        # Reconciling, Stalled, with room to grow.
        "conditions": 16,
        # One per catalog component (test_status_limits checks the catalog fits).
        "components": 64,
        # The mirror rules in force; past the limit the last item says how many more.
        "imageMirrors": 32,
        # Product groups shown; the GPUs of the rest are counted in otherDevices.
        "target.devices": 16,
        # One per catalog release (test_status_limits checks the catalog fits).
        "releases": 64,
        # Each disruption class once.
        "rollout.disruption": 4,
    }
)

# The value the CA is published in: capped, never escaped (PEM has newlines).
CA_CERTIFICATE = "gateway.caCertificate"

# More than a length, as metav1.Condition has them.
CONSTRAINTS: MappingProxyType[str, dict[str, Any]] = MappingProxyType(
    {
        "conditions[].type": {
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        },
        "conditions[].status": {"enum": ["True", "False", "Unknown"]},
        "conditions[].reason": {
            "minLength": 1,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
    }
)

# An event's message. kopf posts core/v1 Events and cuts their message to
# 1024 characters (kopf/_cogs/clients/events.py, MAX_MESSAGE_LENGTH); the
# events.k8s.io/v1 API refuses a note over 1 kB (NoteLengthLimit in
# pkg/apis/core/validation/events.go), where core/v1 sets no limit of its
# own. Cut here, so the cut is ours (printable, ``…`` at the end), not
# kopf's middle cut of raw text.
EVENT_MESSAGE = 1024
# GPUsAvailable's message: one advisory's finding (cut to 1024 by the
# planner) and the names of the others, or the GPUs offered by product.
GPUS_MESSAGE = 4096
# Ready's message when the Gateway is not programmed: its controller's own
# condition message, which Gateway API caps at 32768; a person needs the start.
GATEWAY_MESSAGE = 2048
# Inputs, not status fields: the most devices read from one ResourceSlice.
# The API server refuses a slice with more (ResourceSliceSpec.devices: "Must
# not have more than 128 entries"); a file may hold more, which is not a slice.
DEVICES_PER_SLICE = 128
# Inputs: how much of a condition on a target's object (the product's
# Gateway and Bundle) is kept. metav1.Condition's reason limit, the same as
# ours; of its message (32768 there) more than any status field shows of one
# (GATEWAY_MESSAGE), so a cut is never the plan's to make twice.
OBSERVED_CONDITION_REASON = STRINGS["conditions[].reason"]
OBSERVED_CONDITION_MESSAGE = 4096
# Product groups GPUsAvailable's message names before "and N more".
LISTED_DEVICE_GROUPS = 5
# One logged message built from what a target said.
LOG_MESSAGE = 4096
# A claim's holder, as read back from the target's Lease, where a message shows it.
CLAIM_HOLDER = 512
# One line of terminal output built from observed facts (render, check).
TERMINAL = 4096


def string_limit(path: str) -> int:
    """The longest string the status field at ``path`` takes."""
    try:
        return STRINGS[path]
    except KeyError:
        raise ValueError(f"status field {path} has no length limit") from None


def list_limit(path: str) -> int:
    """The most items the status list at ``path`` takes."""
    try:
        return LISTS[path]
    except KeyError:
        raise ValueError(f"status list {path} has no item limit") from None
