"""The progress view of ``apply`` and ``delete``: lines from the plan, on a terminal and in a pipe.

The view is fed as the commands feed it (a plan's lines, the reconciler's
events, a note, the result), in a child process whose stdout is a pipe or
a pseudo-terminal, so what is checked is what a person or a program gets.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from tests.terminal import on_a_pty, terminal_env

from modelplane.api.models import ServingStack
from modelplane.cli.progress import Line, Phase, lines_of, teardown_lines
from modelplane.plan import plan
from modelplane.plan.observed import Observed

from .conftest import installed, manifest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What a hostile target could put in a failure or an event: colour, a
# cursor move and a title change, and a bell.
HOSTILE = "\x1b[31mred\x1b[2K\x1b]0;title\x07 done"

# Fed as apply feeds it: a plan's lines, then an event, a failure, a note, the result.
FEED = f"""
import json
import sys
from modelplane.api.models import ServingStack
from modelplane.cli.progress import lines_of, progress_for
from modelplane.plan import plan

stack = ServingStack.model_validate(json.loads({json.dumps(manifest())!r}))
p = plan(stack, None)
view = progress_for(sys.stdout, as_json="--json" in sys.argv, title="modelplane apply: west")
view.lines(lines_of(p))
view.event("Normal", "InstallSucceeded", "install of mp-cert-manager succeeded")
view.lines(lines_of(p, {{"cert-manager": {HOSTILE!r}}}))
view.note("Progressing: waiting")
view.note("Progressing: waiting")
view.finish(False, "ActionFailed: cert-manager: " + {HOSTILE!r})
view.close()
"""


def _in_a_pipe(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", FEED, *args],
        capture_output=True,
        text=True,
        env=terminal_env(100),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _components() -> list[str]:
    stack = ServingStack.model_validate(manifest())
    return [line.component for line in lines_of(plan(stack, None))]


def test_in_a_pipe_one_plain_line_per_change_and_event() -> None:
    out = _in_a_pipe()
    assert "\x1b" not in out  # no escape code of ours, nor the target's
    lines = out.splitlines()
    components = _components()
    # Each component once when first seen, cert-manager again when it failed;
    # one line for the event, one for the note said twice, one for the result.
    assert len(lines) == len(components) + 1 + 1 + 1 + 1
    assert sum("cert-manager: installing" in line for line in lines) == 1
    failed = [line for line in lines if "cert-manager: failed: " in line]
    assert len(failed) == 1
    assert "\\u001b[31mred" in failed[0]  # the target's ESC shown escaped
    assert sum("event Normal InstallSucceeded" in line for line in lines) == 1
    assert sum("Progressing: waiting" in line for line in lines) == 1
    assert lines[-1].split("] ", 1)[1].startswith("not done: ActionFailed: cert-manager")
    assert "envoy-gateway: waiting for cert-manager" in out


def test_with_json_one_object_per_line() -> None:
    records = [json.loads(line) for line in _in_a_pipe("--json").splitlines()]
    states = {r["component"]: r["state"] for r in records if "component" in r}
    assert states["cert-manager"] == "failed"
    assert states["envoy-gateway"] == "waiting"
    assert [r["event"]["reason"] for r in records if "event" in r] == ["InstallSucceeded"]
    assert records[-1]["result"] == "not done"
    assert "\x1b" not in json.dumps(records) and "\\u001b" in records[-1]["message"]
    assert all(isinstance(r["time"], float | int) for r in records)


def test_on_a_terminal_a_live_view_redrawn_in_place() -> None:
    raw = on_a_pty([sys.executable, "-c", FEED], columns=100)
    # Redrawn in place: the cursor goes up over the last frame.
    assert re.search(r"\x1b\[\d*A", raw) or "\x1b[1A" in raw or "\x1b[2K" in raw
    assert "\x1b[" in raw  # colour
    # The target's own escapes never reach the terminal as escapes.
    assert "\x1b[31mred" not in raw and "\x1b]0;title" not in raw and "\x07" not in raw
    screen = ANSI.sub("", raw).replace("\r\n", "\n")
    last = screen[screen.rindex("modelplane apply: west") :]
    for component in _components():
        assert component in last
    assert "waiting for cert-manager" in last
    assert "failed: \\u001b[31mred" in last
    assert "InstallSucceeded" in last
    assert "not done: ActionFailed" in last
    # Each component line carries its elapsed time.
    assert re.search(r"cert-manager .*\d+s", last)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (Line("a", Phase.WAITING, "waits for b, c"), "waiting for b, c"),
        (Line("a", Phase.WAITING, "an admission webhook: x"), "waiting: an admission webhook: x"),
        (Line("a", Phase.INSTALLING, "install (Absent)"), "installing: install (Absent)"),
        (Line("a", Phase.READY), "ready"),
        (Line("a", Phase.FAILED, "helm said no"), "failed: helm said no"),
        (Line("a", Phase.FAILED), "failed: no reason given"),
        (Line("a", Phase.REMOVED), "removed"),
    ],
)
def test_a_line_says_what_it_waits_for_or_why_it_failed(line: Line, shown: str) -> None:
    assert line.describe() == shown


def test_lines_of_a_fresh_plan_and_of_failures() -> None:
    p = plan(ServingStack.model_validate(manifest()), None)
    by_name = {line.component: line for line in lines_of(p)}
    assert by_name["cert-manager"].phase is Phase.INSTALLING
    assert by_name["envoy-gateway"] == Line(
        "envoy-gateway", Phase.WAITING, "waits for cert-manager"
    )
    assert by_name["configuration"].phase is Phase.INSTALLING
    failed = {
        line.component: line
        for line in lines_of(
            p, {"cert-manager": "boom", "trust-manager": "hook"}, {"trust-manager"}
        )
    }
    assert failed["cert-manager"] == Line("cert-manager", Phase.FAILED, "boom")
    assert failed["trust-manager"].phase is Phase.WAITING
    assert "admission webhook" in failed["trust-manager"].detail


def test_teardown_lines_say_what_is_still_there() -> None:
    stack = ServingStack.model_validate(manifest())
    fresh = plan(stack, Observed())
    assert {line.phase for line in teardown_lines(fresh)} == {Phase.REMOVED}
    everything = installed(fresh)
    only_cert_manager = everything.model_copy(
        update={"releases": {"mp-cert-manager": everything.releases["mp-cert-manager"]}}
    )
    lines = {line.component: line for line in teardown_lines(plan(stack, only_cert_manager))}
    assert lines["cert-manager"] == Line(
        "cert-manager", Phase.REMOVING, "uninstall release mp-cert-manager"
    )
    assert lines["envoy-gateway"].phase is Phase.REMOVED
    provided = ServingStack.model_validate(manifest(components="Provided"))
    assert {line.phase for line in teardown_lines(plan(provided, Observed()))} <= {
        Phase.KEPT,
        Phase.REMOVED,
    }
