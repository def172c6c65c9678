"""The values a chart reads at its version: the catalog's records, the pure check, and render.

A value no template of the chart reads is taken by Helm without a word, so
the plan sets none: under ``--image-pull-secret``, grove-charts at its pin
(which reads no pull-secret value) gets no ``imagePullSecrets``, and
``render`` says its pods pull without one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.images import ProductObject, setting_paths
from modelplane.catalog.types import ChartSource, ValuesRead
from modelplane.cli.main import app
from modelplane.plan.chart_values import leaf_paths, readable, refused_message, unread, without

ROOT = Path(__file__).resolve().parents[2]
DYNAMO = ROOT / "tests" / "golden" / "inputs" / "dynamo-managed.yaml"
EXAMPLE = ROOT / "examples" / "servingstack.yaml"

GROVE_SAYS = (
    "grove-charts v0.1.0-alpha.12-rc2 reads no pull-secret value, so its pods pull without "
    "one (imagePullSecrets left unset)."
)


# ---- the record ---------------------------------------------------------------------

READS = ValuesRead("v1", ("image.repository", "config.envoyGateway"), (("global.x", "src"),))


@pytest.mark.parametrize(
    ("path", "read"),
    [
        ("image.repository", True),
        ("image", False),  # a path above one read is not read whole
        ("image.tag", False),
        ("config.envoyGateway.extensionManager.service", True),  # under one read whole
        ("config.envoyGatewayX", False),  # a key boundary, not a prefix of characters
        ("global.x", True),  # unlisted, read all the same
        ("imagePullSecrets", False),
    ],
)
def test_a_path_is_read_when_it_or_one_above_it_is_listed(path: str, read: bool) -> None:
    assert READS.reads(path) is read


def test_a_chart_has_one_record_per_version() -> None:
    with pytest.raises(ValueError, match="two ValuesRead"):
        ChartSource("c", "oci://x", reads=(ValuesRead("v1", ()), ValuesRead("v1", ("a",))))
    source = ChartSource("c", "oci://x", reads=(READS,))
    assert source.reads_at("v1") is READS
    assert source.reads_at("v2") is None


# ---- the pure check -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "paths"),
    [
        ({}, []),
        ({"a": 1, "b": {"c": [1], "d": {"e": "x"}}}, ["a", "b.c", "b.d.e"]),
        # An empty map is a value of its own ({} selects all), not nothing.
        ({"sel": {}}, ["sel"]),
    ],
)
def test_leaf_paths(values: dict[str, Any], paths: list[str]) -> None:
    assert leaf_paths(values) == paths


@pytest.mark.parametrize(
    ("values", "kept", "refused"),
    [
        ({"image": {"repository": "r"}}, {"image": {"repository": "r"}}, []),
        ({"imagePullSecrets": [{"name": "p"}]}, {}, ["imagePullSecrets"]),
        # A map emptied by the refusal goes too; its read sibling stays.
        (
            {"image": {"repository": "r", "tag": "t"}, "extra": {"a": {"b": 1}}},
            {"image": {"repository": "r"}},
            ["image.tag", "extra.a.b"],
        ),
        (
            {"config": {"envoyGateway": {"extensionManager": {"x": 1}}}},
            {"config": {"envoyGateway": {"extensionManager": {"x": 1}}}},
            [],
        ),
    ],
)
def test_readable_keeps_what_the_chart_reads(
    values: dict[str, Any], kept: dict[str, Any], refused: list[str]
) -> None:
    assert readable(values, READS) == (kept, refused)


def test_an_unknown_version_refuses_nothing() -> None:
    values = {"imagePullSecrets": [{"name": "p"}]}
    assert readable(values, None) == (values, [])
    assert unread(None, ["anything"]) == []


def test_without_leaves_its_input_as_it_was() -> None:
    values = {"a": {"b": 1, "c": 2}}
    assert without(values, ["a.b", "a.missing", "nowhere.x"]) == {"a": {"c": 2}}
    assert values == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(
    ("refused", "pull_paths", "message"),
    [
        (
            ["imagePullSecrets"],
            ["imagePullSecrets"],
            "c v1 reads no pull-secret value, so its pods pull without one "
            "(imagePullSecrets left unset)",
        ),
        (
            ["a.imagePullSecrets"],
            ["a.imagePullSecrets", "b.imagePullSecrets"],
            "c v1 does not read a.imagePullSecrets, so the pods only those would reach pull "
            "without a pull Secret",
        ),
        (["x.y"], [], "c v1 does not read x.y, so the product leaves it unset"),
        (
            ["x.y", "imagePullSecrets", "z"],
            ["imagePullSecrets"],
            "c v1 reads no pull-secret value, so its pods pull without one "
            "(imagePullSecrets left unset); c v1 does not read x.y, z, so the product "
            "leaves them unset",
        ),
    ],
)
def test_refused_message(refused: list[str], pull_paths: list[str], message: str) -> None:
    assert refused_message("c", "v1", refused, pull_paths) == message


# ---- the catalog's records ----------------------------------------------------------

CHARTS = [c for c in COMPONENTS if c.chart is not None]


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_every_chart_records_what_it_reads_at_its_pin(component: Any) -> None:
    assert component.chart.reads_at(component.version) is not None


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_every_image_setting_is_read_at_the_pin(component: Any) -> None:
    # A mirror rule must be able to move every image a chart sets: an image
    # setting the pin ignores would leave that image unmoved.
    reads = component.chart.reads_at(component.version)
    paths = [
        p
        for site in component.images.sites
        if not isinstance(site.setting, ProductObject)
        for p in setting_paths(site.setting)
    ]
    assert [p for p in paths if not reads.reads(p)] == []


# The pull-secret paths the catalog names that a pin does not read: each one
# a known gap of that chart version, said in the plan's notes.
UNREAD_PULL_SECRETS = {"grove": ["imagePullSecrets"]}


@pytest.mark.parametrize("component", CHARTS, ids=lambda c: c.name)
def test_the_pull_secret_paths_a_pin_does_not_read_are_the_known_ones(component: Any) -> None:
    reads = component.chart.reads_at(component.version)
    pull = component.images.pull_secrets
    paths = pull.paths if pull else ()
    assert [p for p in paths if not reads.reads(p)] == UNREAD_PULL_SECRETS.get(component.name, [])


# ---- render -------------------------------------------------------------------------


def _render(path: Path, *flags: str, output: str = "text") -> str:
    result = CliRunner().invoke(app, ["render", "-f", str(path), "-o", output, *flags])
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _flat(text: str) -> str:
    """Text output with its wrapped lines joined back."""
    return " ".join(line.strip() for line in text.splitlines())


def test_render_says_grove_pulls_without_the_pull_secret() -> None:
    out = _render(DYNAMO, "--image-pull-secret=regcred")
    assert GROVE_SAYS in _flat(out)


def test_render_json_leaves_groves_pull_secrets_unset_and_says_why() -> None:
    import json

    doc = json.loads(_render(DYNAMO, "--image-pull-secret=regcred", output="json"))
    releases = {r["component"]: r for r in doc["releases"]}
    assert "imagePullSecrets" not in releases["grove"]["values"]
    assert releases["grove"]["refused"] == ["imagePullSecrets"]
    # A chart that reads its pull-secret path still gets it.
    assert releases["kai-scheduler"]["values"]["global"]["imagePullSecrets"] == [
        {"name": "regcred"}
    ]
    assert releases["kai-scheduler"]["refused"] == []
    assert GROVE_SAYS in doc["notes"]


def test_render_says_nothing_of_it_without_pull_secrets() -> None:
    assert "pull-secret value" not in _flat(_render(DYNAMO))
    assert "pull-secret value" not in _flat(_render(EXAMPLE, "--image-pull-secret=regcred"))
