"""Whether a library still has the private names a patch of it rests on.

Where the project patches a library (``kube.http2`` over httpcore2 and h2),
it lists each private name it reads, sets or overrides, and checks them
when it is imported: a library that renamed one fails at start, not as a
connection that stalls.
"""

from __future__ import annotations


def missing_names(relied_on: dict[object, tuple[str, ...]]) -> list[str]:
    """The names of ``relied_on`` its owner does not define, nor mention in its code.

    An attribute set in a method is not on the class: it counts as present
    when one of the class's functions names it (``co_names``).
    """
    missing = []
    for owner, names in relied_on.items():
        mentioned = _mentioned(owner)
        for name in names:
            if not hasattr(owner, name) and name not in mentioned:
                missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return missing


def _mentioned(owner: object) -> set[str]:
    if not isinstance(owner, type):
        return set()
    names: set[str] = set()
    for klass in owner.__mro__:
        for value in vars(klass).values():
            code = getattr(value, "__code__", None)
            if code is not None:
                names.update(code.co_names)
    return names
