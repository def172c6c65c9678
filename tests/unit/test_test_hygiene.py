"""No test sleeps for a fixed time to synchronise, and none asserts a duration.

A sleep of a constant stands in for an event the test could wait for (a
task at its wait, a server that has sent, a reconcile that ran) and fails
on a machine loaded enough to be slower than the constant; an assert on
the difference of two clock reads measures the machine as much as the
code. Tests wait with ``tests.waiting`` (a poll with a deadline that bounds
a hang), an ``asyncio.Event``, or a clock the code under test takes; speed
is measured in ``bench/``. This reads every module under tests/ with
``ast`` and finds both.

``asyncio.sleep(0)`` is a turn of the event loop, not a wait, and is let
be. A sleep that is the behaviour under test (a server that trickles) is
named in ``ALLOWED`` with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# (path under tests/, the function's qualified name): why its constant sleep is no synchronisation.
ALLOWED: dict[tuple[str, str], str] = {
    ("unit/test_deadline.py", "_trickle"): (
        "a server that sends one byte at a time, each well within a read timeout: the "
        "trickle is what the request deadline is tested against"
    ),
    ("unit/test_watch_reflector.py", "test_a_burst_of_wake_ups_is_folded_into_one.burst"): (
        "wake-ups spaced by less than the quiet pause are the burst that coalesce folds"
    ),
    (
        "unit/test_watch_reflector.py",
        "test_wake_ups_that_never_pause_are_taken_for_at_most_the_period.forever",
    ): "wake-ups that never pause, the stream that only coalesce's period ends",
    ("testenv/fleet.py", "wait_for_discovery"): (
        "the harness's poll between reads of discovery, under its own deadline; bench/ "
        "uses it too, where a test's WaitTimeout is not wanted"
    ),
    ("testenv/fleet.py", "FleetServer.start"): (
        "the harness's poll for the fleet server's address file, under its own deadline, "
        "ended early when the process exits"
    ),
}

_SLEEPS = {"sleep"}
_CLOCKS = {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}


@dataclass(frozen=True)
class Finding:
    where: str  # the function's qualified name, or "<module>"
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.where} line {self.line}: {self.what}"


def _is_sleep_of_a_constant(node: ast.Call) -> bool:
    """``time.sleep(2)``, ``asyncio.sleep(0.05)``, ``sleep(1)``; not ``sleep(0)``, ``sleep(x)``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _SLEEPS or len(node.args) != 1:
        return False
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Name) and func.value.id in {"time", "asyncio", "trio", "anyio"}
    ):
        return False  # a fake's own sleep (self.sleep, clock.sleep) is the test's to call
    arg = node.args[0]
    return isinstance(arg, ast.Constant) and isinstance(arg.value, int | float) and arg.value > 0


def _is_clock_read(node: ast.AST) -> bool:
    """``time.monotonic()``, ``perf_counter()``, ``loop.time()``, ``get_running_loop().time()``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in _CLOCKS
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _CLOCKS:
        return True
    if func.attr != "time":
        return False
    owner = func.value
    if isinstance(owner, ast.Name):
        return owner.id == "loop"
    return isinstance(owner, ast.Call) and getattr(owner.func, "attr", None) in {
        "get_running_loop",
        "get_event_loop",
    }


def _clock_difference(
    node: ast.AST, durations: set[str], timers: set[str], instants: frozenset[str] = frozenset()
) -> bool:
    """Whether ``node`` holds a difference of clock reads, or a name or call that is one."""
    for sub in ast.walk(node):
        if _is_duration(sub, instants):
            return True
        if isinstance(sub, ast.Name) and sub.id in durations:
            return True
        if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) in timers:
            return True
    return False


def _is_duration(node: ast.AST | None, instants: frozenset[str] = frozenset()) -> bool:
    """``end - start`` where one side reads a clock, or names a read (``instants``).

    Not a comparison of one: that is a bool.
    """
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
        return False
    return any(
        _is_clock_read(n) or (isinstance(n, ast.Name) and n.id in instants)
        for side in (node.left, node.right)
        for n in ast.walk(side)
    )


def _own_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Return]:
    """The function's own return statements, not those of functions nested in it."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            yield node
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def _timers(tree: ast.Module) -> set[str]:
    """The module's functions that return a difference of clock reads (a duration)."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_is_duration(r.value) for r in _own_returns(node))
    }


class _Scan(ast.NodeVisitor):
    def __init__(self, timers: set[str]) -> None:
        self.timers = timers
        self.scope: list[str] = []
        self.durations: list[set[str]] = [set()]
        self.instants: list[set[str]] = [set()]
        self.findings: list[Finding] = []

    def _where(self) -> str:
        return ".".join(self.scope) or "<module>"

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.durations.append(set(self.durations[-1]))
        self.instants.append(set(self.instants[-1]))
        self.generic_visit(node)
        self.durations.pop()
        self.instants.pop()
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _differs(self, node: ast.AST) -> bool:
        instants = frozenset(self.instants[-1])
        return _clock_difference(node, self.durations[-1], self.timers, instants)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if _is_clock_read(node.value):
            self.instants[-1].update(names)
        elif self._differs(node.value):
            self.durations[-1].update(names)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_sleep_of_a_constant(node):
            self.findings.append(Finding(self._where(), node.lineno, ast.unparse(node)))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        compares = [n for n in ast.walk(node.test) if isinstance(n, ast.Compare)]
        if any(self._differs(c) for c in compares):
            self.findings.append(
                Finding(self._where(), node.lineno, f"asserts a duration: {ast.unparse(node.test)}")
            )
        self.generic_visit(node)


def findings(source: str) -> list[Finding]:
    """What the rule finds in one module's source."""
    tree = ast.parse(source)
    scan = _Scan(_timers(tree))
    scan.visit(tree)
    return scan.findings


def _modules() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if "fixtures" not in path.relative_to(TESTS).parts:
            yield path


def test_no_test_sleeps_to_synchronise_or_asserts_a_duration() -> None:
    found = []
    for path in _modules():
        relative = path.relative_to(TESTS).as_posix()
        for f in findings(path.read_text()):
            if f.what.startswith("asserts") or (relative, f.where) not in ALLOWED:
                found.append(f"tests/{relative}: {f}")
    assert not found, "wait for the event instead, or measure it in bench/:\n" + "\n".join(found)


def test_every_allowed_sleep_is_still_there() -> None:
    # An entry whose sleep went away would let a new one in unseen.
    present = {
        (path.relative_to(TESTS).as_posix(), f.where)
        for path in _modules()
        for f in findings(path.read_text())
    }
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        # Sleeps of a constant, in a test and in a helper nested in one.
        ("import time\ndef test_x():\n    time.sleep(0.2)\n", ["test_x line 3"]),
        (
            "import asyncio\nasync def test_x():\n    async def ev():\n"
            "        await asyncio.sleep(0.05)\n",
            ["test_x.ev line 4"],
        ),
        ("from time import sleep\ndef f():\n    sleep(15)\n", ["f line 3"]),
        # A turn of the loop, an interval passed in, a fake's own sleep: let be.
        ("import asyncio\nasync def test_x():\n    await asyncio.sleep(0)\n", []),
        ("import time\ndef poll(interval):\n    time.sleep(interval)\n", []),
        ("async def test_x(clock):\n    await clock.sleep(5)\n", []),
        # Durations asserted: inline, through a name, through a helper.
        (
            "import time\ndef test_x():\n    t = time.monotonic()\n"
            "    assert time.monotonic() - t < 0.2\n",
            ["test_x line 4"],
        ),
        (
            "import asyncio\nasync def test_x():\n"
            "    s = asyncio.get_running_loop().time()\n"
            "    took = asyncio.get_running_loop().time() - s\n    assert took < 0.1\n",
            ["test_x line 5"],
        ),
        (
            "import time\ndef _timed():\n    s = time.perf_counter()\n"
            "    return time.perf_counter() - s\n"
            "def test_x():\n    took = _timed()\n    assert took <= LIMIT\n",
            ["test_x line 7"],
        ),
        # Through an instant read before: ``took = seen - exported``.
        (
            "import time\ndef test_x(seen):\n    exported = time.monotonic()\n"
            "    took = seen['firing'] - exported\n    assert took <= BOUND\n",
            ["test_x line 5"],
        ),
        # A helper whose nested check returns a comparison of a duration is no timer.
        (
            "import time\ndef _lists():\n    def quiet():\n"
            "        return time.monotonic() - s >= 3.0\n    return {}\n"
            "def test_x():\n    listed = _lists()\n    assert listed == {}\n",
            [],
        ),
        # Clock reads that are no duration asserted: a deadline, an expiry, a print.
        (
            "import time\ndef test_x():\n    end = time.monotonic() + 5\n    assert end > 0\n",
            [],
        ),
        (
            "import time\ndef test_x(token):\n    before = time.time()\n"
            "    assert before + 110 < token.expires_at < time.time() + 130\n",
            [],
        ),
        (
            "import time\ndef test_x():\n    s = time.monotonic()\n"
            "    print(f'{time.monotonic() - s:.1f}s')\n",
            [],
        ),
    ],
)
def test_findings(source: str, found: list[str]) -> None:
    assert [f"{f.where} line {f.line}" for f in findings(source)] == found
