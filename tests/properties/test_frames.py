"""Laws of the one frame decoder (korvet/protocol/frames.py) every reader of Kafka frames uses."""

from __future__ import annotations

import asyncio
import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.protocol.frame_io import read_frame
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


@given(bodies, st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       st.integers(min_value=0, max_value=4))
def test_the_listeners_reader_gives_the_decoders_frames_and_stops_where_it_does(
        frames: list[bytes], cuts: list[int], cut_last: int) -> None:
    """``read_frame`` (the listener's loop, taking bodies from the stream's own buffer) reads
    the frames the decoder reads from the same stream in any chunks; a stream that ends
    between frames ends it with None, one that ends inside a frame (its prefix or its body)
    with TruncatedFrame."""
    stream = b"".join(frame(b) for b in frames)
    if frames and cut_last:
        stream = stream[:-min(cut_last, len(frame(frames[-1])))]
    ends = list(itertools.accumulate(len(frame(b)) for b in frames))
    whole = [b for b, end in zip(frames, ends, strict=True) if end <= len(stream)]

    async def read_all() -> tuple[list[bytes], bool]:
        reader = _stream_reader(_chunks(stream, cuts))
        decoder = FrameDecoder(what="request")
        out: list[bytes] = []
        try:
            while (got := await read_frame(reader, decoder)) is not None:
                out.append(got)
        except TruncatedFrame:
            return out, True
        return out, False

    out, truncated = asyncio.run(read_all())
    assert out == whole
    assert truncated == (len(stream) not in (0, *ends))


@pytest.mark.parametrize("size", [-1, 0, REQUEST_MIN_SIZE - 1, 1025])
def test_the_listeners_reader_refuses_a_bad_size_before_reading_the_body(size: int) -> None:
    async def read() -> None:
        # Only the prefix has arrived and the stream stays open: a reader that waited for
        # the body before checking the size would hang here instead of raising.
        reader = _stream_reader([struct.pack(">i", size)], eof=False)
        decoder = FrameDecoder(min_size=REQUEST_MIN_SIZE, max_size=1024, what="request")
        await asyncio.wait_for(read_frame(reader, decoder), 5)

    with pytest.raises(FrameSizeError) as raised:
        asyncio.run(read())
    assert raised.value.size == size
