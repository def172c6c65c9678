"""h2's SETTINGS of a target's connection, each kept in a list rather than a deque.

h2 keeps each setting of each end of a connection as a ``collections.deque``
of its values: the one in force, then those sent and not yet acknowledged
(``h2.settings.Settings``). A deque takes 760 bytes however few values it
holds, and a connection has six or seven settings each way: 13 deques,
9.9 KiB a target (a count of a shard's deques by holder, docs/sizing.md),
for values that change once, at the connection's start. A list of one
value takes 64 bytes.

``compact`` swaps each deque for ``_Values``, a list with the one deque
method h2 calls (``popleft``, at an acknowledgement). h2 makes a deque
again for a setting it has not seen (the server's first SETTINGS name
some), so a connection compacts its settings after each change too
(``kube.http2``).
"""

from __future__ import annotations

import collections
from typing import Any

import h2.settings


class _Values(list[Any]):
    """A setting's values: the one in force first, then those not yet acknowledged."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


def compact(settings: h2.settings.Settings) -> None:
    """Keep each of ``settings``' values in a ``_Values``, not a deque."""
    held: dict[Any, Any] = settings._settings
    for key, values in held.items():
        if isinstance(values, collections.deque):
            held[key] = _Values(values)


# h2's private name this rests on: checked by kube.http2's _RELIED_ON.
RELIED_ON = ("_settings",)
