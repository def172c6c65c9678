"""Where a stack's charts, manifests and images come from, as the operator is told."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from modelplane.catalog.overrides import manifests_base_urls
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


@dataclass(frozen=True)
class SourceFlags:
    """The flags that name the sources, checked, as every command and the operator take them.

    The one place those flags become ``Sources``: each command builds these
    from its flags (``cli.options.source_options``), and the operator from
    its options, which name them alike.
    """

    chart_repository: str | None = None
    chart_repository_for: dict[str, str] = field(default_factory=dict)
    gaie_manifests_url: str | None = None
    manifests_url_for: dict[str, str] = field(default_factory=dict)
    image_mirrors: tuple[MirrorRule, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, holder: object) -> SourceFlags:
        """The flags as ``holder`` (the operator's options) holds them, under the same names."""
        return cls(**{f.name: getattr(holder, f.name) for f in fields(cls)})

    def operator_fields(self) -> dict[str, Any]:
        """These flags by name, as the operator's options take them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def sources(self, release_drift: DriftMode = DriftMode.CORRECT) -> Sources:
        return Sources(
            chart_repository=self.chart_repository,
            chart_repository_for=dict(self.chart_repository_for),
            manifests_base_url_for=manifests_base_urls(
                self.gaie_manifests_url, self.manifests_url_for
            ),
            image_mirrors=self.image_mirrors,
            image_pull_secrets=self.image_pull_secrets,
            release_drift=release_drift,
        )
