"""The asyncio Kafka listener: connections, frames, in-order dispatch.

Each connection reads size-prefixed frames and answers them strictly in the
order they arrived, as Kafka does (clients pipeline several requests and match
responses by order and correlation id). Requests of one connection are handled
one after another, which also keeps a producer's batches in order; different
connections run concurrently.

Bad input closes only the connection that sent it: an oversized or negative
frame size, a frame that does not decode, an API key we do not know, or a
version we do not support (ApiVersions excepted: it answers version 0 with
UNSUPPORTED_VERSION so the client can downgrade). Each such close is logged
once, with the peer and the reason.

A listener has a name and a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL). TLS is done by asyncio before the first byte is read; a client that does
not speak it (or, with client authentication required, has no valid certificate)
never gets a connection. The ``Gate`` (the broker) sets up each connection's
authentication, is asked before every request whether it may be served (on a SASL
listener only ApiVersions and the SASL requests are, until authentication), and
names the API registry that serves the connection (its tenant's). A handler that sets
``state.closing`` has its response sent, then the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from korvet.protocol import api_versions
from korvet.protocol.frame_io import read_frame
from korvet.protocol.frames import REQUEST_MIN_SIZE, FrameDecoder, FrameSizeError, TruncatedFrame
from korvet.protocol.framing import FrameError, encode_response, parse_request, peek_prefix
from korvet.protocol.registry import ApiRegistry, CloseConnection, Deferred
from korvet.server.connection import Connection

log = logging.getLogger("korvet.listener")

_WRITE_HIGH_WATER = 4 * 1024 * 1024
_MAX_IN_FLIGHT = 32  # responses a connection may have pending before reading stops


class _Close(Exception):
    """Stop serving this connection; the message says why."""


class Gate(Protocol):
    """What the listener asks the broker about a connection (korvet/server/broker.py)."""

    def open_connection(self, conn: Connection, listener: str, peercert: Any) -> None: ...

    async def admit(self, conn: Connection, api_key: int, version_supported: bool) -> None:
        """Return to serve the request; raise CloseConnection to close instead."""
        ...

    def registry_of(self, conn: Connection) -> ApiRegistry[Connection]: ...

    async def raw_token(self, conn: Connection, token: bytes) -> bytes:
        """A bare SASL token (after SaslHandshake v0) and its bare answer."""
        ...


class ListenerMetrics(Protocol):
    """What the listener reports (korvet/server/metrics.py's BrokerMetrics implements it)."""

    def connection_opened(self) -> None: ...
    def connection_closed(self) -> None: ...
    def connection_refused(self) -> None: ...
    def request_received(self, api_key: int, size: int) -> float: ...
    def response_sent(self, api_key: int, size: int, started: float) -> None: ...
    def request_failed(self) -> None: ...


class _NoMetrics:
    def connection_opened(self) -> None: pass
    def connection_closed(self) -> None: pass
    def connection_refused(self) -> None: pass
    def request_received(self, api_key: int, size: int) -> float: return 0.0
    def response_sent(self, api_key: int, size: int, started: float) -> None: pass
    def request_failed(self) -> None: pass


@dataclass
class KafkaListener:
    registry: ApiRegistry[Connection]
    host: str = "127.0.0.1"
    port: int = 9092
    max_request_bytes: int = 100 * 1024 * 1024
    name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    gate: Gate | None = None
    metrics: ListenerMetrics = field(default_factory=_NoMetrics)
    _server: asyncio.base_events.Server | None = field(default=None, init=False)
    _connections: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _ids: itertools.count[int] = field(default_factory=itertools.count, init=False)

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        sock: socket.socket = self._server.sockets[0]
        port: int = sock.getsockname()[1]
        return port

    @property
    def serving(self) -> bool:
        """Accepting connections (the liveness probe asks)."""
        return self._server is not None and self._server.is_serving()

    async def start(self) -> int:
        self._server = await asyncio.start_server(
            self._on_connection, self.host, self.port, reuse_address=True, limit=1 << 20,
            ssl=self.ssl_context, ssl_handshake_timeout=10 if self.ssl_context else None,
        )
        return self.bound_port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(f"{peer[0]}:{peer[1]}-{next(self._ids)}", str(peer[0]),
                          listener_name=self.name)
        self.metrics.connection_opened()
        try:
            if self.gate is not None:
                self.gate.open_connection(conn, self.name, writer.get_extra_info("peercert"))
            await self._serve(conn, reader, writer)
        except (_Close, CloseConnection) as reason:
            self.metrics.connection_refused()
            log.warning("closing connection %s (client %r): %s", conn.connection_id,
                        conn.client_id, reason)
        except ConnectionError:
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        except Exception:
            self.metrics.request_failed()
            log.exception("closing connection %s after an unexpected error", conn.connection_id)
        finally:
            self.metrics.connection_closed()
            self._connections.discard(task)
            conn.state.close()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, conn: Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        # Responses go out in request order through one queue; a Deferred response (a
        # Produce whose appends are in flight) lets the next requests be read meanwhile.
        outgoing: asyncio.Queue[bytes | Awaitable[bytes | None] | None] = asyncio.Queue(
            maxsize=_MAX_IN_FLIGHT)
        sender = asyncio.create_task(self._send(conn, outgoing, writer))
        decoder = FrameDecoder(max_size=self.max_request_bytes, min_size=REQUEST_MIN_SIZE,
                               what="request")
        try:
            while not sender.done():
                try:
                    frame = await read_frame(reader, decoder)
                except FrameSizeError as exc:
                    if exc.size > self.max_request_bytes:
                        raise _Close(f"frame of {exc.size} bytes exceeds broker.max-request-bytes "
                                     f"({self.max_request_bytes})") from None
                    raise _Close(str(exc)) from None
                except TruncatedFrame:
                    return  # the client went away mid-request; nothing to answer
                if frame is None:
                    return
                response = await self._dispatch(conn, frame)
                if response is not None:
                    await outgoing.put(response)
                if conn.state.closing is not None:  # e.g. a failed authentication, answered
                    self.metrics.connection_refused()
                    log.info("closing connection %s (client %r, %s): %s", conn.connection_id,
                             conn.client_id, conn.principal, conn.state.closing)
                    return
        finally:
            if sender.done():
                sender.result()  # a failure in a deferred response closes the connection
            else:
                await outgoing.put(None)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(sender, 10)
                sender.cancel()

    async def _send(self, conn: Connection,
                    outgoing: asyncio.Queue[bytes | Awaitable[bytes | None] | None],
                    writer: asyncio.StreamWriter) -> None:
        """Write responses in request order; whatever is ready goes out in one write (each
        send is a system call, and on loopback it also pays for the receiver's side)."""
        while True:
            item = await outgoing.get()
            ready: list[bytes] = []
            while item is not None:
                if isinstance(item, bytes):
                    ready.append(item)
                else:
                    response = await item  # a Deferred response, encoded when it is ready
                    if response is not None:
                        ready.append(response)
                if outgoing.empty():
                    break
                item = outgoing.get_nowait()
            if ready:
                writer.write(ready[0] if len(ready) == 1 else b"".join(ready))
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()
            if item is None:
                return

    async def _dispatch(self, conn: Connection,
                        frame: bytes) -> bytes | Awaitable[bytes | None] | None:
        if self.gate is not None and conn.state.auth.expects_raw_token:
            answer = await self.gate.raw_token(conn, frame)
            return len(answer).to_bytes(4, "big") + answer
        try:
            api_key, version, correlation_id = peek_prefix(frame)
        except FrameError as exc:
            raise _Close(str(exc)) from None
        registry = self.registry if self.gate is None else self.gate.registry_of(conn)
        api = registry.get(api_key)
        if api is None:
            raise _Close(f"unknown or unsupported api key {api_key} (version {version})")
        supported = api.supports(version)
        if self.gate is not None:
            await self.gate.admit(conn, api_key, supported)
            registry = self.gate.registry_of(conn)  # admitting may have bound the tenant
            api = registry.get(api_key) or api
        if not supported:
            if api_key == api_versions.API_KEY:
                return encode_response(
                    correlation_id, api_versions.unsupported_version_response(registry)
                )
            raise _Close(
                f"{api.name} version {version} is not supported "
                f"(supported {api.min_version}..{api.max_version})"
            )
        started = self.metrics.request_received(api_key, len(frame))
        try:
            request = parse_request(frame)
        except FrameError as exc:
            excerpt = frame[:96].hex()
            raise _Close(f"{exc} (frame starts {excerpt}{'...' if len(frame) > 96 else ''})") from None
        conn.api_version = version
        conn.correlation_id = correlation_id
        conn.client_id = request.client_id
        conn.requests += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s v%d correlation %d from %r%s", conn.connection_id, api.name, version,
                      correlation_id, request.client_id,
                      f" ({request.trailing} trailing bytes ignored)" if request.trailing else "")
        response = await api.handler(conn, request.body)
        if response is None:
            self.metrics.response_sent(api_key, 0, started)
            return None
        if isinstance(response, Deferred):
            return self._finish(api_key, correlation_id, response, started)
        data = encode_response(correlation_id, response)
        self.metrics.response_sent(api_key, len(data), started)
        return data

    async def _finish(self, api_key: int, correlation_id: int, deferred: Deferred,
                      started: float) -> bytes | None:
        response = await deferred.response
        if response is None:
            return None
        data = encode_response(correlation_id, response)
        self.metrics.response_sent(api_key, len(data), started)
        return data
