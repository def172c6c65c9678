"""What one LIST has read of a collection, counted against its budget and its target's total."""

from __future__ import annotations

from modelplane.kube.bounded import Cost
from modelplane.kube.budget import Budget, Holdings
from modelplane.kube.target_errors import OverBudget, OverTotal


class Meter:
    """What one LIST has read so far, over all its pages, against the collection's budget.

    Bytes, and what their parse would build (``untrusted.json_cost``), are
    counted as they stream, so a read past the budget stops there and holds
    no more than the budget. With ``holdings`` (a reflector's), what is kept
    is held there too, and the page being read: past the total, the
    collection is refused (``OverTotal``). What the meter took is the
    caller's once the LIST is done; ``release`` gives it back on failure.
    """

    def __init__(self, collection: str, budget: Budget, holdings: Holdings | None = None) -> None:
        self.collection, self.budget, self.holdings = collection, budget, holdings
        self.items = 0
        self.bytes = 0
        # Estimated memory of the pages' objects kept so far.
        self.kept = 0
        self._page = Cost()
        # What is held in ``holdings``: ``kept`` and the page being read.
        self.taken = 0

    def read(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        self._page.add(chunk)
        self._check()
        self._hold(self.kept + self._page.built)

    def listed(self, items: int) -> None:
        self.items += items
        self._check()

    @property
    def page_built(self) -> int:
        """The estimate of the page read last, whole."""
        return self._page.built

    def page_kept(self, built: int) -> None:
        """The page read is parsed, and its objects (maybe outlined) are estimated at ``built``."""
        self.kept += built
        self._page = Cost()
        self._hold(self.kept)

    def release(self) -> None:
        if self.holdings is not None:
            self.holdings.give(self.taken)
        self.taken = 0

    def _hold(self, total: int) -> None:
        if self.holdings is None:
            return
        passed = self.holdings.take(total - self.taken)
        if passed is not None:
            raise OverTotal(self.collection, passed, self.budget)
        self.taken = total

    def _check(self) -> None:
        built = self.kept + self._page.built
        passed = self.budget.exceeded(self.items, self.bytes, built)
        if passed is not None:
            raise OverBudget(self.collection, passed, self.budget)
