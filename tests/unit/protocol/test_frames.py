"""Laws of the one frame decoder (korvet/protocol/frames.py) every reader of Kafka frames uses."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.protocol.frame_io import FrameProtocol, read_frame
from korvet.protocol.frames import (
    REQUEST_MIN_SIZE,
    FrameDecoder,
    FrameSizeError,
    TruncatedFrame,
    frame,
)

bodies = st.lists(st.binary(min_size=0, max_size=300), min_size=0, max_size=8)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(bodies, st.lists(st.integers(min_value=0, max_value=4000), max_size=30))
def test_any_split_of_the_stream_gives_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(b) for b in frames)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for chunk in _chunks(stream, cuts):
        decoder.feed(chunk)
        out.extend(decoder.frames())
    assert out == frames
    assert decoder.buffered == 0
    decoder.at_eof()  # ended between frames: no complaint


@given(st.binary(min_size=0, max_size=200), st.integers(min_value=1, max_value=203))
def test_wanted_is_exactly_what_completes_the_frame(body: bytes, first: int) -> None:
    data = frame(body)
    first = min(first, len(data) - 1)
    decoder = FrameDecoder()
    decoder.feed(data[:first])
    assert decoder.next_frame() is None
    while decoder.next_frame() is None:
        step = decoder.wanted
        assert step >= 1
        decoder.feed(data[first:first + step])
        first += step
        if first >= len(data):
            break
    assert first == len(data)


@given(st.binary(min_size=1, max_size=100), st.integers(min_value=1, max_value=103))
def test_a_stream_cut_inside_a_frame_is_truncated(body: bytes, cut: int) -> None:
    data = frame(body)
    decoder = FrameDecoder()
    decoder.feed(data[:min(cut, len(data) - 1)])
    assert decoder.next_frame() is None
    with pytest.raises(TruncatedFrame):
        decoder.at_eof()


@pytest.mark.parametrize("size", [-1, -(2**31), 0, REQUEST_MIN_SIZE - 1])
def test_a_request_size_below_the_header_is_refused_before_any_body(size: int) -> None:
    decoder = FrameDecoder(min_size=REQUEST_MIN_SIZE, what="request")
    decoder.feed(struct.pack(">i", size)[:3])  # not yet: three bytes of the prefix
    with pytest.raises(FrameSizeError) as raised:
        decoder.feed(struct.pack(">i", size)[3:])
    assert raised.value.size == size
    assert "request size" in str(raised.value)


def test_an_oversized_frame_is_refused_from_its_prefix_alone() -> None:
    decoder = FrameDecoder(max_size=1024)
    with pytest.raises(FrameSizeError) as raised:
        decoder.feed(struct.pack(">i", 1025))
    assert raised.value.size == 1025
    assert "exceeds the limit of 1024 bytes" in str(raised.value)
    # exactly the limit is fine
    ok = FrameDecoder(max_size=1024)
    ok.feed(frame(b"x" * 1024))
    assert ok.next_frame() == b"x" * 1024


def test_a_bad_prefix_behind_good_frames_is_found_once_they_are_taken() -> None:
    decoder = FrameDecoder(max_size=10)
    decoder.feed(frame(b"abc") + struct.pack(">i", 11))
    assert decoder.next_frame() == b"abc"
    with pytest.raises(FrameSizeError):
        decoder.next_frame()


def test_limits_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(min_size=10, max_size=5)


def _stream_reader(chunks: list[bytes], *, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=64)  # readexactly is not bound by it, as the listener's
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


def _cut_stream(frames: list[bytes], cut_last: int) -> tuple[bytes, list[bytes], bool]:
    """The frames' stream with its last ``cut_last`` bytes (at most the last frame's) cut off:
    the stream, the frames it still holds whole, and whether it ends inside a frame."""
    stream = b"".join(frame(b) for b in frames)
    if frames and cut_last:
        stream = stream[:-min(cut_last, len(frame(frames[-1])))]
    ends = list(itertools.accumulate(len(frame(b)) for b in frames))
    whole = [b for b, end in zip(frames, ends, strict=True) if end <= len(stream)]
    return stream, whole, len(stream) not in (0, *ends)


async def _read_to_end(read: Callable[[], Awaitable[bytes | None]]) -> tuple[list[bytes], bool]:
    """Frames until the stream ends: those read, and whether it ended inside one."""
    out: list[bytes] = []
    try:
        while (got := await read()) is not None:
            out.append(got)
    except TruncatedFrame:
        return out, True
    return out, False


@given(bodies, st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       st.integers(min_value=0, max_value=4))
def test_the_listeners_reader_gives_the_decoders_frames_and_stops_where_it_does(
        frames: list[bytes], cuts: list[int], cut_last: int) -> None:
    """``read_frame`` (the listener's loop, taking bodies from the stream's own buffer) reads
    the frames the decoder reads from the same stream in any chunks; a stream that ends
    between frames ends it with None, one that ends inside a frame (its prefix or its body)
    with TruncatedFrame."""
    stream, whole, cut_inside = _cut_stream(frames, cut_last)

    async def read_all() -> tuple[list[bytes], bool]:
        reader = _stream_reader(_chunks(stream, cuts))
        decoder = FrameDecoder(what="request")
        return await _read_to_end(lambda: read_frame(reader, decoder))

    out, truncated = asyncio.run(read_all())
    assert out == whole
    assert truncated == cut_inside




# Bodies for the listener's own receive buffer: small ones and some past its first 16 KiB
# (and its 256 KiB while busy), so it grows, moves what it holds to its front and shrinks back.
_listener_bodies = st.lists(
    st.one_of(st.binary(max_size=300),
              st.builds(lambda n, b: bytes([b]) * n + b"end", st.integers(0, 300_000),
                        st.integers(0, 255))),
    max_size=8)


async def _feed(protocol: FrameProtocol, chunk: bytes) -> None:
    """What a transport does with a chunk it reads: into the protocol's buffer, as much at a
    time as the buffer offers (an SSL transport hands over decrypted bytes the same way)."""
    while chunk:
        buffer = protocol.get_buffer(-1)
        assert len(buffer) > 0, "the protocol offered no room to read into"
        n = min(len(buffer), len(chunk))
        buffer[:n] = chunk[:n]
        protocol.buffer_updated(n)
        chunk = chunk[n:]


@given(_listener_bodies, st.lists(st.integers(min_value=0, max_value=700_000), max_size=30),
       st.integers(min_value=0, max_value=4), st.lists(st.integers(0, 3), max_size=30))
def test_the_listeners_protocol_gives_the_decoders_frames_and_stops_where_it_does(
        frames: list[bytes], cuts: list[int], cut_last: int, turns: list[int]) -> None:
    """``FrameProtocol`` (the listener's connections, receiving into a buffer of their own)
    reads the frames the decoder reads from the same stream, whatever the transport's reads
    and however far the reader lags behind them; a stream that ends between frames ends it
    with None, one that ends inside a frame (its prefix or its body) with TruncatedFrame."""
    stream, whole, cut_inside = _cut_stream(frames, cut_last)

    async def read_all() -> tuple[list[bytes], bool]:
        protocol = FrameProtocol(lambda reader, writer: None)
        decoder = FrameDecoder(what="request")
        reading = asyncio.create_task(_read_to_end(lambda: protocol.read_frame(decoder)))
        for i, chunk in enumerate(_chunks(stream, cuts)):
            await _feed(protocol, chunk)
            for _ in range(turns[i] if i < len(turns) else 1):  # the reader may lag
                await asyncio.sleep(0)
        protocol.eof_received()
        return await asyncio.wait_for(reading, 5)

    out, truncated = asyncio.run(read_all())
    assert out == whole
    assert truncated == cut_inside


async def _stream_reader_read(prefix: bytes, decoder: FrameDecoder) -> bytes | None:
    return await read_frame(_stream_reader([prefix], eof=False), decoder)


async def _protocol_read(prefix: bytes, decoder: FrameDecoder) -> bytes | None:
    protocol = FrameProtocol(lambda reader, writer: None)
    await _feed(protocol, prefix)
    return await protocol.read_frame(decoder)


@pytest.mark.parametrize("read", [_stream_reader_read, _protocol_read],
                         ids=["read_frame", "FrameProtocol"])
@pytest.mark.parametrize("size", [-1, 0, REQUEST_MIN_SIZE - 1, 1025])
def test_the_listeners_readers_refuse_a_bad_size_before_reading_the_body(
        size: int, read: Callable[[bytes, FrameDecoder], Awaitable[bytes | None]]) -> None:
    async def read_prefix() -> None:
        # Only the prefix has arrived and the stream stays open: a reader that waited for
        # the body before checking the size would hang here instead of raising.
        decoder = FrameDecoder(min_size=REQUEST_MIN_SIZE, max_size=1024, what="request")
        await asyncio.wait_for(read(struct.pack(">i", size), decoder), 5)

    with pytest.raises(FrameSizeError) as raised:
        asyncio.run(read_prefix())
    assert raised.value.size == size


def test_a_big_request_does_not_keep_its_room_once_taken() -> None:
    """A 4 MiB request grows the connection's buffer to hold it; once it is taken and the
    connection waits for more, the buffer is back to its first size (an idle connection that
    once sent a big request does not hold megabytes)."""
    async def scenario() -> tuple[int, int]:
        protocol = FrameProtocol(lambda reader, writer: None)
        body = bytes(range(256)) * (4 * 4096)
        decoder = FrameDecoder(what="request")
        reading = asyncio.ensure_future(protocol.read_frame(decoder))
        await _feed(protocol, frame(body)[:100])  # the prefix: its size passes the rules
        await asyncio.sleep(0)
        await _feed(protocol, frame(body)[100:] + frame(b"next-request"))
        held = len(protocol._buffer)
        assert await reading == body
        assert await protocol.read_frame(decoder) == b"next-request"
        waiting = asyncio.ensure_future(protocol.read_frame(decoder))
        await asyncio.sleep(0)
        assert not waiting.done()
        idle = len(protocol.get_buffer(-1))
        protocol.eof_received()
        assert await waiting is None
        return held, idle

    held, idle = asyncio.run(scenario())
    assert held >= 4 * 1024 * 1024 + 4  # it grew to hold the big request
    assert idle <= 16 * 1024


def test_a_client_that_sends_faster_than_the_broker_reads_is_held_back_by_the_socket() -> None:
    """Over a real loopback connection: while the listener takes no request, its connection
    stops reading once its buffer is full (256 KiB), so 32 MiB of requests wait in the
    client's socket instead of the broker's memory; then every request is read, in order,
    the last one bigger than that buffer (which the stopped connection must read on for)."""
    requests = [bytes([i % 251]) * 65_536 + i.to_bytes(4, "big") for i in range(512)]
    requests.append(b"big" * 200_000)

    async def scenario() -> tuple[int, int, list[bytes]]:
        connected: asyncio.Future[FrameProtocol] = asyncio.get_running_loop().create_future()

        async def on_connection(reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
            protocol = writer.transport.get_protocol()
            assert isinstance(protocol, FrameProtocol)
            connected.set_result(protocol)

        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FrameProtocol(on_connection), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            protocol = await asyncio.wait_for(connected, 5)
            writer.writelines(frame(r) for r in requests)
            for _ in range(200):  # until the client's own buffer holds what is not read
                await asyncio.sleep(0.01)
                if writer.transport.get_write_buffer_size() > 0 and protocol._reading_paused:
                    break
            unsent = writer.transport.get_write_buffer_size()
            held = len(protocol._buffer)
            decoder = FrameDecoder(max_size=1 << 20, what="request")
            got = [await asyncio.wait_for(protocol.read_frame(decoder), 10)
                   for _ in requests]
            writer.close()
            assert await asyncio.wait_for(protocol.read_frame(decoder), 10) is None
            return unsent, held, [g for g in got if g is not None]
        finally:
            server.close()

    unsent, held, got = asyncio.run(scenario())
    assert unsent > 0
    assert held <= 256 * 1024
    assert got == requests


class _Transport(asyncio.Transport):
    """A transport that only notes whether reading is paused."""

    def __init__(self) -> None:
        super().__init__()
        self.reading_paused = False

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def is_closing(self) -> bool:
        return False


def test_reading_pauses_whether_or_not_writing_is_paused() -> None:
    """A client that takes neither its responses nor is read from: the transport pauses the
    connection's writing (its responses wait), and its buffer then fills with requests not
    taken. Reading must pause all the same, and each pause must be undone on its own. The
    read pause shared its flag with asyncio's writing pause (`_paused`), so with writing
    paused the buffer's pause was skipped and the broker read a never-reading client's
    requests into memory without end (1 GiB in a full test run, test_limits.py); with
    reading paused first, the transport's pause_writing() failed asyncio's assertion."""
    requests = frame(b"r" * 65_532) * 5  # 320 KiB: more than the 256 KiB buffer

    async def scenario(writing_first: bool) -> None:
        protocol = FrameProtocol(lambda reader, writer: None)
        transport = _Transport()
        protocol.connection_made(transport)
        if writing_first:
            protocol.pause_writing()
        await _feed(protocol, requests)
        assert transport.reading_paused, "the broker kept reading"
        if not writing_first:
            protocol.pause_writing()
        protocol.resume_writing()  # the client took its responses: reading stays paused
        assert transport.reading_paused
        decoder = FrameDecoder(max_size=1 << 20, what="request")
        for _ in range(3):  # half of the buffer taken: read on
            assert await protocol.read_frame(decoder) == b"r" * 65_532
        assert not transport.reading_paused

    for writing_first in (True, False):
        asyncio.run(scenario(writing_first))
