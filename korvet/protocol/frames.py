"""Size-prefixed Kafka frames, without I/O: bytes in, whole frames out.

Every Kafka message on the wire, request or response, is ``int32 size`` followed by
``size`` bytes. ``FrameDecoder`` is the one reader of that framing in Korvet: the
broker's listener, the conformance client, the benchmark's probes, the Kafka
launcher's readiness probe and the test proxies all feed it the bytes they
received and take whole frames out. It does no I/O and keeps no clock (in the
manner of h11's ``ReceiveBuffer``), so its rules are tested on their own
(tests/unit/protocol/test_frames.py) and every caller enforces the same limits:

- a size below ``min_size`` (a request needs at least its 8-byte header prefix) or
  above ``max_size`` is a ``FrameSizeError``, raised as soon as the 4 size bytes are
  in, before any of the body is buffered;
- bytes after the last whole frame wait for the next ``feed``;
- ``at_eof`` says whether the peer stopped between frames or in the middle of one.

``frame_io.py`` connects a decoder to a blocking socket, to an asyncio stream and, for
the listener, to a connection's own receive buffer (``FrameProtocol``); the last two apply
only the decoder's size rules (``size_of``) and take each body from their own buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size
REQUEST_MIN_SIZE = 8  # api key, api version, correlation id
MAX_FRAME_SIZE = 2**31 - 1


class FrameSizeError(ValueError):
    """The size prefix announces a frame the reader refuses (negative, too small, too big)."""

    def __init__(self, size: int, message: str) -> None:
        super().__init__(message)
        self.size = size


class TruncatedFrame(ValueError):
    """The peer closed the connection in the middle of a frame."""


class FrameDecoder:
    """Splits a byte stream into the bodies of size-prefixed frames."""

    __slots__ = ("_buffer", "_next_size", "max_size", "min_size", "what")

    def __init__(self, *, max_size: int = MAX_FRAME_SIZE, min_size: int = 0,
                 what: str = "frame") -> None:
        if not 0 <= min_size <= max_size <= MAX_FRAME_SIZE:
            raise ValueError(f"frame limits must satisfy 0 <= {min_size} <= {max_size} <= 2^31-1")
        self.max_size = max_size
        self.min_size = min_size
        self.what = what  # "request", "response": named in error messages
        self._buffer = bytearray()
        self._next_size = -1  # size of the frame being collected, once its prefix is in

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Raises FrameSizeError as soon as a bad size prefix is in."""
        self._buffer += data
        self._check_prefix()

    def next_frame(self) -> bytes | None:
        """The body of the next whole frame (without its size prefix), or None for now.
        Raises FrameSizeError when the next frame's size prefix is refused."""
        self._check_prefix()
        size = self._next_size
        if size < 0 or len(self._buffer) < SIZE_BYTES + size:
            return None
        end = SIZE_BYTES + size
        with memoryview(self._buffer) as view:  # one copy (a slice of the bytearray is one more)
            frame = bytes(view[SIZE_BYTES:end])
        del self._buffer[:end]
        self._next_size = -1
        return frame

    def frames(self) -> Iterator[bytes]:
        """Every whole frame buffered so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buffer)

    @property
    def wanted(self) -> int:
        """How many more bytes complete the frame being collected (at least 1)."""
        if self._next_size < 0:
            return SIZE_BYTES - len(self._buffer)
        return SIZE_BYTES + self._next_size - len(self._buffer)

    def at_eof(self) -> None:
        """The peer closed its side. Raises TruncatedFrame if a frame was cut short."""
        if self._buffer:
            raise TruncatedFrame(
                f"connection closed {self.buffered} bytes into a {self.what}"
                + (f" of {self._next_size} bytes" if self._next_size >= 0 else "")
            )

    def _check_prefix(self) -> None:
        if self._next_size >= 0 or len(self._buffer) < SIZE_BYTES:
            return
        self._next_size = self.size_of(self._buffer)

    def size_of(self, prefix: bytes | bytearray | memoryview) -> int:
        """The size a frame's 4-byte prefix announces. Raises FrameSizeError when it is
        refused (for readers that take the body from their own buffer: ``read_frame``,
        ``FrameProtocol``)."""
        size: int = _SIZE.unpack_from(prefix, 0)[0]
        if size < self.min_size:
            raise FrameSizeError(size, f"invalid {self.what} size {size} "
                                       f"(at least {self.min_size} bytes)")
        if size > self.max_size:
            raise FrameSizeError(size, f"{self.what} of {size} bytes exceeds the limit of "
                                       f"{self.max_size} bytes")
        return size


def frame(body: bytes) -> bytes:
    """``body`` with its size prefix."""
    return _SIZE.pack(len(body)) + body
