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

Limits (server/limits.py, one ``ListenerLimits`` per listener): a connection over
max.connections or max.connections.per.ip is closed when accepted; before reading each
request the connection waits while its pending bytes (requests not answered, responses
not yet written) are over max-pending-bytes; an idle connection is closed.
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
from korvet.server.limits import ConnectionSlot, ListenerLimits

log = logging.getLogger("korvet.listener")

_WRITE_HIGH_WATER = 4 * 1024 * 1024
_MAX_IN_FLIGHT = 32  # responses a connection may have pending before reading stops
_BACKLOG = 1024  # pending TCP connections the kernel queues before the broker accepts them


class _Later:
    """A Deferred response on its way out: the coroutine that encodes it once it resolves, and
    the Deferred, which tells whether it has (``ready``)."""

    __slots__ = ("answer", "deferred")

    def __init__(self, answer: Awaitable[bytes | None], deferred: Deferred) -> None:
        self.answer = answer
        self.deferred = deferred


# A response on its way out: ready bytes, or a Deferred one (encoded when it resolves), each
# with the bytes it holds in the connection's pending count.
_Outgoing = tuple[bytes | _Later, int] | None


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
    name: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    gate: Gate | None = None
    metrics: ListenerMetrics = field(default_factory=_NoMetrics)
    limits: ListenerLimits = field(default_factory=ListenerLimits)
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
            backlog=_BACKLOG,
        )
        self.limits.start()
        return self.bound_port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        await self.limits.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        slot = self.limits.admit(str(peer[0]), writer.transport.abort)
        if slot is None:
            writer.transport.abort()  # over a connection limit (logged, rate-limited)
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
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
            await self._serve(conn, slot, reader, writer)
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
            self.limits.release(slot)
            conn.state.close()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, conn: Connection, slot: ConnectionSlot, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        # Responses go out in request order through one queue; a Deferred response (a
        # Produce whose appends are in flight) lets the next requests be read meanwhile.
        # Both made with the first response: an idle connection holds as little as it can.
        outgoing: asyncio.Queue[_Outgoing] | None = None
        sender: asyncio.Task[None] | None = None
        max_bytes = self.limits.max_request_bytes
        decoder = FrameDecoder(max_size=max_bytes, min_size=REQUEST_MIN_SIZE, what="request")
        try:
            while sender is None or not sender.done():
                await slot.gate.wait_to_read()
                try:
                    frame = await read_frame(reader, decoder)
                except FrameSizeError as exc:
                    if exc.size > max_bytes:
                        raise _Close(f"frame of {exc.size} bytes exceeds broker.max-request-bytes "
                                     f"(socket.request.max.bytes, {max_bytes})") from None
                    raise _Close(str(exc)) from None
                except TruncatedFrame:
                    return  # the client went away mid-request; nothing to answer
                if frame is None:
                    return
                slot.touch()
                answer = await self._answer(conn, slot, frame)
                if answer is not None:
                    if outgoing is None or sender is None:
                        outgoing = asyncio.Queue(maxsize=_MAX_IN_FLIGHT)
                        sender = asyncio.create_task(self._send(conn, slot, outgoing, writer))
                    await outgoing.put(answer)
                    if not isinstance(answer[0], bytes):
                        # A Deferred (a Produce with appends queued for Redis): let them go
                        # out before the next request, which may already be buffered, is
                        # decoded. Without this yield a backlog of produce requests (after
                        # any pause of the broker) was decoded whole before its first append
                        # left, so the broker and Redis took turns instead of working at once.
                        await asyncio.sleep(0)
                if conn.state.closing is not None:  # e.g. a failed authentication, answered
                    self.metrics.connection_refused()
                    log.info("closing connection %s (client %r, %s): %s", conn.connection_id,
                             conn.client_id, conn.principal, conn.state.closing)
                    return
        finally:
            if sender is not None and sender.done():
                sender.result()  # a failure in a deferred response closes the connection
            elif sender is not None and outgoing is not None:
                # Bounded: a sender that died (the client went away) leaves a full queue.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(outgoing.put(None), 10)
                    await asyncio.wait_for(sender, 10)
                sender.cancel()

    async def _answer(self, conn: Connection, slot: ConnectionSlot,
                      frame: bytes) -> tuple[bytes | _Later, int] | None:
        """Handle one request; its response with the bytes it holds in the pending count
        (the request's until it is answered, then also the response's until it is sent)."""
        held = len(frame) + 4
        slot.gate.add(held)
        slot.in_hand += 1
        response: bytes | _Later | None = None
        try:
            response = await self._dispatch(conn, frame)
        finally:
            if response is None or isinstance(response, bytes):  # a Deferred is in hand
                slot.in_hand -= 1
        if response is None:
            slot.gate.release(held)
            return None
        if isinstance(response, bytes):
            slot.gate.add(len(response))
            held += len(response)
        return response, held

    async def _send(self, conn: Connection, slot: ConnectionSlot,
                    outgoing: asyncio.Queue[_Outgoing], writer: asyncio.StreamWriter) -> None:
        """Write responses in request order; whatever is ready goes out in one write (each
        send is a system call, and on loopback it also pays for the receiver's side). What is
        ready is not held back for a response still waiting for Redis: the client (a producer
        with five requests in flight) sends its next request when it has an answer."""
        while True:
            item = await outgoing.get()
            ready: list[bytes] = []
            released = 0
            while item is not None:
                response, held = item
                released += held
                if isinstance(response, bytes):
                    ready.append(response)
                else:
                    if ready and not response.deferred.ready():
                        writer.write(ready[0] if len(ready) == 1 else b"".join(ready))
                        slot.touch()
                        slot.gate.release(released - held)
                        ready, released = [], held
                    try:
                        answer = await response.answer  # encoded when it is ready
                    finally:
                        slot.in_hand -= 1
                    if answer is not None:
                        ready.append(answer)
                if outgoing.empty():
                    break
                item = outgoing.get_nowait()
            if ready:
                writer.write(ready[0] if len(ready) == 1 else b"".join(ready))
                slot.touch()
            slot.gate.release(released)
            if ready and writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                await writer.drain()
                slot.touch()
            if item is None:
                return

    async def _dispatch(self, conn: Connection, frame: bytes) -> bytes | _Later | None:
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
            return _Later(self._finish(api_key, correlation_id, response, started), response)
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
