"""The broker's own Redis connections (korvet/storage/pipe.py) on a real redis-server: replies
in order and whole however the socket cuts them, errors raised as redis-py raises them, a
broken connection failing what it owed and the next command connecting again with its
scripts; and a broker that keeps serving fetches and appends when its Redis restarts."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import hiredis
import pytest
import redis
import redis.asyncio as aioredis
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from korvet.server.app import connect_redis
from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.connections import SafeConnection, SafeSSLConnection, use_safe_connections
from korvet.storage.pipe import RedisPipe, _Replies
from tests.conftest import KorvetProcess
from tests.support.wire import WireClient


def pack(*args: Any) -> bytes:
    packed: bytes = hiredis.pack_command(args)
    return packed


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("pipe-redis"), appendfsync="off")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_with_pipe(url: str, body: Any, scripts: tuple[str, ...] = ()) -> Any:
    async def main() -> Any:
        client = aioredis.from_url(url)
        pipe = RedisPipe(client, scripts=scripts)
        try:
            return await body(pipe, client)
        finally:
            await pipe.close()
            await client.aclose()
    return asyncio.run(main())


def test_replies_come_in_order_and_an_error_reply_raises_as_redis_py_raises_it(
        redis_server: EmbeddedRedis) -> None:
    key = f"pipe-{uuid.uuid4().hex}"

    async def body(pipe: RedisPipe, _client: aioredis.Redis) -> None:
        assert await pipe.call_all([pack("SET", key, "1"), pack("INCR", key),
                                    pack("GET", key)]) == [b"OK", 2, b"2"]
        with pytest.raises(NoScriptError):
            await pipe.call_all([pack("INCR", key), pack("EVALSHA", "0" * 40, 0),
                                 pack("INCR", key)])
        # Every command of the failed call ran, and the pipe carries on in step.
        assert await pipe.call_all([pack("GET", key)]) == [b"4"]
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await pipe.call(pack("LPUSH", key, "x"))
        assert await pipe.call(pack("GET", key)) == b"4"

    run_with_pipe(redis_server.url, body)


def test_replies_larger_than_one_socket_read_arrive_whole(redis_server: EmbeddedRedis) -> None:
    stream = f"pipe-{uuid.uuid4().hex}"
    big = os.urandom(3 << 20)  # larger than any receive buffer (LARGE_REPLIES: 1 MiB)
    entries = [os.urandom(16_384) for _ in range(200)]

    async def body(pipe: RedisPipe, client: aioredis.Redis) -> None:
        await client.set(stream + "-big", big)
        for i, value in enumerate(entries, start=1):
            await client.xadd(stream, {"batch": value}, id=f"{i}-0")
        got = await pipe.call_all([pack("GET", stream + "-big"),
                                   pack("XRANGE", stream, "-", "+"), pack("GET", stream + "-big")])
        assert got[0] == big and got[2] == big
        assert [entry[1][1] for entry in got[1]] == entries
        assert [entry[0] for entry in got[1]] == [f"{i}-0".encode() for i in range(1, 201)]

    run_with_pipe(redis_server.url, body)


def test_a_killed_connection_fails_what_it_owed_and_the_next_command_reconnects_with_its_scripts(
        redis_server: EmbeddedRedis) -> None:
    script = "return 'loaded on connect'"
    sha = hashlib.sha1(script.encode()).hexdigest()
    name = f"pipe-{uuid.uuid4().hex}"

    async def body(pipe: RedisPipe, client: aioredis.Redis) -> None:
        assert await pipe.call(pack("CLIENT", "SETNAME", name)) == b"OK"
        owed = pipe.submit(pack("BLPOP", name, 30))  # answered only if something is pushed
        await asyncio.sleep(0.2)
        await client.script_flush()  # as a restarted Redis would have no scripts
        assert await client.client_kill_filter(_type="normal", skipme=True) >= 1
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(owed, 10)
        # A new connection, its scripts loaded before anything else is sent on it.
        assert await pipe.call(pack("EVALSHA", sha, 0)) == b"loaded on connect"

    run_with_pipe(redis_server.url, body, scripts=(script,))


def test_scripts_flushed_under_a_live_connection_are_loaded_again(redis_server: EmbeddedRedis) -> None:
    script = "return 'still here'"
    sha = hashlib.sha1(script.encode()).hexdigest()

    async def body(pipe: RedisPipe, client: aioredis.Redis) -> None:
        first = await pipe.call(pack("CLIENT", "ID"))
        assert await pipe.call(pack("EVALSHA", sha, 0)) == b"still here"
        await client.script_flush()  # as an operator, or a failover behind a proxy, would
        with pytest.raises(NoScriptError):  # the command that met NOSCRIPT fails...
            await pipe.call(pack("EVALSHA", sha, 0))
        # ...and the pipe loaded its scripts again, on the same connection
        assert await pipe.call(pack("EVALSHA", sha, 0)) == b"still here"
        assert await pipe.call(pack("CLIENT", "ID")) == first

    run_with_pipe(redis_server.url, body, scripts=(script,))


def test_closing_fails_what_is_owed_and_takes_nothing_more(redis_server: EmbeddedRedis) -> None:
    key = f"pipe-{uuid.uuid4().hex}"

    async def body(pipe: RedisPipe, _client: aioredis.Redis) -> None:
        assert await pipe.call(pack("PING")) == b"PONG"
        owed = pipe.submit(pack("BLPOP", key, 30))
        await asyncio.sleep(0.1)
        await asyncio.wait_for(pipe.close(), 10)
        with pytest.raises(RedisConnectionError, match="closed"):
            await asyncio.wait_for(owed, 1)
        with pytest.raises(RedisConnectionError, match="closed"):
            pipe.submit(pack("PING"))

    run_with_pipe(redis_server.url, body)


class _Transport:
    def abort(self) -> None:
        raise AssertionError("well-formed replies never abort the connection")


REPLIES = (b"+OK\r\n", b":42\r\n", b"$-1\r\n", b"$5\r\nhello\r\n", b"-ERR nope\r\n",
           b"*2\r\n$1\r\na\r\n*1\r\n:7\r\n", b"*0\r\n", b"$0\r\n\r\n")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(REPLIES), min_size=1, max_size=12), st.data())
def test_replies_cut_anywhere_by_the_socket_come_out_the_same(replies: list[bytes],
                                                              data: st.DataObject) -> None:
    stream = b"".join(replies)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=10)))
    whole: list[Any] = []
    _Replies(_Transport(), whole.append, lambda exc: None).feed(stream, len(stream))  # type: ignore[arg-type]
    pieces: list[Any] = []
    parser = _Replies(_Transport(), pieces.append, lambda exc: None)  # type: ignore[arg-type]
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        chunk = memoryview(bytearray(stream[start:end] + b"garbage after"))
        parser.feed(chunk, end - start)
    assert len(whole) == len(replies)
    assert [repr(r) for r in pieces] == [repr(r) for r in whole]
    assert all(isinstance(r, ResponseError) for r, raw in zip(whole, replies, strict=True)
               if raw.startswith(b"-"))
    assert [r for r in whole if not isinstance(r, Exception)] == [
        EXPECTED[raw] for raw in replies if not raw.startswith(b"-")]


EXPECTED = {b"+OK\r\n": b"OK", b":42\r\n": 42, b"$-1\r\n": None, b"$5\r\nhello\r\n": b"hello",
            b"*2\r\n$1\r\na\r\n*1\r\n:7\r\n": [b"a", [7]], b"*0\r\n": [], b"$0\r\n\r\n": b""}


def test_resp3_push_messages_are_no_commands_replies() -> None:
    got: list[Any] = []
    stream = b">2\r\n$10\r\ninvalidate\r\n*0\r\n+OK\r\n>2\r\n$7\r\nmessage\r\n:1\r\n:5\r\n"
    _Replies(_Transport(), got.append, lambda exc: None).feed(stream, len(stream))  # type: ignore[arg-type]
    assert got == [b"OK", 5]


def test_fetches_and_appends_go_on_when_the_brokers_redis_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    url = server.start()
    broker = KorvetProcess(tmp_path / "broker", extra_args=["--redis-url", url]).start()
    topic = "restarted-under-the-broker"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(
                topic, 1, 1, config={"korvet.storage.format": "batches"})]).values():
            future.result(30)
        produce(broker.bootstrap, topic, range(0, 40))
        assert consume(broker.bootstrap, topic, 40) == [str(i).encode() for i in range(40)]
        # Scripts flushed under live connections: the broker loads them again.
        redis.Redis.from_url(url).script_flush()
        produce(broker.bootstrap, topic, range(40, 50))
        assert consume(broker.bootstrap, topic, 50) == [str(i).encode() for i in range(50)]
        server.stop()  # its scripts go with it; the broker's connections break
        server.start()
        holder = (resources.files("korvet.storage") / "lua" / "batch_holder.lua").read_bytes()
        assert redis.Redis.from_url(server.url).script_exists(
            hashlib.sha1(holder).hexdigest()) == [False], "the restarted Redis kept its scripts"
        produce(broker.bootstrap, topic, range(50, 100))
        assert consume(broker.bootstrap, topic, 100) == [str(i).encode() for i in range(100)]
    finally:
        broker.stop()
        server.stop()


def test_a_producer_id_asked_for_while_redis_is_down_is_a_retriable_error_on_an_open_connection(
        tmp_path: Path) -> None:
    """InitProducerId needs Redis (the id counter). With Redis down (a restart, a failover)
    the answer is COORDINATOR_NOT_AVAILABLE, which producers retry, and the connection stays
    open: once Redis is back the same connection gets an id. (A CI run once saw a broker
    close a console producer's connection here in a Redis Cluster failover.)"""
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    url = server.start()
    broker = KorvetProcess(tmp_path / "broker", extra_args=["--redis-url", url]).start()
    ask = InitProducerIdRequest(transactional_id=None,
                                transaction_timeout=i32Timedelta.parse(datetime.timedelta(0)))
    try:
        with WireClient(broker.bootstrap) as client:
            first = client.request(ask)
            assert first.error_code == ErrorCode.none and first.producer_id >= 0
            server.stop()
            down = client.request(ask)
            assert down.error_code == ErrorCode.coordinator_not_available
            assert down.producer_id == -1
            server.start()
            deadline = time.monotonic() + 20
            again = client.request(ask)
            while again.error_code != ErrorCode.none and time.monotonic() < deadline:
                time.sleep(0.2)
                again = client.request(ask)
            assert again.error_code == ErrorCode.none
            assert again.producer_id > first.producer_id  # the counter survived the restart
        assert "Redis failed while answering" not in broker.log_tail(400)
    finally:
        broker.stop()
        server.stop()


def test_metadata_asked_for_while_redis_is_down_is_a_retriable_error_on_an_open_connection(
        tmp_path: Path) -> None:
    """Metadata reads a dense topic's leader epochs from Redis. With Redis down (a restart,
    a failover) the topic is answered LEADER_NOT_AVAILABLE, which clients retry, and the
    connection stays open; once Redis is back the same connection gets the partitions."""
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    url = server.start()
    broker = KorvetProcess(tmp_path / "broker", extra_args=["--redis-url", url]).start()
    topic = "asked-for-while-redis-is-down"
    ask = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                          allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(30)
        produce(broker.bootstrap, topic, range(0, 4))
        with WireClient(broker.bootstrap) as client:
            first = client.request(ask).topics[0]
            assert first.error_code == ErrorCode.none and len(first.partitions) == 2
            server.stop()
            down = client.request(ask).topics[0]
            assert down.error_code == ErrorCode.leader_not_available, down
            server.start()
            deadline = time.monotonic() + 20
            again = client.request(ask).topics[0]
            while again.error_code != ErrorCode.none and time.monotonic() < deadline:
                time.sleep(0.2)
                again = client.request(ask).topics[0]
            assert again.error_code == ErrorCode.none and len(again.partitions) == 2
        assert "Redis failed while answering" not in broker.log_tail(400)
    finally:
        broker.stop()
        server.stop()


def produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.timeout.ms": 30_000, "enable.idempotence": True})
    failed: list[str] = []
    for value in values:
        producer.produce(topic, str(value).encode(),
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
    assert producer.flush(40) == 0
    assert not failed, failed[:3]


def consume(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 40
    try:
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
    finally:
        consumer.close()
    return got


class _WriterGoneBeforeTheWrite(SafeConnection):
    """The race redis-py 8.1 loses: another task tears the connection down after redis-py
    checked that it is connected and before its write (a cluster client resetting a node's
    connections in a failover)."""

    async def _send_packed_command(self, command: Any) -> None:
        self._writer = None
        await super()._send_packed_command(command)


class _PlainWriterGoneBeforeTheWrite(Connection):
    async def _send_packed_command(self, command: Any) -> None:
        self._writer = None
        await super()._send_packed_command(command)


def test_a_write_on_a_connection_torn_down_under_it_is_a_connection_error(
        redis_server: EmbeddedRedis) -> None:
    """A Fetch waiting for appends during a cluster failover closed its client's connection
    'after an unexpected error' (an AttributeError out of redis-py); with the broker's
    connection class it is a ConnectionError, the Redis failure every handler answers, and
    the connection works again at its next command."""
    assert redis_server.port

    async def main() -> None:
        plain = _PlainWriterGoneBeforeTheWrite(host="127.0.0.1", port=redis_server.port,
                                               socket_timeout=5)
        with pytest.raises(AttributeError):  # redis-py's own: no RedisError
            await plain.send_command("PING")
        await plain.disconnect()

        safe = _WriterGoneBeforeTheWrite(host="127.0.0.1", port=redis_server.port,
                                         socket_timeout=5)
        with pytest.raises(RedisConnectionError, match="closed while writing"):
            await safe.send_command("PING")
        working = SafeConnection(host="127.0.0.1", port=redis_server.port, socket_timeout=5)
        await working.send_command("PING")
        assert await working.read_response() == b"PONG"
        await working.disconnect()

        client = await connect_redis(redis_server.url)
        try:
            assert client.connection_pool.connection_class is SafeConnection
            assert await client.ping()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_cluster_client_opens_the_safe_connections_on_every_node() -> None:
    """redis-py's cluster client takes no connection class: the broker's is put into its seed
    nodes and into the keywords it creates every node it learns of from (no connection is
    made here)."""
    for url, expected in (("redis://127.0.0.1:7000", SafeConnection),
                          ("rediss://127.0.0.1:7000", SafeSSLConnection)):
        cluster = RedisCluster.from_url(url, startup_nodes=[ClusterNode("127.0.0.1", 7001)])
        use_safe_connections(cluster)
        seeds = [*cluster.startup_nodes, *cluster.nodes_manager.startup_nodes.values()]
        assert seeds and all(node.connection_class is expected for node in seeds)
        learnt = ClusterNode("127.0.0.1", 7002, **cluster.nodes_manager.connection_kwargs)
        assert learnt.connection_class is expected
