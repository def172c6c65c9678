"""What a read of a target fails with, when the target answered in a way we cannot use.

Apart from ``client.py`` (which names them for its callers) so that the
budgets' ``Meter`` can raise them without importing the client.
"""

from __future__ import annotations

from modelplane.kube.budget import Budget


class TargetError(Exception):
    """The target could not be reached or answered in a way we cannot use."""


class ApiStatusError(TargetError):
    """The API server answered with an error status (403, 404, ...).

    ``reason`` is the answer's Status message, or a description by HTTP status
    code and media type when the answer is not a Kubernetes Status.
    """

    def __init__(self, status: int, path: str, message: str) -> None:
        super().__init__(f"GET {path}: {status} {message}".rstrip())
        self.status = status
        self.path = path
        self.reason = message


class OverBudget(TargetError):
    """A collection on the target holds more than its budget (``kube.budget``): not read further.

    ``collection`` names it by our own request (resource, namespace,
    selectors), never by anything the target answered.
    """

    def __init__(self, collection: str, passed: str, budget: Budget) -> None:
        super().__init__(
            f"{collection} holds {passed}: over the budget of {budget} the operator "
            "reads of one collection, so it is not read; what it holds that is not the "
            "operator's must go"
        )
        self.collection = collection
        self.budget = budget


class OverTotal(OverBudget):
    """A collection refused because a total of many (a target's, the shard's) would pass its own."""

    def __init__(self, collection: str, passed: str, budget: Budget) -> None:
        TargetError.__init__(
            self,
            f"{collection} is not read: {passed}, so this target's collections wait "
            "until it holds less (the other targets are read as before)",
        )
        self.collection = collection
        self.budget = budget
