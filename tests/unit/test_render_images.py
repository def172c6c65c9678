"""``render`` lists every image, before and after the mirror rules, in a pipe and on a terminal.

Piped, every line fits 80 columns and no line ends in padding (the rules of
test_render_text.py); on a pseudo-terminal, its width. The JSON output
carries the same images.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.terminal import on_a_pty
from typer.testing import CliRunner

from modelplane.api.models import ServingStack
from modelplane.catalog.images import Runs
from modelplane.cli import render
from modelplane.cli.inputs import load_yaml
from modelplane.cli.main import app
from modelplane.plan.images import ImageUse, parse_rules
from modelplane.plan.model import Plan, PlannedRelease
from modelplane.plan.planner import plan
from modelplane.plan.sources import Sources

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "servingstack.yaml"
DYNAMO = ROOT / "tests" / "golden" / "inputs" / "dynamo-managed.yaml"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RULES = ["quay.io=mirror.internal/quay", "nvcr.io=mirror.internal/nvcr"]


def _plan(path: Path = EXAMPLE, rules: list[str] | None = None, **extra: Any) -> Plan:
    stack = ServingStack.model_validate(load_yaml(path))
    sources = Sources(image_mirrors=parse_rules(rules or []), **extra)
    return plan(stack, None, sources)


def _piped(p: Plan) -> str:
    out = io.StringIO()
    render.print_text(p, render.text_console(out))
    return out.getvalue()


def _section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        body.append(line)
    return body


def _small_plan() -> Plan:
    """A plan with made-up images: one moved, one no rule names, one nothing sets."""
    base = _plan()
    uses = [
        ImageUse(
            component="cert-manager",
            image="quay.io/a/b:1",
            mirrored="mirror.internal/quay/a/b:1",
            rule="quay.io=mirror.internal/quay",
        ),
        ImageUse(component="cert-manager", image="ghcr.io/c/d:2", runs=Runs.HOOK),
        ImageUse(component="cert-manager", image="docker.io/e/f:3", runs=Runs.OFF),
    ]
    own = ImageUse(
        component="modelexpress",
        image="nvcr.io/x/y:0.4.1",
        mirrored="mirror.internal/nvcr/x/y:0.4.1",
        rule="nvcr.io=mirror.internal/nvcr",
        runs=Runs.RUNTIME,
        settable=True,
    )
    unset = ImageUse(component="modelexpress", image="docker.io/z:1", settable=False)
    release: PlannedRelease = base.releases[0].model_copy(update={"images": uses})
    return base.model_copy(
        update={
            "releases": [release],
            "images": [*uses, own, unset],
            "image_mirrors": RULES,
        }
    )


def test_each_release_and_the_products_objects_list_their_images() -> None:
    out = _piped(_small_plan())
    body = _section(out, "Images")
    text = "\n".join(body)
    assert "  rule [1] quay.io=mirror.internal/quay" in text
    assert "  cert-manager (release mp-cert-manager)" in text
    assert "  modelexpress (the product's own objects)" in text
    # Before, after, and which rule moved it.
    i = body.index("    always  quay.io/a/b:1")
    assert body[i + 1] == "         to mirror.internal/quay/a/b:1 [1]"
    j = body.index("    hook    ghcr.io/c/d:2")
    assert body[j + 1].strip() == "not mirrored"
    k = body.index("    runtime nvcr.io/x/y:0.4.1")
    assert body[k + 1].endswith("mirror.internal/nvcr/x/y:0.4.1 [2]")
    u = body.index("    always  docker.io/z:1")
    assert body[u + 1].strip() == "not mirrored: nothing the product sets moves it"
    assert "    off     docker.io/e/f:3" in body
    # The mirror must carry what runs and moved, once; not what is off.
    carry = [line.strip() for line in _section(out, "The mirror must carry")]
    assert carry == ["- mirror.internal/quay/a/b:1", "- mirror.internal/nvcr/x/y:0.4.1"]
    left = [line.strip() for line in _section(out, "Not mirrored")]
    assert left == ["- ghcr.io/c/d:2", "- docker.io/z:1"]


def test_without_rules_the_images_are_listed_and_nothing_is_said_moved() -> None:
    out = _piped(_plan())
    line = next(line for line in out.splitlines() if line.startswith("Images"))
    assert "no --image-registry-mirror" in line
    assert "The mirror must carry" not in out and "not mirrored" not in out
    assert "    always  quay.io/jetstack/cert-manager-controller:v1.20.2" in out


def test_the_real_catalog_with_a_mirror_for_everything_leaves_nothing_behind() -> None:
    p = _plan(DYNAMO, ["*=mirror.internal"])
    out = _piped(p)
    assert "Not mirrored" not in out
    carry = [line.strip().removeprefix("- ") for line in _section(out, "The mirror must carry")]
    assert carry and all(image.startswith("mirror.internal/") for image in carry)
    assert len(carry) == len(set(carry))
    assert "mirror.internal/nvidia/ai-dynamo/modelexpress-server:0.4.1" in carry


@pytest.mark.parametrize("path", [EXAMPLE, DYNAMO], ids=lambda p: p.stem)
@pytest.mark.parametrize("rules", [[], RULES, ["*=mirror.internal:5000/a/deep/path/prefix"]])
def test_every_line_fits_80_columns_in_a_pipe_and_none_ends_in_padding(
    path: Path, rules: list[str]
) -> None:
    out = _piped(_plan(path, rules, image_pull_secrets=("regcred",)))
    assert "Images" in out
    too_wide = [line for line in out.splitlines() if len(line) > 80]
    assert not too_wide, "\n".join(too_wide)
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert not padded, "\n".join(repr(line) for line in padded[:5])


def test_a_hostile_image_is_escaped() -> None:
    p = _small_plan()
    evil = ImageUse(component="x\x1b]0;t\x07", image="quay.io/a\x1b[2J:1")
    out = _piped(p.model_copy(update={"images": [*p.images, evil]}))
    assert "\x1b" not in out and "\x07" not in out


def test_the_json_carries_the_same_images() -> None:
    p = _plan(EXAMPLE, RULES, image_pull_secrets=("regcred",))
    doc = json.loads(render.to_json(p))
    assert doc["imageMirrors"] == RULES
    assert doc["imagePullSecrets"] == ["regcred"]
    assert [u["image"] for u in doc["images"]] == [u.image for u in p.images]
    controller = next(u for u in doc["images"] if "cert-manager-controller" in u["image"])
    assert controller["mirrored"] == "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2"
    assert controller["rule"] == "quay.io=mirror.internal/quay" and controller["runs"] == "always"
    assert doc["mirrorMustCarry"] == render.mirror_must_carry(p)
    assert doc["notMirrored"] == render.not_mirrored(p)


def test_the_cli_lists_the_images_as_the_plan_has_them() -> None:
    args = ["render", "-f", str(EXAMPLE), *(f"--image-registry-mirror={r}" for r in RULES)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == _piped(_plan(EXAMPLE, RULES))
    assert "cert-manager (release mp-cert-manager)" in result.stdout


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_on_a_terminal_the_listing_fits_the_width(columns: int) -> None:
    raw = on_a_pty(
        [
            sys.executable,
            "-m",
            "modelplane.cli.main",
            "render",
            "-f",
            str(DYNAMO),
            *(f"--image-registry-mirror={rule}" for rule in RULES),
        ],
        columns=columns,
    )
    assert "\x1b[" in raw
    out = ANSI.sub("", raw)
    assert max(len(line) for line in out.splitlines()) <= columns
    assert "The mirror must carry" in out and "not mirrored" in out
    flat = re.sub(r"\s+", "", out)
    # Folded or not, each moved image is there whole.
    assert "tomirror.internal/quay/jetstack/cert-manager-controller:v1.20.2[1]" in flat


def test_a_version_with_build_metadata_pulls_its_release_images(tmp_path: Path) -> None:
    # The held-out render corpus: the CRD's pattern takes v1.8.4+build (a
    # chart version may carry build metadata), and render crashed building
    # the image docker.io/envoyproxy/gateway:v1.8.4+build, which no OCI tag
    # can be.
    doc = load_yaml(EXAMPLE)
    doc["spec"]["versions"] = {"envoyGateway": "v1.8.4+build.7", "certManager": "v1.20.2+x"}
    path = tmp_path / "stack.yaml"
    path.write_text(json.dumps(doc))
    p = _plan(path, RULES)
    (gateway,) = [r for r in p.releases if r.component == "envoy-gateway"]
    assert gateway.version == "v1.8.4+build.7"  # helm is asked for the chart as pinned
    images = {use.image for use in p.images}
    assert "docker.io/envoyproxy/gateway:v1.8.4" in images
    assert "quay.io/jetstack/cert-manager-controller:v1.20.2" in images
    assert "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2" in {
        use.mirrored for use in p.images
    }
    assert not [image for image in images if "+" in image]
    result = CliRunner().invoke(app, ["render", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert "docker.io/envoyproxy/gateway:v1.8.4" in result.output
