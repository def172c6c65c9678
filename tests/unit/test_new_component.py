"""Adding a component is adding its module: nothing else is edited.

tests/fixtures/components/gpu_operator.py is a hypothetical GPU Operator,
written as a real component module would be. A fresh interpreter puts that
directory on the catalog package's search path before the package loads, as
if the file were in src/modelplane/catalog/components/, and the test reads
what the product makes of it: the hub CRD (``modelplane crds``), ``modelplane
render``, ``modelplane requirements``, the teardown order and docs/catalog.md's table.
A fresh interpreter, because the catalog, the API models and the CRD are made
once, on import; this one's are left as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

import modelplane
from modelplane.catalog.components import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
EXTRA = ROOT / "tests" / "fixtures" / "components"
MANIFEST = ROOT / "tests" / "golden" / "inputs" / "standard-managed.yaml"

# Loads the catalog package with EXTRA on its __path__, then gathers the outputs.
_PROBE = textwrap.dedent(
    """
    import importlib.util, json, sys
    from pathlib import Path

    spec = importlib.util.find_spec("modelplane.catalog.components")
    spec.submodule_search_locations.append(sys.argv[1])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)

    from typer.testing import CliRunner
    from modelplane.cli.main import app
    from modelplane.api.models import ServingStack
    from modelplane.catalog.reference import components_table
    from modelplane.cli.inputs import load_yaml
    from modelplane.plan import plan
    from modelplane.plan.teardown import UninstallRelease, teardown_steps
    from modelplane.plan.observed import Observed, ObservedRelease

    def run(*args):
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return result.stdout

    p = plan(ServingStack.model_validate(load_yaml(Path(sys.argv[2]))))
    everything = Observed(releases={
        r.name: ObservedRelease(name=r.name, namespace=r.namespace, revision=1,
                                status="deployed", digest=r.digest)
        for r in p.releases
    })
    print(json.dumps({
        "components": [c.name for c in package.COMPONENTS],
        "crds": run("crds"),
        "render": run("render", "-f", sys.argv[2], "--observed", sys.argv[3], "-o", "json"),
        "requirements": run("requirements"),
        "teardown": [s.release for s in teardown_steps(p, everything)
                     if isinstance(s, UninstallRelease)],
        "table": components_table(),
    }))
    """
)


# A target that serves the operator's API and runs a ClusterPolicy with the
# device plugin on, for its requirement and its advisory to judge.
OBSERVED = {
    "apis": {"nvidia.com": {"clusterpolicies": ["v1"]}},
    "cluster": {
        "custom": {
            "nvidia.com/v1/clusterpolicies": [
                {"name": "cluster-policy", "spec": {"devicePlugin": {"enabled": True}}}
            ]
        }
    },
}


def _with_gpu_operator(tmp: Path) -> dict[str, Any]:
    # The modelplane this test imports (the worktree's, under PYTHONPATH=src).
    src = str(Path(modelplane.__file__).resolve().parents[1])
    observed = tmp / "observed.json"
    observed.write_text(json.dumps(OBSERVED))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(EXTRA), str(MANIFEST), str(observed)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_one_new_module_reaches_the_crd_render_requirements_and_teardown(tmp_path: Path) -> None:
    assert "gpu-operator" not in {c.name for c in COMPONENTS}
    got = _with_gpu_operator(tmp_path)

    # Its order (45) puts it after the DRA quota (40), before the driver (50).
    names = got["components"]
    assert names == [
        *[c.name for c in COMPONENTS if c.order < 45],
        "gpu-operator",
        *[c.name for c in COMPONENTS if c.order > 45],
    ]

    # The hub CRD has its version field, with its pin as the default.
    [version] = yaml.safe_load(got["crds"])["spec"]["versions"]
    pins = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["versions"]
    field = pins["properties"]["gpuOperator"]
    assert field["default"] == "v25.3.0"
    assert field["description"] == "NVIDIA GPU Operator chart version."
    assert list(pins["properties"]) == sorted(pins["properties"])

    # render installs its chart, after its dependency, with its values.
    rendered = json.loads(got["render"])
    releases = [r["name"] for r in rendered["releases"]]
    assert "mp-gpu-operator" in releases
    [gpu] = [r for r in rendered["releases"] if r["name"] == "mp-gpu-operator"]
    assert (gpu["version"], gpu["namespace"]) == ("v25.3.0", "gpu-operator")
    assert gpu["values"]["devicePlugin"] == {"enabled": False}
    assert gpu["depends_on"] == ["node-feature-discovery"]
    judged = {
        r["requirement"]: (r["status"], r["message"])
        for r in rendered["requirements"]
        if r["component"] == "gpu-operator"
    }
    assert judged["CRD clusterpolicies.nvidia.com serving v1"][0] == "met"
    # Its own advisory kind reads the observed facts and judges them like any other.
    status, message = judged["GPU Operator ClusterPolicies leave the device plugin off"]
    assert status == "warning"
    assert message.startswith("cluster-policy run the device plugin")

    # The requirements reference has its section.
    assert "### gpu-operator" in got["requirements"]
    assert "- CRD clusterpolicies.nvidia.com serving v1" in got["requirements"]

    # Teardown uninstalls it before what it depends on, after what comes later.
    teardown = got["teardown"]
    assert teardown.index("mp-gpu-operator") < teardown.index("mp-node-feature-discovery")
    assert teardown.index("mp-dra-driver-nvidia-gpu") < teardown.index("mp-gpu-operator")

    # docs/catalog.md's table would gain its row on regeneration.
    assert "| gpu-operator | gpu-operator | v25.3.0 | gpu-operator | both |" in got["table"]
