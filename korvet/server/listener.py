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
import os
import socket
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.exceptions import RedisError

from korvet.core.api_keys import ApiKey
from korvet.protocol import api_versions
from korvet.protocol.fetch_response import Buffer
from korvet.protocol.frame_io import FrameProtocol
from korvet.protocol.frames import REQUEST_MIN_SIZE, FrameDecoder, FrameSizeError, TruncatedFrame
from korvet.protocol.framing import (
    FrameError,
    encode_response,
    encode_response_pieces,
    parse_request,
    peek_prefix,
)
from korvet.protocol.registry import ApiRegistry, CloseConnection, Deferred
from korvet.server.connection import Connection
from korvet.server.limits import ConnectionSlot, ListenerLimits

log = logging.getLogger("korvet.listener")

_WRITE_HIGH_WATER = 4 * 1024 * 1024
_MAX_IN_FLIGHT = 32  # responses a connection may have pending before reading stops
_BUNCH_REQUESTS = 8  # produce requests decoded back to back before their appends must leave
_BUNCH_BYTES = 512 * 1024  # ... or this many of their bytes
_BACKLOG = 1024  # pending TCP connections the kernel queues before the broker accepts them
_CLOSE_SECONDS = 5.0  # how long stopping waits for the connections' tasks, then the server


_IOV_MAX = 1024  # buffers one writev takes (Linux's IOV_MAX)


class _Later:
    """A Deferred response on its way out: the coroutine that encodes it once it resolves, and
    the Deferred, which tells whether it has (``ready``)."""

    __slots__ = ("answer", "deferred")

    def __init__(self, answer: Awaitable[bytes | None], deferred: Deferred) -> None:
        self.answer = answer
        self.deferred = deferred


# A response on its way out: ready buffers (one frame, in pieces), or a Deferred one (encoded
# when it resolves), each with the bytes it holds in the connection's pending count.
_Response = list[Buffer] | _Later
_Outgoing = tuple[_Response, int] | None


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
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(self._on_connection), self.host, self.port,
            reuse_address=True, ssl=self.ssl_context,
            ssl_handshake_timeout=10 if self.ssl_context else None, backlog=_BACKLOG,
        )
        self.limits.start()
        return self.bound_port

    async def close(self) -> None:
        """Stop listening and end every connection. Kafka clients keep their connections
        open, so they are ended here rather than waited for: each connection's task is
        cancelled and its socket dropped at once (a response not yet written is not sent,
        as when a Kafka broker stops), then the server's own close is awaited (from Python
        3.12.1 it waits for every connection to go). Every wait is bounded."""
        if self._server is not None:
            self._server.close()
        await self.limits.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        for slot in list(self.limits.slots):
            slot.close()  # a task that misses its cancel still finds its socket closed
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=_CLOSE_SECONDS)
            if late:
                log.warning("%d connection(s) had not ended %.0f s after the stop; leaving them",
                            len(late), _CLOSE_SECONDS)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), _CLOSE_SECONDS)

    async def _on_connection(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = writer.transport.get_protocol()
        assert isinstance(frames, FrameProtocol)
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
            await self._serve(conn, slot, frames, writer)
        except (_Close, CloseConnection) as reason:
            self.metrics.connection_refused()
            log.warning("closing connection %s (client %r): %s", conn.connection_id,
                        conn.client_id, reason)
        except ConnectionError:
            pass  # the client went away; nothing to answer
        except asyncio.CancelledError:
            pass
        except RedisError as exc:  # Redis down, stalled or refusing: the client retries
            self.metrics.request_failed()
            log.warning("closing connection %s (client %r): Redis failed while answering it: "
                        "%s: %s (%s)", conn.connection_id, conn.client_id, type(exc).__name__, exc,
                        "; ".join(getattr(exc, "__notes__", ())) or "a deferred response")
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

    async def _serve(self, conn: Connection, slot: ConnectionSlot, frames: FrameProtocol,
                     writer: asyncio.StreamWriter) -> None:
        # Responses go out in request order through one queue; a Deferred response (a
        # Produce whose appends are in flight) lets the next requests be read meanwhile.
        # Both made with the first response: an idle connection holds as little as it can.
        outgoing: asyncio.Queue[_Outgoing] | None = None
        sender: asyncio.Task[None] | None = None
        max_bytes = self.limits.max_request_bytes
        decoder = FrameDecoder(max_size=max_bytes, min_size=REQUEST_MIN_SIZE, what="request")
        bunch = _Bunch()
        try:
            while sender is None or not sender.done():
                await slot.gate.wait_to_read()
                try:
                    frame = await frames.read_frame(decoder)
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
                    if not isinstance(answer[0], list):
                        await bunch.deferred(len(frame))
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
                      frame: bytes) -> tuple[_Response, int] | None:
        """Handle one request; its response with the bytes it holds in the pending count
        (the request's until it is answered, then also the response's until it is sent)."""
        held = len(frame) + 4
        slot.gate.add(held)
        slot.in_hand += 1
        response: _Response | None = None
        try:
            response = await self._dispatch(conn, frame)
        except RedisError as exc:  # which request met it, for the log line that closes
            number = int.from_bytes(frame[:2], "big", signed=True)
            known = number in ApiKey._value2member_map_
            exc.add_note(f"while answering {ApiKey(number).name if known else number}")
            raise
        finally:
            if response is None or isinstance(response, list):  # a Deferred is in hand
                slot.in_hand -= 1
        if response is None:
            slot.gate.release(held)
            return None
        if isinstance(response, list):
            size = sum(len(piece) for piece in response)
            slot.gate.add(size)
            held += size
        return response, held

    async def _send(self, conn: Connection, slot: ConnectionSlot,
                    outgoing: asyncio.Queue[_Outgoing], writer: asyncio.StreamWriter) -> None:
        """Write responses in request order; whatever is ready goes out in one write (each
        send is a system call, and on loopback it also pays for the receiver's side). What is
        ready is not held back for a response still waiting for Redis: the client (a producer
        with five requests in flight) sends its next request when it has an answer."""
        scatter_fd = _scatter_fd(writer)
        while True:
            item = await outgoing.get()
            ready: list[Buffer] = []
            released = 0
            while item is not None:
                response, held = item
                released += held
                if isinstance(response, list):
                    ready.extend(response)
                else:
                    if ready and not response.deferred.ready():
                        _write(writer, scatter_fd, ready)
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
                _write(writer, scatter_fd, ready)
                slot.touch()
            slot.gate.release(released)
            if ready and writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                await writer.drain()
                slot.touch()
            if item is None:
                return

    async def _dispatch(self, conn: Connection, frame: bytes) -> _Response | None:
        if self.gate is not None and conn.state.auth.expects_raw_token:
            answer = await self.gate.raw_token(conn, frame)
            return [len(answer).to_bytes(4, "big") + answer]
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
            if api_key == ApiKey.API_VERSIONS:
                return [encode_response(
                    correlation_id, api_versions.unsupported_version_response(registry)
                )]
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
        pieces = encode_response_pieces(correlation_id, response)
        self.metrics.response_sent(api_key, sum(len(piece) for piece in pieces), started)
        return pieces

    async def _finish(self, api_key: int, correlation_id: int, deferred: Deferred,
                      started: float) -> bytes | None:
        response = await deferred.response
        if response is None:
            return None
        data = encode_response(correlation_id, response)
        self.metrics.response_sent(api_key, len(data), started)
        return data


class _Bunch:
    """When a connection's decoded produce requests let their appends leave.

    A Deferred response (a Produce with appends queued for Redis) does not wait: its appends
    go out when the loop next runs the pipe's write, that is when this connection has no
    whole request buffered (the next read waits) or after a bunch of them (``_BUNCH_REQUESTS``
    or ``_BUNCH_BYTES``), whichever comes first. One write then carries the bunch's appends to
    Redis, which runs them in one read and answers in one write, and their responses go to the
    client in one write: three processes on two cores wake each other a bunch at a time
    instead of a request at a time (docs/performance.md, "Appends in bunches"). The bound
    keeps a backlog (after any pause of the broker) from being decoded whole before its first
    append leaves, which made the broker and Redis take turns instead of working at once."""

    __slots__ = ("bytes", "loop", "requests")

    def __init__(self) -> None:
        self.requests = self.bytes = 0  # decoded since the pipes last had a chance to write
        self.loop = asyncio.get_running_loop()

    async def deferred(self, size: int) -> None:
        if not self.requests:
            # Runs in the loop's next round, with the pipes' writes, however it comes: the
            # yield below or this connection's next read waiting for bytes.
            self.loop.call_soon(self._written)
        self.requests += 1
        self.bytes += size
        if self.requests >= _BUNCH_REQUESTS or self.bytes >= _BUNCH_BYTES:
            await asyncio.sleep(0)

    def _written(self) -> None:
        self.requests = self.bytes = 0


def _scatter_fd(writer: asyncio.StreamWriter) -> int | None:
    """The socket's file descriptor when responses may be written to it straight (a plain TCP
    socket; None under TLS, whose transport encrypts from its own queue)."""
    if writer.get_extra_info("sslcontext") is not None:
        return None
    sock = writer.get_extra_info("socket")
    return None if sock is None else int(sock.fileno())


def _write(writer: asyncio.StreamWriter, fd: int | None, pieces: list[Buffer]) -> None:
    """Write a frame's pieces without joining them (a Fetch response's record batches are
    pieces of up to megabytes, held as Redis handed them over).

    Python 3.11's socket transport joins what ``writelines`` is given, and copies whatever
    the socket does not take at once into its buffer. So while the transport has nothing
    buffered (as its own ``write`` does, it sends first and buffers only the rest), the
    pieces go to the socket in one ``writev`` per 1,024 of them; what the socket did not take
    then goes to the transport piece by piece (one copy, into its buffer, where a join would
    have made two). A TLS transport queues the pieces as they are."""
    transport = writer.transport
    if transport.is_closing():
        return  # the peer is gone: asyncio would log a warning for every piece
    if len(pieces) == 1:
        writer.write(pieces[0])
        return
    if fd is None:
        writer.writelines(pieces)
        return
    start, into = 0, 0
    # A transport that is not closing still owns its socket, so ``fd`` is still this
    # connection's (a closed socket's number may already be another connection's): checked
    # right before the write, with no await in between.
    if not transport.get_write_buffer_size() and not transport.is_closing():
        start, into = _writev(fd, pieces)
    if start < len(pieces) and into:
        writer.write(memoryview(pieces[start])[into:])
        start += 1
    for piece in pieces[start:]:
        if transport.is_closing():  # the write before met a reset or closed socket
            return
        writer.write(piece)


def _writev(fd: int, pieces: list[Buffer]) -> tuple[int, int]:
    """Write as much of ``pieces`` as the socket takes now: the index of the first piece not
    wholly written, and how many of its bytes were. An error other than a full socket is left
    to the transport, which meets it again on its next write and closes the connection."""
    done = 0
    while done < len(pieces):
        chunk = pieces[done:done + _IOV_MAX]
        try:
            sent = os.writev(fd, chunk)
        except (BlockingIOError, InterruptedError):
            return done, 0
        except OSError:
            return done, 0
        for piece in chunk:
            if sent < len(piece):
                return done, sent
            sent -= len(piece)
            done += 1
    return done, 0
