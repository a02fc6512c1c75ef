"""Fetch responses written as pieces (korvet/protocol/fetch_response.py) are byte for byte
kio's encoding of the same response in every version Korvet serves, and the record sets go out
as the very buffers they were held in; the listener's scatter write
(korvet/server/listener.py, ``_write``) delivers such frames whole and in order over a real
socket that takes only part of them at a time (TLS connections, whose transport queues the
pieces as they are, are served so in tests/integration/test_security.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from korvet.core.api_keys import ApiKey
from korvet.protocol.fetch_response import FetchAnswer, PartitionAnswer, RecordSet, TopicAnswer
from korvet.protocol.framing import (
    _encode_with_kio,
    encode_response,
    encode_response_pieces,
    response_class,
)
from korvet.server.api import declared
from korvet.server.listener import _scatter_fd, _write
from tests.support.examples import examples

VERSIONS = declared(ApiKey.FETCH).versions

_INT64 = st.integers(-(2**63), 2**63 - 1)
_CODES = st.sampled_from([int(ErrorCode.none), int(ErrorCode.offset_out_of_range),
                          int(ErrorCode.unknown_topic_or_partition),
                          int(ErrorCode.fetch_session_id_not_found),
                          int(ErrorCode.kafka_storage_error)])
# sizes around the varint widths of a compact length (127/128, 16383/16384)
_FILL = bytes(range(251)) * 70
_PIECE = st.one_of(st.binary(max_size=40), st.integers(100, 17000).map(lambda n: _FILL[n % 7:][:n]))


@st.composite
def _record_set(draw: st.DrawFn) -> RecordSet:
    records = RecordSet()
    for data in draw(st.lists(_PIECE, max_size=4)):
        cut = draw(st.integers(0, len(data)))
        records.add(memoryview(data)[cut:] if draw(st.booleans()) else data)
    return records


def _diverging(version: int) -> st.SearchStrategy[tuple[int, int] | None]:
    """v12+: a diverging epoch (a tagged field), sometimes."""
    if version < 12:
        return st.none()
    return st.one_of(st.none(), st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)))


@st.composite
def _answer(draw: st.DrawFn) -> FetchAnswer:
    version = draw(st.sampled_from(list(VERSIONS)))
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        key: Any = (uuid.UUID(int=draw(st.integers(0, 2**128 - 1))) if version >= 13
                    else draw(st.text(max_size=150)))
        partitions = [PartitionAnswer(draw(st.integers(0, 2**31 - 1)), draw(_CODES),
                                      hw := draw(_INT64), hw, draw(_INT64), draw(_record_set()),
                                      diverging=draw(_diverging(version)))
                      for _ in range(draw(st.integers(0, 3)))]
        topics.append(TopicAnswer(key, partitions))
    return FetchAnswer(version, draw(_CODES), draw(st.integers(-(2**31), 2**31 - 1)), topics)


@given(_answer(), st.integers(-(2**31), 2**31 - 1))
@settings(max_examples=examples(2))
def test_a_fetch_answer_is_kios_response_byte_for_byte(answer: FetchAnswer,
                                                        correlation_id: int) -> None:
    kio = _encode_with_kio(correlation_id, answer.to_kio(response_class(1, answer.version)))
    pieces = encode_response_pieces(correlation_id, answer)
    assert b"".join(pieces) == kio
    assert encode_response(correlation_id, answer) == kio
    # the record sets are not copied: their own buffers are pieces of the frame
    held = [piece for topic in answer.topics for p in topic.partitions for piece in p.records.pieces
            if len(piece)]
    assert all(any(piece is out for out in pieces) for piece in held)


def test_a_session_error_answer_has_no_topics() -> None:
    for version in (7, 12, 18):
        answer = FetchAnswer(version, int(ErrorCode.fetch_session_id_not_found), 0, [])
        kio = _encode_with_kio(5, answer.to_kio(response_class(1, version)))
        assert encode_response(5, answer) == kio


def _frames(count: int, pieces: int, size: int) -> list[list[bytes | memoryview]]:
    frames = []
    for n in range(count):
        frame: list[bytes | memoryview] = [b"frame %d:" % n]
        for i in range(pieces):
            data = bytes([(n * 7 + i) % 256]) * size
            frame.append(memoryview(data)[1:] if i % 2 else data)
        frames.append(frame)
    return frames


async def _exchange(frames: list[list[bytes | memoryview]]) -> bytes:
    """A server writes the frames with ``_write`` to a client that reads slowly at first, so
    the socket takes only part of each and the transport buffers the rest."""
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fd = _scatter_fd(writer)
        assert fd is not None
        for frame in frames:
            _write(writer, fd, frame)
        await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.05)  # the server's first writes fill the socket
    received = await reader.read()
    writer.close()
    await done.wait()
    server.close()
    await server.wait_closed()
    return received


def test_scatter_writes_arrive_whole_and_in_order() -> None:
    frames = _frames(5, 300, 16 * 1024)  # about 24 MiB: more than a loopback socket takes
    expected = b"".join(b"".join(frame) for frame in frames)
    assert asyncio.run(_exchange(frames)) == expected


def test_denied_topics_are_merged_into_a_fetch_answer() -> None:
    """With an authorizer, a Fetch naming a topic the principal may not read is answered for
    the others by the handler (a ``FetchAnswer``) and TOPIC_AUTHORIZATION_FAILED for it: the
    check point merges that topic into kio's form of the answer, records and all."""
    from korvet.core.errors import ErrorCode as CoreError
    from korvet.protocol.denials import Items
    from korvet.protocol.framing import decode_response, request_class
    from korvet.protocol.kbuild import nested
    from korvet.server.authz import _merge

    version = 12
    request_topic = nested(request_class(1, version), "FetchTopic")
    request_partition = nested(request_class(1, version), "FetchPartition")
    denied_topic = request_topic(topic="secret", partitions=(request_partition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1024),))
    records = RecordSet()
    records.add(b"batch bytes")
    answer = FetchAnswer(version, 0, 9, [TopicAnswer("open", [
        PartitionAnswer(0, 0, 5, 5, 0, records)])])
    response_cls = response_class(1, version)
    shape = declared(ApiKey.FETCH).shape
    assert shape is not None
    check = shape.checks[0]
    assert isinstance(check, Items)
    merged = _merge(answer, [(check, [(denied_topic, CoreError.TOPIC_AUTHORIZATION_FAILED)])],
                    response_cls, version)
    _, decoded = decode_response(encode_response(3, merged)[4:], response_cls)
    assert [t.topic for t in decoded.responses] == ["open", "secret"]
    assert decoded.responses[0].partitions[0].records == b"batch bytes"
    assert decoded.responses[1].partitions[0].error_code == ErrorCode.topic_authorization_failed
    assert decoded.session_id == 9
