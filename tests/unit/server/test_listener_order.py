"""The listener's response order (korvet/server/listener.py), on a real socket with handlers
whose Deferred responses the test resolves: responses go out in request order, and one that is
ready is not held back while a later one still waits for Redis (a producer with several
requests in flight sends its next request when it has an answer)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

from kio.index import load_request_schema

from korvet.core.api_keys import ApiKey
from korvet.protocol.frames import FrameDecoder
from korvet.protocol.framing import encode_request
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.registry import ApiRegistry, Deferred
from korvet.server.connection import Connection
from korvet.server.listener import KafkaListener, _write

_VERSION = 9


def _produce(correlation_id: int) -> bytes:
    cls = load_request_schema(0, _VERSION)
    data = make(nested(cls, "TopicProduceData"), name="t", partition_data=(
        make(nested(cls, "PartitionProduceData"), index=0, records=b"x"),))
    request = make(cls, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                   topic_data=(data,))
    return encode_request(request, correlation_id)


def _response(base_offset: int) -> Any:
    cls = response_type(load_request_schema(0, _VERSION))
    partition = make(nested(cls, "PartitionProduceResponse"), index=0, error_code=0,
                     base_offset=base_offset, log_append_time=-1, log_start_offset=0,
                     record_errors=(), error_message=None)
    return make(cls, throttle_time=0, responses=(
        make(nested(cls, "TopicProduceResponse"), name="t", partition_responses=(partition,)),))


async def _read_correlation(reader: asyncio.StreamReader, decoder: FrameDecoder,
                            timeout: float) -> int:
    async def read() -> int:
        while (frame := decoder.next_frame()) is None:
            data = await reader.read(65536)
            assert data, "the broker closed the connection"
            decoder.feed(data)
        (correlation,) = struct.unpack_from(">i", frame, 0)
        return int(correlation)
    return await asyncio.wait_for(read(), timeout)


@contextlib.asynccontextmanager
async def _connected(append_of: Callable[[Connection], asyncio.Future[int]]
                     ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                              FrameDecoder]]:
    """A listener whose Produce handler answers a Deferred on ``append_of``'s future (the
    test settles it), and a client connection to it with a decoder of its responses."""
    async def handle(conn: Connection, request: Any) -> Deferred:
        append = append_of(conn)

        async def respond() -> Any:
            return _response(await append)
        return Deferred(respond(), (append,))

    registry: ApiRegistry[Connection] = ApiRegistry()
    registry.register(ApiKey.PRODUCE, range(3, 14), handle)
    listener = KafkaListener(registry, port=0)
    port = await listener.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        yield reader, writer, FrameDecoder(min_size=4, what="response")
        writer.close()
    finally:
        await listener.close()


async def _scenario() -> None:
    loop = asyncio.get_running_loop()
    appends: list[asyncio.Future[int]] = []

    def append_of(conn: Connection) -> asyncio.Future[int]:
        appends.append(loop.create_future())
        return appends[-1]

    async with _connected(append_of) as (reader, writer, decoder):
        writer.write(_produce(1) + _produce(2) + _produce(3))
        while len(appends) < 3:
            await asyncio.sleep(0.01)
        appends[0].set_result(10)
        # The first is answered while the second still waits, not when the queue is empty.
        assert await _read_correlation(reader, decoder, 5) == 1
        appends[2].set_result(30)  # the third is ready first: still answered after the second
        try:  # nothing comes out of order
            got = await _read_correlation(reader, decoder, 0.2)
            raise AssertionError(f"response {got} went out before response 2")
        except TimeoutError:
            pass
        appends[1].set_result(20)
        assert await _read_correlation(reader, decoder, 5) == 2
        assert await _read_correlation(reader, decoder, 5) == 3


def test_ready_responses_go_out_in_order_without_waiting_for_later_ones() -> None:
    asyncio.run(_scenario())


async def _bunches() -> None:
    loop = asyncio.get_running_loop()
    writes: list[list[int]] = []  # the correlation ids of the appends each pipe write carried
    queued: list[int] = []

    def write() -> None:  # as RedisPipe does: one write per loop round, of what is queued
        writes.append(list(queued))
        queued.clear()

    def append_of(conn: Connection) -> asyncio.Future[int]:
        if not queued:
            loop.call_soon(write)
        queued.append(conn.correlation_id)
        append: asyncio.Future[int] = loop.create_future()
        append.set_result(conn.correlation_id)
        return append

    async with _connected(append_of) as (reader, writer, decoder):
        writer.write(b"".join(_produce(c) for c in range(1, 21)))  # 20 requests at once
        assert [await _read_correlation(reader, decoder, 5) for _ in range(20)] == list(
            range(1, 21))
        # Requests that came together share a write to Redis, at most 8 of them: a backlog
        # is not decoded whole before its first append leaves.
        assert [c for w in writes for c in w] == list(range(1, 21))
        assert max(len(w) for w in writes) == 8, writes
        assert writes[0] == list(range(1, 9)), writes
        # A request alone does not wait for a bunch to fill.
        writer.write(_produce(21))
        assert await _read_correlation(reader, decoder, 5) == 21
        assert writes[-1] == [21]


def test_produce_requests_that_come_together_send_their_appends_together() -> None:
    """Produce requests already buffered on a connection are decoded back to back (at most
    8) before their appends leave, so one write carries them to Redis; the appends and the
    responses keep the requests' order, and a lone request is answered at once."""
    asyncio.run(_bunches())


def test_a_response_to_a_peer_that_reset_is_dropped_without_a_warning_per_piece(
        caplog: Any) -> None:
    """A consumer killed while the broker writes a Fetch response of thousands of pieces
    (its record batches): the first write meets the reset and the rest of the response is
    dropped. Before, each remaining piece went to the closed transport, which logs
    "socket.send() raised exception." for every write after the fifth: 12,000-16,000 lines
    a kill in a new user's soak, with the event loop stalled meanwhile."""
    async def scenario() -> None:
        accepted: asyncio.Future[socket.socket] = asyncio.get_running_loop().create_future()

        async def on_client(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket").dup()
            writer.transport.abort()
            accepted.set_result(sock)

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        transport: Any = writer.transport
        transport.pause_reading()  # the reset is met by the response's first write
        peer = await accepted
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # a reset, as from a killed process
        await asyncio.sleep(0.1)
        assert not writer.transport.is_closing()
        fd = writer.get_extra_info("socket").fileno()
        _write(writer, fd, [b"r" * 200] * 5_000)
        _write(writer, fd, [b"next response"] * 10)
        await asyncio.sleep(0.1)
        assert writer.transport.is_closing()
        writer.close()
        server.close()
        await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(scenario())
    warnings = [r for r in caplog.records if "socket.send() raised" in r.getMessage()]
    assert len(warnings) <= 1, f"{len(warnings)} warnings for one dead connection"
