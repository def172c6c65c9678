"""The operator's log lines, safe to read on a terminal whatever a target wrote.

Messages built from target values are cut and escaped where they are made,
but a traceback quotes the exception's own text, which may hold what a target
answered: the formatter escapes the whole line once more, keeping its
newlines, and caps it, so no log line moves a terminal's cursor or fills a
log store.
"""

from __future__ import annotations

import logging

from modelplane.untrusted import printable

# Room for a long traceback; a line past it is a target's text, not ours.
MAX_LOG_RECORD = 65536


class PrintableFormatter(logging.Formatter):
    """A formatter whose every record is printable (newlines kept) and capped."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), MAX_LOG_RECORD, newlines=True)


def configure(verbose: bool) -> None:
    """Log to stderr at INFO (DEBUG with ``verbose``) through ``PrintableFormatter``."""
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    # force: whatever configured the root logger first (an import, a test
    # runner), these lines go through the formatter.
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True
    )
    if not verbose:
        # One line per HTTP request drowns what a person needs to read.
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
