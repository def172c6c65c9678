"""The operator: reconciles each ServingStack onto its target cluster.

What the command line uses of it is exported here, and only here: ``run``
serves a hub, and ``apply`` and ``delete`` drive one ``StackReconciler``
against one target. Every other module of the package is the operator's own.
"""

from __future__ import annotations

from modelplane.operator.leader import LeaderElection, default_namespace, lease_name
from modelplane.operator.logs import configure as configure_logging
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.shard import normalize_selector
from modelplane.operator.stack_teardown import Waiting
from modelplane.operator.status import READY, Outcome, desired_status


async def serve(options: OperatorOptions) -> None:
    """Serve the hub ``options`` names until stopped."""
    # kopf and the hub's machinery load only for the command that serves.
    from modelplane.operator.process import run

    await run(options)


__all__ = [
    "READY",
    "LeaderElection",
    "OperatorOptions",
    "Outcome",
    "StackReconciler",
    "Waiting",
    "configure_logging",
    "default_namespace",
    "desired_status",
    "lease_name",
    "normalize_selector",
    "serve",
]
