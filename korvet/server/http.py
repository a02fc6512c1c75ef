"""A small asyncio HTTP/1.1 server for the operations endpoint (probes and /metrics).

GET and HEAD, one request per connection (``Connection: close``), a few routes; POST only
for the routes registered as such (the test-only clock, korvet/server/test_clock.py).
It runs on the broker's event loop so that a probe sees what the broker sees (a
readiness check awaits Redis on the same loop the Kafka handlers use) and costs no
thread. Bad or slow requests are answered 400/408 and closed; nothing a client sends
reaches the Kafka side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("korvet.http")

_READ_TIMEOUT = 10.0
_MAX_HEADER_LINES = 100
_CLOSE_SECONDS = 5.0  # how long stopping waits for the open connections, then the server
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    query: str = ""  # the part after "?", undecoded


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Route = Callable[[Request], Awaitable[Response]]


class _BadRequest(Exception):
    pass


@dataclass
class HttpServer:
    routes: Mapping[str, Route]
    host: str = "127.0.0.1"
    post_routes: Mapping[str, Route] = field(default_factory=dict)
    port: int = 8080
    _server: asyncio.base_events.Server | None = field(default=None, init=False)
    _clients: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port,
                                                  reuse_address=True, limit=16 * 1024)
        sock: socket.socket = self._server.sockets[0]
        port: int = sock.getsockname()[1]
        return port

    async def close(self) -> None:
        """Stop listening, end the open connections (a scraper keeps its connection alive),
        then await the server's close, which from Python 3.12.1 waits for them; bounded."""
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=_CLOSE_SECONDS)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), _CLOSE_SECONDS)

    async def _on_connection(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), _READ_TIMEOUT)
            except TimeoutError:
                await _write(writer, Response(408, b"request not received in time\n"), False)
                return
            except (_BadRequest, ValueError, asyncio.LimitOverrunError) as exc:
                await _write(writer, Response(400, f"bad request: {exc}\n".encode()), False)
                return
            if request is None:
                return
            response = await self._respond(request)
            await _write(writer, response, request.method == "HEAD")
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if request.method == "POST" and path in self.post_routes:
            route: Route | None = self.post_routes[path]
        elif request.method not in ("GET", "HEAD"):
            return Response(405, b"only GET and HEAD\n")
        else:
            route = self.routes.get(path)
        if route is None:
            known = "\n".join(sorted(self.routes))
            return Response(404, f"no such path; try one of:\n{known}\n".encode())
        try:
            return await route(request)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path)
            return Response(500, b"internal error (see the broker's log)\n")


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest("expected 'METHOD /path HTTP/1.x'")
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            target = urlsplit(parts[1])
            return Request(parts[0].upper(), target.path, headers, target.query)
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    raise _BadRequest("too many header lines")


async def _write(writer: asyncio.StreamWriter, response: Response, head_only: bool) -> None:
    reason = _REASONS.get(response.status, "")
    head = (f"HTTP/1.1 {response.status} {reason}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n").encode("latin-1")
    writer.write(head if head_only else head + response.body)
    await writer.drain()
