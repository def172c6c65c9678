"""What every command shares in how it answers: ``-o/--output`` and the usage error.

Each command that prints a result takes ``-o/--output`` with the formats it
can print (its own enum), and says bad input the same way: one ``error:``
message on stderr, made safe for a terminal, and exit status 2.
"""

from __future__ import annotations

import enum
import sys
from typing import Any, NoReturn

import typer

from modelplane.api.status_limits import TERMINAL
from modelplane.untrusted import printable

# Bad input, a bad flag, or a target that cannot be read: every command's 2.
EXIT_USAGE = 2


class TextOrJson(enum.StrEnum):
    """The formats of a command that prints for a person or, one object at a time, for a tool."""

    TEXT = "text"
    JSON = "json"


def output_option(help: str | None = None) -> Any:
    """The ``-o/--output`` option, for ``Annotated[TheCommandsFormats, output_option()]``."""
    return typer.Option("-o", "--output", help=help)


def fail(message: str) -> NoReturn:
    """Say ``message`` as the command's error and exit 2.

    The message may quote what a file or the cluster holds: escapes are
    shown, never sent, and its own line breaks (one per wrong field) kept.
    """
    print(f"error: {printable(message, TERMINAL, newlines=True)}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)
