"""Which pytest-xdist worker runs which tests (tests/conftest.py puts it in place).

A test module is one unit of work: it runs on one worker, in its order.
The modules that use a machine-wide fixture, one only a single process on
the machine may hold, are one unit together, so they share a worker.

Which modules those are is read from their source, on the controller,
which never collects: pytest 9 no longer lets a worker rename its tests,
the way xdist's own ``--dist loadgroup`` carries group names across.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

WORKERS = 3
# Fixture -> the unit its modules share. sim_target runs Envoy Gateway
# v1.8.3, which binds fixed ports whatever it is configured with.
MACHINE_WIDE = {"sim_target": "machine-wide:envoy-gateway"}


@functools.cache
def machine_wide_unit(path: Path) -> str | None:
    """The shared unit of a module that names a machine-wide fixture, else None."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for fixture, unit in MACHINE_WIDE.items():
        if re.search(rf"\b{fixture}\b", text):
            return unit
    return None


def unit_of(nodeid: str, root: Path) -> str:
    """The unit of work a test belongs to: its module's path, or a machine-wide unit."""
    module = nodeid.split("::", 1)[0]
    return machine_wide_unit(root / module) or module


def module_groups(config: Any, log: Any) -> Any:
    """xdist's scheduler of whole units, with :func:`unit_of` as the unit."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, Path(self.config.rootpath))

    return ModuleGroups(config, log)
