"""Messages said once each, when they appear, not on every resync that finds them again.

A warning a reconcile finds (an out-of-range pin, an unsafe connection,
drift only reported) stands until someone acts; an event on every resync
would bury the stack's other events. Only what was said last time is
kept: a message that goes away and comes back is said again, and a new
process says each once. Safe to lose.
"""

from __future__ import annotations

from collections.abc import Iterable


class Announced:
    """The messages said last time; ``new`` tells which of this time's to say."""

    def __init__(self) -> None:
        self._said: frozenset[str] = frozenset()

    def new(self, messages: Iterable[str]) -> list[str]:
        """Those of ``messages`` not said last time, sorted; all of them count as said now."""
        current = frozenset(messages)
        fresh = sorted(current - self._said)
        self._said = current
        return fresh
