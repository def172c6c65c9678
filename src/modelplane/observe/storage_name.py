"""The name Helm's Secret storage gives one revision of a release, both ways.

Helm keeps revision ``v`` of release ``r`` in the Secret
``sh.helm.release.v1.<r>.v<v>`` (pkg/storage/driver, ``makeKey``: the
storage's prefix, the name, and the version). The operator writes the name
to say which Secret it read, and parses it to tell Helm's Secrets from
look-alikes; one place holds both, so they cannot disagree.
"""

from __future__ import annotations

import re

PREFIX = "sh.helm.release.v1."
# A revision is a positive number; Helm's are far below a billion.
_NAME = re.compile(re.escape(PREFIX) + r"(.+)\.v([1-9][0-9]{0,8})")


def storage_name(release: str, revision: int) -> str:
    """The Secret that stores revision ``revision`` of ``release``."""
    return f"{PREFIX}{release}.v{revision}"


def parse_storage_name(name: str) -> tuple[str, int] | None:
    """The release and revision a Secret's name stores; None unless Helm would name one so."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))
