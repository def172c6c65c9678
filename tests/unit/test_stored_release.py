"""Reading a revision from Helm's storage: hostile Secrets fail clearly, within bounds."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.shared_fixtures import real_chart

from modelplane.kube.discovery import Served
from modelplane.observe.release_objects import ReleaseManifests, unjudged_releases
from modelplane.observe.releases import (
    MAX_RELEASE_BUILT,
    MAX_RELEASE_BYTES,
    ReleaseReadError,
    deployed_release,
    release_secret,
)
from modelplane.observe.state import Listed
from modelplane.plan.manifest import MANIFEST_LIMITS
from modelplane.plan.model import ComponentPlan
from modelplane.plan.observed import ObservedRelease
from modelplane.plan.planner import with_health
from modelplane.plan.release_health import DriftMode, release_report
from modelplane.untrusted import json_cost
from modelplane.wire import RELEASE_DIGEST_LABEL

NAME, NS = "mp-cert-manager", "cert-manager"
RELEASE = ObservedRelease(name=NAME, namespace=NS, revision=2, status="deployed", digest="d")
STORED = {
    "name": NAME,
    "version": 2,
    "config": {"crds": {"enabled": True}},
    "manifest": "---\n# Source: x.yaml\nkind: ConfigMap\n",
    "chart": {"metadata": {"name": "cert-manager", "version": "v1.20.2"}},
}


def _secret(payload: bytes, revision: int = 2, *, raw: str | None = None) -> dict[str, Any]:
    # Helm's own base64, then the API server's.
    helm_text = base64.b64encode(payload)
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.{NAME}.v{revision}",
            "namespace": NS,
            "labels": {
                "owner": "helm",
                "name": NAME,
                "version": str(revision),
                "status": "deployed",
                RELEASE_DIGEST_LABEL: "d",
            },
        },
        "data": {"release": raw if raw is not None else base64.b64encode(helm_text).decode()},
    }


def test_a_stored_revision_gives_its_values_manifest_and_chart_version() -> None:
    got = deployed_release(_secret(gzip.compress(json.dumps(STORED).encode())), RELEASE)
    assert got.values == {"crds": {"enabled": True}}
    assert got.manifest == STORED["manifest"]
    assert (got.chart_version, got.revision) == ("v1.20.2", 2)


def test_json_that_is_not_gzipped_is_read_too() -> None:
    # Helm's decodeRelease takes it so, from releases stored before compression.
    assert (
        deployed_release(_secret(json.dumps(STORED).encode()), RELEASE).chart_version == "v1.20.2"
    )


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (_secret(b"", raw="***"), "not base64"),
        (_secret(b"", raw="A" * (3 * 1024 * 1024)), "base64 of more than"),
        (_secret(gzip.compress(b"{not json")), "not JSON"),
        (_secret(gzip.compress(b"[1, 2]")), "not a JSON object"),
        (_secret(gzip.compress(b"{}")[:-4]), "truncated"),
        ({"metadata": {}, "data": {}}, "holds no release"),
    ],
)
def test_an_unreadable_revision_is_a_clear_error_that_quotes_nothing(
    secret: dict[str, Any], message: str
) -> None:
    with pytest.raises(ReleaseReadError, match=message) as err:
        deployed_release(secret, RELEASE)
    assert f"Secret {NS}/sh.helm.release.v1.{NAME}.v2" in str(err.value)
    assert "not json" not in str(err.value)


def test_a_gzip_bomb_in_a_release_secret_is_refused() -> None:
    # Under a Secret's 1 MiB, over the bound once inflated.
    bomb = gzip.compress(b" " * (MAX_RELEASE_BYTES + 1), compresslevel=9)
    assert len(base64.b64encode(bomb)) < 1024 * 1024
    with pytest.raises(ReleaseReadError, match="decompresses to more than"):
        deployed_release(_secret(bomb), RELEASE)


def test_a_release_that_parses_to_many_times_its_size_is_refused_before_parsing() -> None:
    # Empty objects compress some 750 times and parse to 24 times their
    # size: 4 MiB of them, inside the gzip bound, would build 100 MiB; the
    # same at the old 64 MiB bound built 1.5 GiB from a Secret of 100 KiB.
    text = b'{"manifest":"","config":{},"chart":[' + b"{}," * (4 * 1024 * 1024 // 3) + b"{}]}"
    bomb = gzip.compress(text, compresslevel=9)
    assert len(base64.b64encode(bomb)) < 100 * 1024
    with pytest.raises(ReleaseReadError, match=r"would build about .* in memory"):
        deployed_release(_secret(bomb), RELEASE)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("chart", "version", "crds"),
    [
        # The largest manifest of the real charts, its CRDs as templates.
        ("ai-gateway-crds-helm", "v1.1.0", False),
        # A chart whose crds/ Helm stores among the chart's files.
        ("lws", "v0.8.0", True),
        ("cert-manager", "v1.20.2", False),
    ],
)
def test_the_real_charts_releases_fit_their_bounds(chart: str, version: str, crds: bool) -> None:
    # A release as Helm stores it: the manifest, and the chart's templates
    # and files as base64 (the render stands in for the templates, which
    # the fixtures do not hold: about their size).
    folder = real_chart(chart, version)
    rendered = (folder / "rendered-standard.yaml").read_text()
    values = (folder / "values.yaml").read_text()
    files = [{"name": "values.yaml", "data": _b64(values)}]
    if crds:
        files.append({"name": "crds/all.yaml", "data": _b64((folder / "crds.yaml").read_text())})
    stored = {
        **STORED,
        "manifest": rendered,
        "chart": {
            "metadata": {"name": chart, "version": version},
            "templates": [{"name": "templates/all.yaml", "data": _b64(rendered)}],
            "files": files,
            "values": {"image": {"repository": "x"}},
        },
    }
    text = json.dumps(stored).encode()
    # Four times the margin on either bound.
    assert len(text) * 4 < MAX_RELEASE_BYTES
    assert json_cost(text) * 4 < MAX_RELEASE_BUILT
    assert deployed_release(_secret(gzip.compress(text)), RELEASE).manifest == rendered


def test_only_the_secret_of_the_known_revision_is_taken() -> None:
    older = _secret(gzip.compress(b"{}"), revision=1)
    elsewhere = _secret(gzip.compress(b"{}"))
    elsewhere["metadata"]["namespace"] = "tenant"
    mislabelled = _secret(gzip.compress(b"{}"))
    mislabelled["metadata"]["labels"]["version"] = "3"
    listed = Listed(apis=Served().apis, release_secrets=[older, elsewhere, mislabelled])
    assert release_secret(listed, RELEASE) is None
    right = _secret(gzip.compress(b"{}"))
    listed.release_secrets.append(right)
    assert release_secret(listed, RELEASE) is right


def test_a_stored_manifest_over_its_bound_is_said_in_the_component_not_skipped() -> None:
    # Over the bytes a parse takes: before, the release's workloads were
    # left out with a log line alone, and the component read as healthy.
    over = "x" * MANIFEST_LIMITS.max_bytes
    big = STORED | {"manifest": "---\nkind: ConfigMap\ndata:\n  a: " + over + "\n"}
    listed = Listed(
        apis=Served().apis, release_secrets=[_secret(gzip.compress(json.dumps(big).encode()))]
    )
    manifests = ReleaseManifests().read(listed, {NAME: RELEASE})
    (unjudged,) = unjudged_releases(manifests)
    assert (unjudged.component, unjudged.release) == ("cert-manager", NAME)
    assert unjudged.message.startswith(
        f"release {NAME} revision 2: its stored manifest is refused, so its workloads are "
        "not judged: "
    )
    assert f"over the limit of {MANIFEST_LIMITS.max_bytes}" in unjudged.message
    assert "xxxx" not in unjudged.message

    component = ComponentPlan(
        name="cert-manager",
        mode="Managed",
        kind="chart",
        version="v1.20.2",
        namespace=NS,
        state="Ready",
        message="installed",
    )
    report = release_report([], [], datetime.now(UTC), DriftMode.WARN, unjudged=[unjudged])
    shown = with_health(component, report)
    assert shown.message == f"{unjudged.message}; installed"
    other = component.model_copy(update={"name": "trust-manager"})
    assert with_health(other, report) == other


def test_a_readable_stored_manifest_is_not_unjudged() -> None:
    listed = Listed(
        apis=Served().apis, release_secrets=[_secret(gzip.compress(json.dumps(STORED).encode()))]
    )
    assert unjudged_releases(ReleaseManifests().read(listed, {NAME: RELEASE})) == []
