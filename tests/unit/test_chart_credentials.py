"""A chart repository's user and password are shown nowhere: helm's errors, messages, plans.

helm here is a script: one that fails quoting its whole command line, as
the real helm quotes the repository it was given, and one that records what
it was given (tests/integration/test_chart_credentials.py runs the real one).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
import typer
import yaml

from modelplane.actions.helm import Helm, HelmError
from modelplane.api.models import ServingStack
from modelplane.cli import render
from modelplane.cli.options import component_urls
from modelplane.kube.answers import describe_error
from modelplane.plan import Observed, plan
from modelplane.plan.model import Plan
from modelplane.plan.sources import Sources

from .conftest import manifest
from .test_helm_connections import kubeconfig

PASSWORD = "s3cret-t0ken-of-the-mirror"
MIRROR = f"https://mirror-user:{PASSWORD}@mirror.example/charts"
# helm's repository file sends no user without a password: this one reaches helm as it is.
TOKEN_AS_USER = f"https://{PASSWORD}@mirror.example/charts"


def _quoting_helm(tmp: Path) -> Path:
    script = tmp / "helm"
    script.write_text('#!/bin/sh\necho "Error: cannot reach $*" >&2\nexit 1\n')
    script.chmod(0o755)
    return script


def _recording_helm(tmp: Path) -> Path:
    """A helm that appends its command line to argv and copies the repository file it is given."""
    script = tmp / "helm"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp}/argv\n'
        "prev=\n"
        'for a in "$@"; do\n'
        f'  [ "$prev" = --repository-config ] && cp "$a" {tmp}/repositories.yaml\n'
        f'  [ "$prev" = --registry-config ] && cp "$a" {tmp}/registry.json\n'
        '  prev="$a"\n'
        "done\n"
    )
    script.chmod(0o755)
    return script


def _plan(repository: str = MIRROR) -> Plan:
    stack = ServingStack.model_validate(manifest())
    return plan(stack, Observed(), Sources(chart_repository=repository))


@pytest.mark.parametrize(
    "repository",
    [MIRROR, TOKEN_AS_USER],
    ids=["user-and-password", "token-as-user"],
)
async def test_helms_error_has_no_password_of_the_repository(
    repository: str, tmp_path: Path
) -> None:
    helm = Helm(str(_quoting_helm(tmp_path)), tmp_path / "home")
    release = _plan(repository).releases[0]
    with pytest.raises(HelmError) as caught:
        await helm.template(release, kubeconfig("https://127.0.0.1:1"))
    said = str(caught.value)
    assert said.startswith("Error: cannot reach ")
    assert PASSWORD not in said and "mirror-user" not in said


async def test_the_repositorys_credentials_reach_helm_in_a_file_not_its_command_line(
    tmp_path: Path,
) -> None:
    helm = Helm(str(_recording_helm(tmp_path)), tmp_path / "home")
    release = _plan().releases[0]
    await helm.apply(release, kubeconfig("https://127.0.0.1:1"))
    update, install = (tmp_path / "argv").read_text().splitlines()
    assert update.startswith("repo update chart-repository --fail-on-repo-update-fail ")
    assert install.startswith(f"install {release.name} chart-repository/{release.chart} ")
    assert "--repo " not in install
    for line in (update, install):
        assert PASSWORD not in line and "mirror-user" not in line
    given = yaml.safe_load((tmp_path / "repositories.yaml").read_text())
    assert given["repositories"] == [
        {
            "name": "chart-repository",
            "url": "https://mirror.example/charts",
            "username": "mirror-user",
            "password": PASSWORD,
        }
    ]


def test_an_error_quoting_a_url_is_described_without_its_userinfo() -> None:
    said = describe_error(ValueError(f"failed to fetch {MIRROR}/index.yaml"))
    assert said == "failed to fetch https://mirror.example/charts/index.yaml"


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_plan_shows_the_repository_without_its_userinfo(output: str) -> None:
    p = _plan()
    assert p.releases and all(r.repository == MIRROR for r in p.releases)
    if output == "json":
        shown = json.dumps(render.plan_document(p))
    else:
        out = io.StringIO()
        render.print_text(p, render.text_console(out))
        shown = out.getvalue()
    assert "mirror.example/charts" in shown
    assert PASSWORD not in shown and "mirror-user" not in shown


def test_a_repository_flag_without_its_component_is_quoted_without_the_password() -> None:
    with pytest.raises(typer.BadParameter) as caught:
        component_urls([MIRROR], "--chart-repository-for", "chart")
    said = str(caught.value)
    assert "expected COMPONENT=URL, got 'https://mirror.example/charts'" in said
    assert PASSWORD not in said


async def test_an_oci_registrys_credentials_reach_helm_in_a_registry_file(tmp_path: Path) -> None:
    helm = Helm(str(_recording_helm(tmp_path)), tmp_path / "home")
    release = _plan(f"oci://mirror-user:{PASSWORD}@registry.example:5000/charts").releases[0]
    await helm.apply(release, kubeconfig("https://127.0.0.1:1"))
    (install,) = (tmp_path / "argv").read_text().splitlines()
    chart = f"oci://registry.example:5000/charts/{release.chart}"
    assert install.startswith(f"install {release.name} {chart} ")
    assert "--registry-config " in install
    assert PASSWORD not in install and "mirror-user" not in install
    given = json.loads((tmp_path / "registry.json").read_text())
    auth = base64.b64encode(f"mirror-user:{PASSWORD}".encode()).decode()
    assert given == {"auths": {"registry.example:5000": {"auth": auth}}}


NAMES = (
    "CRD inferencepools.inference.networking.x-k8s.io is not served; "
    "webhook vaigatewayroute-v1alpha1.aigateway.envoyproxy.io failed"
)


def test_long_dotted_resource_names_survive_the_redaction() -> None:
    assert describe_error(ValueError(NAMES)) == NAMES


async def test_helms_error_keeps_the_resources_it_names(tmp_path: Path) -> None:
    script = tmp_path / "helm"
    script.write_text(f'#!/bin/sh\necho "Error: {NAMES}" >&2\nexit 1\n')
    script.chmod(0o755)
    helm = Helm(str(script), tmp_path / "home")
    with pytest.raises(HelmError) as caught:
        await helm.run("list", kubeconfig=kubeconfig("https://127.0.0.1:1"))
    assert str(caught.value) == f"Error: {NAMES}"
