"""The two loops that connect a ``FrameDecoder`` to a transport.

``read_frame_blocking`` serves blocking sockets (the conformance client, probes,
tests); ``read_frame`` serves asyncio streams (the listener, test proxies). The
decoder enforces the framing rules; these only move bytes.
"""

from __future__ import annotations

import asyncio
import socket
import time
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
