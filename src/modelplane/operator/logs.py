"""The operator's log lines, safe to read on a terminal whatever a target wrote.

Messages built from target values are cut and escaped where they are made,
but a traceback quotes the exception's own text, which may hold what a target
answered: the formatter escapes the whole record once more and caps it, so
no log line moves a terminal's cursor or fills a log store. Only a
traceback's own frames start lines: a newline in a message, or in the text
of an exception, is a space, so no text a target wrote reads as a record
of its own (a forged "ERROR ... Ready" line after a real one).
"""

from __future__ import annotations

import logging
import traceback
from types import TracebackType

from modelplane.untrusted import printable

# Room for a long traceback; a line past it is a target's text, not ours.
MAX_LOG_RECORD = 65536

# The parts of a traceback that are Python's, never an exception's text:
# the frames (file, line and our own source) and the chain's headings.
_FRAME_STARTS = ("  File ", "  [Previous line repeated ")
_HEADINGS = frozenset(
    {
        "Traceback (most recent call last):\n",
        "\nThe above exception was the direct cause of the following exception:\n\n",
        "\nDuring handling of the above exception, another exception occurred:\n\n",
    }
)

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


class PrintableFormatter(logging.Formatter):
    """A formatter whose every record is printable, one line but for a traceback, and capped."""

    def format(self, record: logging.LogRecord) -> str:
        # logging.Formatter.format, but choosing whose newlines are kept.
        record.message = printable(record.getMessage(), MAX_LOG_RECORD)
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        # Not the record's cached exc_text, unless that is all there is:
        # another handler's formatter may have made it, newlines and all.
        if record.exc_info:
            exception = self.formatException(record.exc_info)
        else:
            exception = printable(record.exc_text or "", MAX_LOG_RECORD)
        if exception:
            text += "\n" + exception
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return printable(text, MAX_LOG_RECORD, newlines=True)

    def formatException(self, ei: _ExcInfo) -> str:
        if ei[0] is None:
            return ""
        chunks = traceback.TracebackException(ei[0], ei[1], ei[2], compact=True).format()
        out: list[str] = []
        text: list[str] = []  # an exception's own text (message and notes), so far
        for chunk in chunks:
            if chunk in _HEADINGS or chunk.startswith(_FRAME_STARTS):
                out += [_one_line(text), chunk] if text else [chunk]
                text = []
            else:
                text.append(chunk)
        if text:
            out.append(_one_line(text))
        return "".join(out).rstrip("\n")


def _one_line(text: list[str]) -> str:
    # What the exception says, the target's words maybe: one line, so that
    # none of it reads as a record of its own.
    return printable("".join(text).rstrip("\n"), MAX_LOG_RECORD) + "\n"


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
