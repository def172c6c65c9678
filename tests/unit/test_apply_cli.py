"""``apply`` and ``delete`` without a target: inputs, the claim a laptop holds, when a run stops."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from modelplane.actions import claim
from modelplane.actions.claim import ClaimState, LocalRun, StackIdentity
from modelplane.api.models import ServingStack
from modelplane.cli.apply import judge
from modelplane.cli.main import app
from modelplane.cli.options import (
    helm_options,
    parse_duration,
    source_options,
    target_options,
)
from modelplane.cli.target import LocalCredentials, read_kubeconfig
from modelplane.credentials.kubeconfig import parse_kubeconfig
from modelplane.operator.options import OperatorOptions
from modelplane.operator.session import TargetSession
from modelplane.operator.status import Outcome
from modelplane.plan import Plan, plan
from modelplane.plan.decisions import BlockedReason
from modelplane.plan.observed import Observed

from .conftest import installed, manifest

EXEC_API = "client.authentication.k8s.io/v1"
HUB_STACK = StackIdentity(namespace="platform", name="west", uid="1234-abcd")


# -- the claim a laptop holds ------------------------------------------------


def test_a_laptop_claims_as_user_at_host_bounded_and_printable() -> None:
    run = LocalRun.of("ann", "laptop.local")
    assert run.holder == "cli:ann@laptop.local"
    hostile = LocalRun.of("a\x1b[31m/b", "h" * 500)
    assert "\x1b" not in hostile.holder and "/" not in hostile.holder
    assert len(hostile.holder) <= len("cli:@") + 2 * claim.LOCAL_PART_MAX
    assert LocalRun.of("", "").holder == "cli:unknown@unknown"


@pytest.mark.parametrize(
    ("holder", "ours", "state"),
    [
        ("cli:ann@laptop", LocalRun.of("ann", "laptop"), ClaimState.OURS),
        ("cli:bob@laptop", LocalRun.of("ann", "laptop"), ClaimState.HELD),
        (HUB_STACK.holder, LocalRun.of("ann", "laptop"), ClaimState.HELD),
        ("cli:ann@laptop", HUB_STACK, ClaimState.HELD),
        ("", LocalRun.of("ann", "laptop"), ClaimState.FREE),
    ],
)
def test_a_laptop_and_a_hub_refuse_each_other(holder: str, ours: Any, state: ClaimState) -> None:
    assert claim.decide(holder, ours) is state


def test_the_refusal_names_the_other_owner_and_the_way_out() -> None:
    # A laptop refused by a hub's stack: the hub's owner is named.
    message = claim.blocked_message(HUB_STACK.holder, LocalRun.of("ann", "laptop"))
    assert "ServingStack platform/west (uid 1234-abcd)" in message
    # A hub's stack refused by a laptop: who ran it, and how to hand it over.
    message = claim.blocked_message("cli:ann@laptop", HUB_STACK)
    assert "modelplane apply run by ann@laptop" in message
    assert "modelplane delete as ann on laptop" in message
    # A holder that only looks like a laptop's is shown as it is, escaped.
    shown = claim.describe_holder("cli:a\x1b@b")
    assert shown.startswith("holder 'cli:a") and "\x1b" not in shown


# -- when a run stops --------------------------------------------------------


def _plans(serve: Callable[..., Observed]) -> dict[bool, Plan]:
    """A stack's plan with everything in place (True), and before anything is (False)."""
    stack = ServingStack.model_validate(manifest())
    first = plan(stack, serve())
    done = plan(stack, installed(first, serve()))
    done = plan(stack, installed(done, serve()))
    assert not done.work, done.work
    return {True: done, False: plan(stack, None)}


@pytest.mark.parametrize(
    ("given", "wait", "acted_on_nothing", "stops", "done"),
    [
        # Ready, by the operator's own rule.
        ({"plan": True}, False, True, True, True),
        # Work left that this run did something about: go on.
        ({"plan": False}, False, False, False, False),
        # Work left and nothing done: without --wait it stops, with it it waits.
        ({"plan": False}, False, True, True, False),
        ({"plan": False}, True, True, False, False),
        # A failed action stops a run without --wait; a webhook not ready yet does not.
        ({"plan": False, "failures": {"cert-manager": "x"}}, False, False, True, False),
        (
            {
                "plan": False,
                "failures": {"cert-manager": "x"},
                "waiting_on_webhook": frozenset({"cert-manager"}),
            },
            False,
            False,
            False,
            False,
        ),
        # Another owner's target, or a spec, no wait changes.
        ({"blocked_reason": BlockedReason.TARGET_CLAIMED}, True, False, True, False),
        ({"blocked_reason": BlockedReason.INVALID_SPEC}, True, False, True, False),
        # An unreachable target stops a run without --wait; with it, it is retried.
        ({"blocked_reason": BlockedReason.TARGET_UNREACHABLE}, False, False, True, False),
        ({"blocked_reason": BlockedReason.TARGET_UNREACHABLE}, True, False, False, False),
        # A namespace still terminating (a delete just before) is waited out either way.
        (
            {"blocked_reason": BlockedReason.TARGET_NAMESPACE_TERMINATING},
            False,
            False,
            False,
            False,
        ),
    ],
)
def test_when_apply_stops(
    serve_everything: Callable[..., Observed],
    given: dict[str, Any],
    wait: bool,
    acted_on_nothing: bool,
    stops: bool,
    done: bool,
) -> None:
    plans = _plans(serve_everything)
    fields = dict(given)
    if "plan" in fields:
        fields["plan"] = plans[fields["plan"]]
    outcome = Outcome(**fields)
    verdict = judge(outcome, wait=wait, acted_on_nothing=acted_on_nothing)
    assert (verdict is not None) is stops
    if verdict is not None:
        assert verdict.done is done
        if not done and outcome.blocked_reason is not None:
            assert verdict.message.startswith(str(outcome.blocked_reason))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("1.5m", 90), ("2m10s", 130)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5", "0", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_duration(text)


# -- the person's kubeconfig --------------------------------------------------


def _kubeconfig(tmp_path: Path) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "a",
        "clusters": [
            {
                "name": "ca",
                "cluster": {"server": "https://a.example:6443", "certificate-authority": "ca.crt"},
            },
            {"name": "cb", "cluster": {"server": "https://b.example:6443"}},
        ],
        "users": [
            {"name": "ua", "user": {"client-certificate": "certs/a.crt", "client-key": "/k/a.key"}},
            {"name": "ub", "user": {"exec": {"apiVersion": EXEC_API, "command": "./bin/login"}}},
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "ca", "user": "ua"}},
            {"name": "b", "context": {"cluster": "cb", "user": "ub", "namespace": "x"}},
        ],
    }
    path = tmp_path / "kube" / "config"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_context_is_taken_alone_with_its_files_made_absolute(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path)
    base = path.parent.resolve()
    doc = yaml.safe_load(read_kubeconfig(path, None)[0])
    assert doc["current-context"] == "a"
    assert [c["name"] for c in doc["clusters"]] == ["ca"]
    assert doc["clusters"][0]["cluster"]["certificate-authority"] == str(base / "ca.crt")
    user = doc["users"][0]["user"]
    assert user == {"client-certificate": str(base / "certs/a.crt"), "client-key": "/k/a.key"}
    # Another context: its own cluster and user only, the exec command found
    # where kubectl finds it.
    doc = yaml.safe_load(read_kubeconfig(path, "b")[0])
    assert doc["current-context"] == "b"
    assert [u["name"] for u in doc["users"]] == ["ub"]
    assert doc["users"][0]["user"]["exec"]["command"] == str(base / "bin/login")
    # What the session opens it with parses as the operator's connection does.
    assert parse_kubeconfig(read_kubeconfig(path, "b")[0], allow_unsafe=True).cluster.server == (
        "https://b.example:6443"
    )


def test_the_session_reads_a_given_source_and_no_hub() -> None:
    source = LocalCredentials("kubeconfig text")
    session = TargetSession(None, OperatorOptions(), source=source)
    stack = ServingStack.model_validate(manifest())
    credentials = asyncio.run(session.read(stack))
    assert credentials.kubeconfig == "kubeconfig text" and credentials.identity is None


# -- bad input: exit 2, naming what is wrong ---------------------------------


def _stack(tmp_path: Path) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(manifest()))
    return path


@pytest.mark.parametrize("verb", ["apply", "delete"])
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--kubeconfig", "{tmp}/nope"], "does not exist"),
        (["--context", "elsewhere"], "elsewhere"),
        (["--timeout", "soon"], "duration"),
        (["--chart-repository-for", "nosuch=https://c.example"], "nosuch"),
        (["--identity-type", "GoogleApplicationCredentials"], "--identity-file"),
        (["--deny-target-cidr", "not-a-range"], "not-a-range"),
        (["-f", "{tmp}/missing.yaml"], "missing.yaml"),
    ],
)
def test_bad_input_exits_2_naming_it(
    tmp_path: Path, verb: str, args: list[str], named: str
) -> None:
    kubeconfig = _kubeconfig(tmp_path)
    base = ["-f", str(_stack(tmp_path)), "--kubeconfig", str(kubeconfig)]
    given = [a.format(tmp=tmp_path) for a in args]
    # A later flag wins with typer: the case's own -f or --kubeconfig replaces the base one.
    result = CliRunner().invoke(app, [verb, *base, *given])
    assert result.exit_code == 2, result.output
    assert named in result.output + (result.stderr or "")


class _Helm:
    """Stands in for TargetHelm: only whether its runs were killed is looked at."""

    def __init__(self) -> None:
        self.killed = 0

    def kill_running(self) -> None:
        self.killed += 1


def test_at_the_timeout_the_run_stops_says_what_it_waited_for_and_kills_helm() -> None:
    from modelplane.cli.apply import _run
    from modelplane.cli.progress import LineProgress

    progress = LineProgress(out=io.StringIO())

    async def forever() -> Any:
        progress.note("Progressing: release mp-lws: install")
        await asyncio.Event().wait()

    helm = _Helm()
    verdict = _run(forever(), helm, progress, 0.2, "apply")  # type: ignore[arg-type]
    assert not verdict.done
    assert verdict.message == ("apply timed out after 0.2s; Progressing: release mp-lws: install")
    assert helm.killed == 1


def test_apply_takes_runs_image_mirror_flags_and_refuses_a_bad_rule(tmp_path: Path) -> None:
    base = ["apply", "-f", str(_stack(tmp_path)), "--kubeconfig", str(_kubeconfig(tmp_path))]
    result = CliRunner().invoke(app, [*base, "--image-registry-mirror", "no-equals-sign"])
    assert result.exit_code == 2, result.output
    assert "--image-registry-mirror" in result.output


def test_the_mirror_flags_reach_the_reconcilers_options(tmp_path: Path) -> None:
    from modelplane.cli.apply import _prepare

    run = _prepare(
        _stack(tmp_path),
        target_options(_kubeconfig(tmp_path)),
        source_options(
            "https://charts.mirror.internal",
            ["cert-manager=oci://mirror.internal/jetstack"],
            "https://mirror.internal/gaie",
            None,
            ["*=mirror.internal"],
            ["pull"],
        ),
        helm_options(120),
    )
    options = run.options
    assert options.chart_repository == "https://charts.mirror.internal"
    assert options.chart_repository_for == {"cert-manager": "oci://mirror.internal/jetstack"}
    assert options.gaie_manifests_url == "https://mirror.internal/gaie"
    assert options.helm_timeout_seconds == 120
    assert [(r.source, r.target) for r in options.image_mirrors] == [("*", "mirror.internal")]
    assert options.image_pull_secrets == ("pull",)
    # The person's own kubeconfig and identity: their plugins and files are theirs.
    assert options.allow_unsafe_kubeconfig and options.allow_operator_identity
