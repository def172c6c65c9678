"""What the watches keep of the kinds a requirement names: their names.

An ``ObjectExists`` requirement (the DRA driver's DeviceClass) is judged by
the names of every object of its kind (``to_observed`` reads
``metadata.name``, ``Observed.has_object`` tests it), and each target
watches that kind whole. Kept whole, every target held each DeviceClass's
selectors, its managedFields and the rest of its metadata, read by nothing.
Kept: the name, the namespace the copy keys it by, and the resourceVersion
``observe.writes`` compares. A DeviceClass is named the same on every
target: its name is kept once for all of them.
"""

from __future__ import annotations

import sys
from typing import Any

from modelplane.untrusted import as_dict, pick


def named_outline(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of one object of a kind a requirement names."""
    metadata = pick(as_dict(obj.get("metadata")), ("name", "namespace", "resourceVersion"))
    for shared in ("name", "namespace"):
        if isinstance(metadata.get(shared), str):
            metadata[shared] = sys.intern(metadata[shared])
    return {"metadata": metadata}
