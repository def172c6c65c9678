"""Where a stack's charts, manifests and images come from, as the operator is told."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelplane.catalog.types import Component
from modelplane.plan.images import MirrorRule
from modelplane.plan.release_health import DriftMode


@dataclass(frozen=True)
class Sources:
    """Where charts and manifests come from; mirrors for air-gapped installs."""

    chart_repository: str | None = None  # one repository for every chart
    chart_repository_for: dict[str, str] = field(default_factory=dict)  # component -> URL
    manifests_base_url_for: dict[str, str] = field(default_factory=dict)  # component -> base
    # Where images are pulled from instead, and the Secrets pods pull with.
    image_mirrors: tuple[MirrorRule, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    # --release-drift: what is done about a release's objects changed by hand.
    release_drift: DriftMode = DriftMode.CORRECT

    def repository(self, component: Component) -> str:
        assert component.chart is not None
        return self.chart_repository_for.get(
            component.name, self.chart_repository or component.chart.repository
        )
