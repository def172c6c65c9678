"""Which ServingStacks one operator shard serves: namespaces and a label selector.

The selector is handed to the hub as the ``labelSelector`` of kopf's LIST and
WATCH of ServingStacks (``settings.watching.label_selectors``, kopf 1.45), so
the filter is the API server's: a shard never sees another shard's stacks,
so no daemon, timer, finalizer or teardown of its can touch them, and it
keeps no memory for them. It is checked here first, so that a typo is a
usage error naming ``--selector`` rather than a watch the hub refuses in a
loop. The grammar is the API server's equality- and set-based one
(``plan.selector``).
"""

from __future__ import annotations

from modelplane.plan.selector import canonical, parse_labels


def normalize_selector(text: str) -> str:
    """The selector in canonical form; ValueError saying which requirement is wrong."""
    if not text.strip():
        raise ValueError("the selector is empty; leave the option out to serve every stack")
    return canonical(parse_labels(text))
