"""How many TCP connections a process holds to a port, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def connections_to(port: int, pid: int | str = "self") -> int:
    """Established TCP connections of process ``pid`` whose peer's port is ``port``."""
    return len(connection_inodes(port, pid))


def connection_inodes(port: int, pid: int | str = "self") -> set[str]:
    """The socket inodes of ``pid``'s established TCP connections to ``port``.

    A set, so that a test can leave out the connections its process held
    before (a fixture's client kept alive) and count only its own.
    """
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed since the listing
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                found.add(inode)
    return found
