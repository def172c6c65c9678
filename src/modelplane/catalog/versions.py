"""Ordering version strings the way the upstream release tags mean them.

Semantic versions, with what the pinned charts actually publish allowed
for: a leading ``v``, and pre-releases of pre-releases. Grove tags
``v0.1.0-alpha.12-rc1``, ``-rc2``, then ``v0.1.0-alpha.12``: strict SemVer
would read ``12-rc2`` as one alphanumeric identifier and order it after
``alpha.13`` and after ``alpha.12`` itself. Here each hyphen opens a
pre-release of what precedes it, so ``alpha.12-rc2 < alpha.12 < alpha.13``.
Within a part, digits compare as numbers and letters as text, numbers
before text (as SemVer orders identifiers), so ``rc2 < rc10``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_VERSION = re.compile(
    r"^[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_RUN = re.compile(r"\d+|[A-Za-z]+")


@dataclass(frozen=True, order=True)
class Version:
    key: tuple[Any, ...]
    text: str = field(compare=False)

    @property
    def release(self) -> tuple[int, int, int]:
        """major, minor, patch: what is left once the pre-releases are dropped."""
        major, minor, patch = self.key[:3]
        return major, minor, patch

    @property
    def is_prerelease(self) -> bool:
        return len(self.key[3]) > 1

    def __str__(self) -> str:
        return self.text


def parse_version(text: str) -> Version | None:
    """The version ``text`` names, or None when it is not a version (``latest``, a digest)."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch, pre = match.groups()
    levels = [level for level in (pre or "").split("-") if level]
    # A version with fewer pre-release levels comes after one with more:
    # the release after its release candidates. (1,) sorts after any (0, ...).
    pre_key = (*((0, _level(level)) for level in levels), (1,))
    return Version((int(major), int(minor or 0), int(patch or 0), pre_key), text)


def _level(level: str) -> tuple[tuple[int, Any], ...]:
    return tuple(
        (0, int(run)) if run.isdigit() else (1, run.lower()) for run in _RUN.findall(level)
    )
