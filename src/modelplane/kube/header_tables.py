"""No HPACK header tables on a target's HTTP/2 connection.

HPACK (RFC 7541) keeps a table of recent headers at each end of a
connection, so that a header sent again is sent as an index. A target's
connection carries its watches, whose headers cross once in minutes, and
httpcore2 leaves both tables at their default 4 KiB: the headers the
server sent and those we sent, held as Python tuples of bytes, 8.4 KiB a
target by a census of a settled shard (docs/sizing.md). Here neither end
keeps one: the server is asked for none for its answers
(SETTINGS_HEADER_TABLE_SIZE 0; it stops using ours once it has our
SETTINGS), and our encoder keeps none for our requests, whatever the
server's SETTINGS allow (an encoder may use less, RFC 7541 section 4.2).
"""

from __future__ import annotations

import h2.connection
import hpack
from h2.settings import SettingCodes


class TablelessEncoder(hpack.Encoder):
    """An HPACK encoder that keeps no table, whatever size the server allows.

    h2 sets its encoder's table to the size each SETTINGS of the server's
    allows (kube-apiserver's say 4096); this one stays at none, and its
    first header block tells the server so.
    """

    def __init__(self) -> None:
        super().__init__()
        # As hpack's own setter does: the table goes to 0, and the next
        # header block says so.
        self.header_table.maxsize = 0
        self.table_size_changes.append(0)

    @property
    def header_table_size(self) -> int:
        return int(self.header_table.maxsize)

    @header_table_size.setter
    def header_table_size(self, _allowed: int) -> None:
        pass


def keep_no_header_tables(state: h2.connection.H2Connection) -> None:
    """Ask the server for no table and keep none: sent with the connection's next write."""
    state.update_settings({SettingCodes.HEADER_TABLE_SIZE: 0})
    state.encoder = TablelessEncoder()
