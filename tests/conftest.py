"""How the suite is spread over worker processes (pytest-xdist), when it is installed.

Most of an integration test's time is spent waiting (an API server
starting, ``helm --wait``, a resync, controllers settling), so the suite
runs on ``WORKERS`` processes even on two cores. Each worker has its own
hub and target API servers, simulated clusters and temporary directory;
every server binds a free port.

What runs where (tests/scheduling.py): each test module stays on one
worker, in its order, so a module's shared fixtures start once and its
tests see one another's leftovers as they always have. The modules that
use a machine-wide fixture (``sim_target``: the Envoy Gateway it runs
binds fixed ports) share one worker.

``-n N`` (``-n0`` for none), ``--dist`` and ``-p no:xdist`` work as usual;
``-n N`` alone keeps the grouping. Naming only files or tests (``pytest
tests/unit/test_x.py``) runs them in this process, as a quick check
expects; naming a directory, or nothing, spreads them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.scheduling import WORKERS, module_groups
from tests.testenv.nodes import HardwareMissingError

TESTS = Path(__file__).resolve().parent
TEST_DEPS = TESTS.parent / "hack" / "test-deps.sh"
IMAGE_TEST = TESTS / "integration" / "test_image.py"

_GROUPED = pytest.StashKey[bool]()


def _whole_directories(config: pytest.Config) -> bool:
    """Whether the run names a directory (or nothing: the testpaths), not just files."""
    paths = [a.split("::", 1)[0] for a in config.args]
    return not paths or any(Path(p).is_dir() for p in paths)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before xdist's own hook, which turns these options into workers.
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    interactive = option.usepdb or option.collectonly or option.looponfail
    chosen = option.numprocesses is not None or option.tx
    if not chosen and not interactive and _whole_directories(config):
        option.numprocesses = WORKERS
    if (option.numprocesses or option.tx) and option.dist == "no":
        # No --dist given: ours rather than xdist's test-by-test default.
        option.dist = "load"
        # In collection order, not by test count: the integration modules,
        # the long ones, are handed out first and the unit tests fill the
        # gaps at the end.
        option.loadscopereorder = False
        config.stash[_GROUPED] = True


def _reaches(config: pytest.Config, path: Path) -> bool:
    """Whether the run's arguments (or the testpaths, given none) reach into ``path``."""
    args = [a.split("::", 1)[0] for a in config.args] or [str(TESTS)]
    for arg in args:
        given = Path(arg).resolve()
        if given == path or path in given.parents or given in path.parents:
            return True
    return False


def _test_deps(config: pytest.Config) -> list[str] | None:
    """``hack/test-deps.sh``'s arguments for this run; None when it needs nothing built.

    Unit tests run at once, as a quick check expects; a run that reaches an
    integration test gets the binaries first, and the operator image when
    it reaches the image test.
    """
    if os.environ.get("MODELPLANE_TEST_DEPS") == "skip" or not _reaches(
        config, TESTS / "integration"
    ):
        # skip: the caller built them already (hack/test-deps.sh is running).
        return None
    return ["--image"] if _reaches(config, IMAGE_TEST) else []


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # Once, in the process that starts the workers, before any of them.
    option = config.option
    if hasattr(config, "workerinput") or option.collectonly:
        return
    args = _test_deps(config)
    if args is None:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nbuilding what the tests need: bash hack/test-deps.sh {' '.join(args)}".rstrip())
        done = subprocess.run(["bash", str(TEST_DEPS), *args], check=False)
    if done.returncode != 0:
        pytest.exit(f"hack/test-deps.sh failed (exit {done.returncode}); see above", 3)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test that found ``../shared``'s GPU profile missing is skipped, saying so.

    The rule for every test, not a check each one must remember: a clone
    with no ``../shared`` beside it runs the suite with skips that name what
    they looked for, never failures (``simulated`` skips the same way).
    """
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(HardwareMissingError):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.stash.get(_GROUPED, False):
        return module_groups(config, log)
    return None
