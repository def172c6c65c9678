"""What the operator keeps across ServingStacks, and how it names one in its lines.

What is one stack's (what wakes it, the spec it last saw) is not here: it
lives in kopf's per-object ``memo``, and goes with the object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kopf
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource

from modelplane.actions.helm import Helm
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.client import open_targets
from modelplane.operator import metrics
from modelplane.operator.mirror_preflight import MirrorPreflight
from modelplane.operator.options import OperatorOptions
from modelplane.operator.rollout import Rollout
from modelplane.operator.target_reads import TargetReads

ServingStackResource = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)


@dataclass
class Runtime:
    """What the operator keeps across ServingStacks; what is one stack's is in its memo."""

    options: OperatorOptions
    hub: AsyncClient
    helm: Helm
    # Cloud identity token sources, by identity and target. Not dropped with
    # a stack (stacks may share an identity and target): bounded instead, the
    # least recently used going first.
    tokens: TokenCache = field(default_factory=TokenCache)
    # The staged rollout of upgrades over this shard's stacks.
    rollout: Rollout = field(init=False)
    # The bound on the stacks reading their target in full at once.
    target_reads: TargetReads = field(init=False)
    # The mirror preflight, one for every stack: its answers are shared.
    mirror: MirrorPreflight | None = field(init=False)

    def __post_init__(self) -> None:
        self.mirror = MirrorPreflight.of(self.options)
        self.rollout = Rollout(self.options.rollout_policy(), asks_mirror=self.mirror is not None)
        self.target_reads = TargetReads(self.options.max_concurrent_target_reads)

    def expose(self) -> None:
        """Report the sizes of what is kept in the metrics: a size that only grows is a leak."""
        for what in TRACKED:
            metrics.TRACKED.labels(what=what).set(0)
        metrics.TARGETS_OPEN.set_function(open_targets)


# What each stack's task keeps in its memo, by the names the metrics give them.
TRACKED = ("wakers", "generations")


def track(change: int) -> None:
    """Count a stack's task in (+1) or out (-1) of what the metrics say is kept."""
    for what in TRACKED:
        metrics.TRACKED.labels(what=what).inc(change)


def stack_label(body: kopf.Body) -> str:
    """``namespace/name``: how a log line names a stack."""
    return f"{body.meta.namespace}/{body.meta.name}"
