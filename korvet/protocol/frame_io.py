"""What connects a ``FrameDecoder`` to a transport.

``read_frame_blocking`` serves blocking sockets (the conformance client, probes,
tests); ``read_frame`` serves asyncio streams (test proxies); ``FrameProtocol`` is the
listener's connection protocol, which receives into a buffer of its own. The decoder
enforces the framing rules; these only move bytes.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from korvet.protocol.frames import SIZE_BYTES, FrameDecoder, TruncatedFrame
from korvet.protocol.framing import FrameError, decode_response, encode_request, response_class

_CHUNK = 256 * 1024


class PeerClosed(ConnectionError):
    """The peer closed the connection before a whole frame arrived."""


def read_frame_blocking(sock: socket.socket, decoder: FrameDecoder,
                        deadline: float | None = None) -> bytes:
    """The next frame from a blocking socket. Raises PeerClosed at the end of the stream,
    TimeoutError once ``deadline`` (time.monotonic) has passed, FrameSizeError on a bad
    size prefix."""
    while (frame := decoder.next_frame()) is None:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no whole frame within the deadline ({decoder.buffered} "
                                   "bytes of one received)")
            sock.settimeout(remaining)
        data = sock.recv(max(decoder.wanted, _CHUNK))
        if not data:
            raise PeerClosed("the peer closed the connection"
                             + (f" {decoder.buffered} bytes into a frame" if decoder.buffered
                                else ""))
        decoder.feed(data)
    return frame


async def read_frame(reader: asyncio.StreamReader, decoder: FrameDecoder) -> bytes | None:
    """The next frame from an asyncio stream, or None when the peer closed cleanly between
    frames. Raises TruncatedFrame when it closed inside one, FrameSizeError on a bad size
    prefix (checked by ``decoder``'s rules before any of the body is read).

    Only the decoder's size rules are used: the body is taken straight from the stream's
    buffer (``readexactly``: one copy), not through the decoder's own buffer, which cost two
    more copies of every request and a few microseconds of a produce request's time."""
    try:
        prefix = await reader.readexactly(SIZE_BYTES)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise TruncatedFrame(f"connection closed {len(exc.partial)} bytes into a "
                                 f"{decoder.what}") from None
        return None
    size = decoder.size_of(prefix)
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise TruncatedFrame(f"connection closed {SIZE_BYTES + len(exc.partial)} bytes into a "
                             f"{decoder.what} of {size} bytes") from None


_FIRST_BUFFER = 16 * 1024  # a connection's receive buffer when it opens
_BUSY_BUFFER = 256 * 1024  # what it grows to while reads keep filling it


class FrameProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A server connection's protocol that receives into one buffer of its own and hands
    out whole frames (``read_frame``); writing stays asyncio's (the ``StreamWriter`` the
    connection callback gets, with its flow control).

    asyncio's ``StreamReader`` appends every chunk the transport reads to a ``bytearray``
    and cuts each ``readexactly`` off its front; with several requests buffered (a producer
    with requests in flight), both reallocate and copy what is left, over and over: about a
    sixth of the broker's profile samples on a Produce of 1 KiB records
    (docs/performance.md, "A receive buffer of the listener's own"). Here the socket is read
    straight into the buffer (``recv_into``), and each frame is copied out of it once.

    The buffer starts at 16 KiB and doubles, up to 256 KiB, while reads fill it, so a busy
    connection reads many requests per system call and an idle one holds little. A frame
    larger than the buffer grows it to the frame's size once its size prefix passed the
    decoder's rules (``read_frame``), and it goes back to 16 KiB when that frame has been
    taken and the connection waits. While the buffer is full of frames not yet taken, reading
    pauses until half of it is taken or the reader needs more (the socket's own buffers then
    hold the client back, as the stream reader's limit did; a client such as librdkafka, with
    up to a million requests in flight, fills it as fast as it is read). The ``StreamReader``
    the callback gets receives nothing but the end of the stream; read frames from this
    protocol (``writer.transport.get_protocol()``).
    """

    def __init__(self, client_connected_cb: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                      Awaitable[None] | None]) -> None:
        self._frames_reader = asyncio.StreamReader()  # the writer checks it for exceptions
        super().__init__(self._frames_reader, client_connected_cb)
        self._buffer = bytearray(_FIRST_BUFFER)
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not taken yet
        self._end = 0  # one past the last byte received
        self._wanted = 0  # bytes the frame at _start needs in all, once its prefix passed
        self._grow = False  # the last read filled the buffer: double it before the next
        self._ended = False
        self._error: BaseException | None = None
        # Not `_paused`: that is the writing pause of asyncio's StreamReaderProtocol, which
        # this class is (set while the client does not take its responses).
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._reading: asyncio.ReadTransport | None = None
        self._loop_of_reader: asyncio.AbstractEventLoop | None = None

    # -- the transport's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._reading = transport if isinstance(transport, asyncio.ReadTransport) else None
        super().connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._start == self._end:
            self._start = self._end = 0
        size = len(self._buffer)
        if self._grow:
            size = max(size, min(2 * size, _BUSY_BUFFER))
            self._grow = False
        size = max(size, self._wanted)
        if size > len(self._buffer) or self._end == size:
            if self._start == 0 and self._end == size:
                size *= 2  # full of what was not taken, yet read from (never an empty buffer)
            self._move(size)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        if self._end == len(self._buffer):
            self._grow = True
            if self._start == 0 and len(self._buffer) >= max(_BUSY_BUFFER, self._wanted):
                # Full of bytes not taken, and as big as it gets: read on once some are.
                self._pause(True)
        self._wake()

    def eof_received(self) -> bool:
        self._ended = True
        self._wake()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._error = exc
        self._wake()
        super().connection_lost(exc)

    # -- the connection's side
    async def read_frame(self, decoder: FrameDecoder) -> bytes | None:
        """The next frame, or None when the peer closed cleanly between frames. Raises
        TruncatedFrame when it closed inside one, FrameSizeError on a bad size prefix (as soon
        as the prefix is here, before any of the body), and the connection's error when it
        was lost to one (as ``StreamReader.readexactly`` does)."""
        while True:
            if self._error is not None:
                raise self._error
            have = self._end - self._start
            if have >= SIZE_BYTES:
                if not self._wanted:
                    self._wanted = SIZE_BYTES + decoder.size_of(
                        self._view[self._start:self._start + SIZE_BYTES])
                if have >= self._wanted:
                    begin = self._start + SIZE_BYTES
                    self._start += self._wanted
                    self._wanted = 0
                    if self._reading_paused and 2 * (self._end - self._start) <= len(self._buffer):
                        self._pause(False)  # half of it taken: read on
                    return bytes(self._view[begin:self._start])
            if self._ended:
                if have:
                    of = f" of {self._wanted - SIZE_BYTES} bytes" if self._wanted else ""
                    raise TruncatedFrame(f"connection closed {have} bytes into a "
                                         f"{decoder.what}{of}")
                return None
            if not have and len(self._buffer) > _BUSY_BUFFER:
                self._move(_FIRST_BUFFER)  # a big frame was taken: give its room back
            self._pause(False)  # more bytes are needed: read them
            if self._loop_of_reader is None:  # asyncio's lookup costs a getpid() system call
                self._loop_of_reader = asyncio.get_running_loop()
            self._waiter = self._loop_of_reader.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _move(self, size: int) -> None:
        """Put what is not taken at the front of a buffer of ``size`` bytes (a new one unless
        it is the same size: the transport may still hold a view of the old)."""
        live = self._end - self._start
        if size != len(self._buffer):
            buffer = bytearray(size)
            view = memoryview(buffer)
            view[:live] = self._view[self._start:self._end]
            self._buffer, self._view = buffer, view
        elif self._start:
            self._view[:live] = bytes(self._view[self._start:self._end])
        self._start, self._end = 0, live

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _pause(self, paused: bool) -> None:
        if paused == self._reading_paused:
            return
        self._reading_paused = paused
        transport = self._reading
        if transport is not None and not transport.is_closing():
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()


def call_blocking(host: str, port: int, request: Any, *, timeout: float = 10.0,
                  client_id: str = "korvet") -> Any:
    """Send one kio request on a new connection and return the decoded kio response
    (readiness probes and tools that need one answer)."""
    correlation_id = 1
    response_type = response_class(int(request.__api_key__), int(request.__version__))
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_request(request, correlation_id, client_id))
        reply = read_frame_blocking(sock, FrameDecoder(min_size=4, what="response"),
                                    time.monotonic() + timeout)
    try:
        got, body = decode_response(reply, response_type)
    except Exception as exc:  # kio raises several decode error types
        raise FrameError(f"undecodable {type(request).__name__} response: {exc}") from exc
    if got != correlation_id:
        raise FrameError(f"response for correlation id {got}, expected {correlation_id}")
    return body
