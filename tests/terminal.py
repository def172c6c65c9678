"""A child process whose stdout is a terminal, or a pipe: what a person or a program gets.

Each sets the terminal it depends on (a colour terminal of a given width)
rather than inheriting the caller's: the suite runs under ``TERM=dumb``, with
``NO_COLOR`` set, or in a CI log all the same.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What rich (and most tools) read to decide on colour, besides TERM.
_COLOUR_OVERRIDES = ("NO_COLOR", "FORCE_COLOR", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def terminal_env(columns: int) -> dict[str, str]:
    """The environment of a colour terminal ``columns`` wide, running this checkout's code."""
    env = {k: v for k, v in os.environ.items() if k not in _COLOUR_OVERRIDES}
    env.update(COLUMNS=str(columns), TERM="xterm-256color", PYTHONPATH=str(ROOT / "src"))
    return env


def on_a_pty(args: Sequence[str], *, columns: int, rows: int = 50, timeout: float = 60) -> str:
    """Run ``args`` with stdout on a pseudo-terminal of that size; return what it received.

    Line ends come back as ``\\n`` (the terminal's ``\\r\\n`` undone); the
    command must exit 0, else its stderr is the failure.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=terminal_env(columns),
        cwd=ROOT,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=timeout) == 0, proc.stderr.read() if proc.stderr else ""
    if proc.stderr is not None:
        proc.stderr.close()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def as_colour_terminal(monkeypatch: pytest.MonkeyPatch, columns: int = 100) -> None:
    """Give this process a colour terminal's environment, for a Console a test makes itself."""
    for name in _COLOUR_OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", str(columns))
