"""A directory served over HTTP on loopback, for tests that fetch files by URL."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 until the block ends; yields the base URL.

    Files are read at each request, so what is written under ``directory``
    after the server started is served too.
    """
    with serve_requests(functools.partial(_Quiet, directory=os.fspath(directory))) as url:
        yield url


@contextlib.contextmanager
def serve_requests(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Run an HTTP request handler on 127.0.0.1 until the block ends; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A short poll interval: shutdown() waits until serve_forever next looks.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
