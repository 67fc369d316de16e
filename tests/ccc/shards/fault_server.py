"""A fault-injecting HTTP server for the remote-reading tests, on 127.0.0.1 with an ephemeral port.

It serves files held in memory with ``Range`` (``bytes=N-``), ``If-Range`` and strong ``ETag`` support,
HTTP/1.1 keep-alive, and consumes a per-path queue of faults, one per request (``add_faults``); a path's
standing fault (``always``) answers every request once its queue is empty:

- ``("status", code, retry_after)``: answer ``code`` (e.g. 503, 429) with an optional ``Retry-After``;
  ``("status", code, retry_after, body)`` sends ``body`` with it (an HTML error page).
- ``("reset", k)``: announce the full length, send ``k`` body bytes, then reset the connection (RST).
- ``("short", k)``: announce the full length, send ``k`` body bytes, then close cleanly (a short body).
- ``("stall", k, seconds)``: send ``k`` body bytes, then go silent for ``seconds`` before closing.
- ``("no-range",)``: ignore ``Range`` and answer 200 with the whole file; ``("no-range", k)`` sends only
  its first ``k`` bytes, then closes.
- ``("replace", data)``: replace the file with ``data`` (new ETag), then answer normally.
- ``("silent", seconds)``: send nothing (not even the headers) for ``seconds``, then close.
- ``("trickle", seconds)``: announce the full length, then send one byte every ``seconds``.
- ``("no-length", k)``: answer 200 without ``Content-Length``, send ``k`` bytes, then close.
- ``("html",)``: answer 200 with an HTML error page instead of the file.
- ``("gzip",)``: answer 200 with the file gzip-compressed (``Content-Encoding: gzip``), whatever was asked.
- ``("redirect", location)``: answer 302 to ``location`` (a path of this server or any URL).
- ``("late", seconds, code)``: wait ``seconds``, then answer ``code`` (a failure that comes after others).
"""

from __future__ import annotations

import gzip
import hashlib
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that drops its connection is what these tests do; anything else is printed."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FaultServer:
    """Start with ``with FaultServer(files) as server``; ``server.url(path)`` is a file's URL."""

    def __init__(self, files: dict[str, bytes], send_etag: bool = True) -> None:
        self.files = dict(files)
        self.send_etag = send_etag
        self.faults: dict[str, deque[tuple[Any, ...]]] = defaultdict(deque)
        self.always: dict[str, tuple[Any, ...]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        """The URL of ``path`` (``"/a/b.tar"``)."""
        return self.base + path

    def add_faults(self, path: str, *faults: tuple[Any, ...]) -> None:
        """Queue ``faults`` for the next requests of ``path``, one each."""
        with self.lock:
            self.faults[path].extend(faults)

    def etag(self, path: str) -> str:
        """The strong ETag of the file at ``path`` now."""
        return '"' + hashlib.sha256(self.files[path]).hexdigest()[:16] + '"'


def _handler(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            # a client going through this server as its proxy asks for the absolute URL
            path = urllib.parse.urlsplit(self.path).path if "://" in self.path else self.path
            with server.lock:
                server.requests.append((path, dict(self.headers)))
                fault = server.faults[path].popleft() if server.faults[path] else server.always.get(path)
                if fault is not None and fault[0] == "replace":
                    server.files[path] = fault[1]
                data = server.files.get(path)
            kind = None if fault is None else fault[0]
            if kind == "silent":
                time.sleep(fault[1])
                self.close_connection = True
                return
            if kind == "redirect":
                self._answer(302, b"", {"Location": fault[1]})
                return
            if kind == "late":
                time.sleep(fault[1])
                self._answer(fault[2], b"", {})
                return
            if data is None:
                self._answer(404, b"", {})
                return
            if kind == "status":
                headers = {} if fault[2] is None else {"Retry-After": str(fault[2])}
                self._answer(fault[1], fault[3] if len(fault) > 3 else b"", headers)
                return
            if kind == "html":
                self._answer(200, b"<html><body>Service temporarily unavailable</body></html>", {})
                return
            if kind == "gzip":
                self._answer(200, gzip.compress(data, mtime=0), {"Content-Encoding": "gzip"})
                return
            etag = server.etag(path)
            headers = {"ETag": etag} if server.send_etag else {}
            start = 0
            requested = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if requested and (fault is None or fault[0] != "no-range") and (if_range is None or if_range == etag):
                start = int(requested.removeprefix("bytes=").rstrip("-"))
                if start >= len(data):
                    self._answer(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                    return
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            status = 206 if "Content-Range" in headers else 200
            self._answer(status, data[start:], headers, fault)

        def _answer(self, status: int, body: bytes, headers: dict[str, str], fault: tuple | None = None) -> None:
            kind = None if fault is None else fault[0]
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if kind != "no-length":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if kind == "trickle":
                for position in range(len(body)):
                    self.wfile.write(body[position : position + 1])
                    self.wfile.flush()
                    time.sleep(fault[1])
                return
            if kind in ("reset", "short", "stall", "no-length") or (kind == "no-range" and len(fault) > 1):
                self.wfile.write(body[: fault[1]])
                self.wfile.flush()
                if kind == "stall":
                    time.sleep(fault[2])
                if kind == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler
