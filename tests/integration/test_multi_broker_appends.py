"""Two broker processes append to one partition at once, with idempotent producers that
retry through both (spec/ProducerState.tla and spec/PartitionLog.tla, end to end).

Two `korvet serve` processes share one Redis. Hypothesis draws, for two idempotent
producers, a plan of batches: each batch is sent through one broker, its response may be
"lost" (the producer does not look at it), and a lost batch is sent again, through the
same broker or the other one, possibly several times; the producers run at the same time,
each on its own connections to both brokers. Then the partition must hold every batch
exactly once, each batch's records at consecutive offsets starting at the base offset
every acknowledgement of it reported (the first answer and every retry's DUP agree),
offsets strictly increasing along the log, and in each producer's sequence order.

A second test does the same with real clients: two confluent-kafka idempotent producers,
one through each broker, each behind a proxy that loses produce responses.
"""

from __future__ import annotations

import datetime
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.core.offsets import DENSE, EntryId
from korvet.faults.proxy import FaultProxy
from korvet.protocol.kbuild import make, nested
from korvet.protocol.records import build_batch
from korvet.storage.entries import KEY
from tests.conftest import KorvetProcess
from tests.integration.faults import ResponseDroppingProxy
from tests.integration.test_clients import create_topic
from tests.support.examples import examples
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

PRODUCE_VERSION = 9


@dataclass
class Brokers:
    first: KorvetProcess
    second: KorvetProcess
    proxies: tuple[ResponseDroppingProxy, ResponseDroppingProxy]

    def bootstraps(self) -> tuple[str, str]:
        return self.first.bootstrap, self.second.bootstrap


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    folder = tmp_path_factory.mktemp("multi-broker")
    proxies = (ResponseDroppingProxy(drop_every=3, max_drops=6).start(),
               ResponseDroppingProxy(drop_every=4, max_drops=6).start())
    # both with --multi-broker: a broker without it claims its Redis alone (server/claim.py)
    first = KorvetProcess(folder / "a", extra_args=["--advertised-port", str(proxies[0].port),
                                                    "--multi-broker", "--broker-id", "1"])
    second = KorvetProcess(folder / "b", extra_args=["--advertised-port", str(proxies[1].port),
                                                     "--multi-broker", "--broker-id", "2"])
    try:
        first.start()
        second.extra_args += ["--redis-url", first.redis_url]
        second.start()
        proxies[0].upstream_port, proxies[1].upstream_port = first.port, second.port
        yield Brokers(first, second, proxies)
    finally:
        second.stop()
        first.stop()
        for proxy in proxies:
            proxy.stop()


def _init_producer_id(client: WireClient) -> tuple[int, int]:
    cls = load_request_schema(22, 4)
    response = client.request(make(cls, transactional_id=None,
                                   transaction_timeout=datetime.timedelta(seconds=60),
                                   producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def _produce(client: WireClient, topic: str, payload: bytes) -> tuple[ErrorCode, int]:
    cls = load_request_schema(0, PRODUCE_VERSION)
    partition = make(nested(cls, "PartitionProduceData"), index=0, records=payload)
    data = make(nested(cls, "TopicProduceData"), name=topic, partition_data=(partition,))
    response = client.request(make(cls, transactional_id=None, acks=-1,
                                   timeout=datetime.timedelta(seconds=10), topic_data=(data,)))
    part = response.responses[0].partition_responses[0]
    return ErrorCode(part.error_code), int(part.base_offset)


# A batch: (size, broker index of the first send, lost?, retries: broker indexes)
Step = tuple[int, int, bool, list[int]]
plans = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1), st.booleans(),
                           st.lists(st.integers(0, 1), min_size=1, max_size=3)),
                 min_size=1, max_size=8)


def _run_producer(bootstraps: tuple[str, str], topic: str, name: str, plan: list[Step],
                  acks: dict[tuple[str, int], list[int]], errors: list[str]) -> None:
    connections = [WireClient(b) for b in bootstraps]
    try:
        producer_id, epoch = _init_producer_id(connections[0])
        sequence = 0
        for index, (size, broker, lost, retries) in enumerate(plan):
            now = int(time.time() * 1000)
            payload = build_batch(
                [(now, f"{name}-{index}-{i}".encode(), b"v", []) for i in range(size)],
                producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
            # The first send; a lost response is one the producer never looks at.
            for via in [broker, *(retries if lost else [])]:
                error, base = _produce(connections[via], topic, payload)
                if error is not ErrorCode.none:
                    errors.append(f"{name} batch {index} via broker {via}: {error.name}")
                acks.setdefault((name, index), []).append(base)
            sequence += size
    finally:
        for connection in connections:
            connection.sock.close()


@pytest.mark.spec("ProducerState", "epoch", "nextSeq", "unacked", "net", "NoBatchStoredTwice",
                  "DupReturnsOriginalOffsets", "OkReturnsStoredOffsets", "FencedAndInSequence",
                  "AckedStoredOnce")
@settings(max_examples=examples(0.12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan_a=plans, plan_b=plans)
def test_idempotent_producers_retrying_through_both_brokers(
        brokers: Brokers, plan_a: list[Step], plan_b: list[Step]) -> None:
    topic = f"multi-{time.monotonic_ns()}"
    create_topic(brokers.first.bootstrap, topic, partitions=1)
    acks: dict[tuple[str, int], list[int]] = {}
    errors: list[str] = []
    threads = [threading.Thread(target=_run_producer,
                                args=(brokers.bootstraps(), topic, name, plan, acks, errors))
               for name, plan in (("a", plan_a), ("b", plan_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    stored = _stored(brokers.first.redis_url, topic)
    keys = [key for _, key in stored]
    # Nothing duplicated, nothing missing.
    expected = {f"{name}-{index}-{i}" for name, plan in (("a", plan_a), ("b", plan_b))
                for index, (size, *_rest) in enumerate(plan) for i in range(size)}
    assert len(keys) == len(set(keys)) and set(keys) == expected
    # Offsets strictly increase; a batch's records are consecutive from the base offset
    # that every answer to it (the first and each retry's DUP) reported.
    offsets = [offset for offset, _ in stored]
    assert offsets == sorted(set(offsets))
    where = {key: offset for offset, key in stored}
    for name, plan in (("a", plan_a), ("b", plan_b)):
        previous = -1
        for index, (size, *_rest) in enumerate(plan):
            bases = set(acks[(name, index)])
            assert len(bases) == 1, f"{name} batch {index} was told different offsets: {bases}"
            base = bases.pop()
            assert [where[f"{name}-{index}-{i}"] for i in range(size)] == \
                list(range(base, base + size))
            assert base > previous, "a producer's batches are stored in sequence order"
            previous = base


def _stored(redis_url: str, topic: str) -> list[tuple[int, str]]:
    """(offset, key) of every entry in the partition's stream, read straight from Redis."""
    client = redis.Redis.from_url(redis_url)
    try:
        codec = DENSE  # the topic has dense offsets, the default of new topics
        entries: Any = client.xrange(f"korvet:{{{topic}:0}}:stream")
        return [(codec.encode_id(EntryId.parse(entry_id)), fields[KEY].decode())
                for entry_id, fields in entries]
    finally:
        client.close()


def test_real_idempotent_producers_through_both_brokers_losing_responses(
        brokers: Brokers) -> None:
    """confluent-kafka (librdkafka) idempotent producers, one through each broker, each behind
    a proxy that throws produce responses away: their retries must not duplicate anything."""
    topic = f"multi-real-{time.monotonic_ns()}"
    create_topic(brokers.first.bootstrap, topic, partitions=1)
    told: dict[str, list[tuple[int, int]]] = {}
    dropped_before = [proxy.dropped for proxy in brokers.proxies]

    def produce(name: str, proxy: ResponseDroppingProxy) -> None:
        # Small batches, so that there are many produce requests for the proxy to sabotage.
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "acks": "all",
                             "enable.idempotence": True, "linger.ms": 0, "batch.size": 200,
                             "retry.backoff.ms": 20})
        offsets: list[tuple[int, int]] = [(-1, -1)] * 1500
        errors: list[str] = []

        def report(index: int):  # type: ignore[no-untyped-def]
            def callback(err, msg):  # type: ignore[no-untyped-def]
                if err is not None:
                    errors.append(str(err))
                else:
                    offsets[index] = (msg.partition(), msg.offset())
            return callback

        for i in range(1500):
            producer.produce(topic, key=f"{name}-{i}".encode(), value=b"x", partition=0,
                             on_delivery=report(i))
            producer.poll(0)
        assert producer.flush(120) == 0, f"producer {name} could not deliver every record"
        assert not errors, errors[:5]
        told[name] = offsets

    threads = [threading.Thread(target=produce, args=(name, proxy))
               for name, proxy in zip(("a", "b"), brokers.proxies, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert sum(p.dropped for p in brokers.proxies) > sum(dropped_before), "no response was lost"
    stored = _stored(brokers.first.redis_url, topic)
    keys = [key for _, key in stored]
    assert len(keys) == len(set(keys)) == 3000, "records stored twice or missing"
    where = {key: offset for offset, key in stored}
    for name in ("a", "b"):
        offsets = [where[f"{name}-{i}"] for i in range(1500)]
        assert offsets == sorted(set(offsets)), f"producer {name}'s records out of order"
        assert [offset for _, offset in told[name]] == offsets, (
            f"producer {name} was told other offsets than its records are stored at")


def _fetch_one(client: WireClient, topic: str, offset: int) -> Any:
    """Fetch v12 at ``offset``, at most one record (partition_max_bytes 1: KIP-74's first)."""
    cls = load_request_schema(1, 12)
    part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1,
                fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1)
    entry = make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,))
    response = client.request(make(cls, replica_id=-1, max_wait=datetime.timedelta(0),
                                    min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                    session_id=0, session_epoch=-1, topics=(entry,),
                                    forgotten_topics_data=(), rack_id=""))
    return response.responses[0].partitions[0]


@pytest.mark.spec("PartitionLog", "ReadAhead", "ReadAheadChecked", "FetchWithinBounds")
def test_read_ahead_never_serves_records_retention_deleted_before_the_request(
        brokers: Brokers) -> None:
    """spec/PartitionLog.tla, model PartitionLog-ReadAheadUnchecked: the broker reads the
    predicted next response ahead; if an append's retention then deletes those records, the
    consumer's fetch must get OFFSET_OUT_OF_RANGE (the log start moved), not the records."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"read-ahead-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": brokers.first.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1,
                                  config={"korvet.retention.records": "3"})])[topic].result(30)
    client = WireClient(brokers.first.bootstrap)
    try:
        def produce(tag: str) -> int:
            now = int(time.time() * 1000)
            error, base = _produce(client, topic, build_batch(
                [(now, f"{tag}{i}".encode(), b"v", []) for i in range(3)]))
            assert error is ErrorCode.none
            return base

        base = produce("old")
        first = _fetch_one(client, topic, base)
        assert first.error_code == ErrorCode.none
        # One batch of one record (lastOffsetDelta 0): the read-ahead then holds the next.
        assert struct.unpack_from(">iiib", first.records, 8)[0] + 12 == len(first.records)
        assert struct.unpack_from(">i", first.records, 23)[0] == 0, (
            "the first fetch must stop after one record, so the read-ahead holds the next")
        time.sleep(0.3)  # the read-ahead of offset base + 1 has run by now
        produce("new")  # MAXLEN 3: the three old records are deleted, the log starts later
        second = _fetch_one(client, topic, base + 1)
        assert second.error_code == ErrorCode.offset_out_of_range, (
            "a prepared response served records retention had deleted before the request")
        assert second.log_start_offset > base + 1
    finally:
        client.sock.close()


def test_a_batch_behind_one_that_never_reached_redis_waits_for_it(
        tmp_path: Path, fresh_redis_url: str, unique_name: str) -> None:
    """An idempotent producer's batch failed on its way to Redis (the broker cut off from
    Redis: never run); its next batch must not be appended behind the gap and answered
    OUT_OF_ORDER_SEQUENCE_NUMBER (librdkafka then bumps the epoch, and a batch of another
    partition that was stored but not confirmed is stored twice: found by `korvet faults
    run --topology cluster`), but refused with the same retriable error until the failed
    batch is sent again. Then both are stored once each, in order."""
    upstream = urlsplit(fresh_redis_url)
    assert upstream.port is not None
    proxy = FaultProxy("127.0.0.1", upstream.port).start()
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--redis-url", proxy.url])
    try:
        broker.start()
        create_topic(broker.bootstrap, unique_name, 1)
        with WireClient(broker.bootstrap, timeout=30) as client:
            producer_id, epoch = _init_producer_id(client)

            def batch(sequence: int) -> bytes:
                return build_batch([(int(time.time() * 1000), f"r{sequence}".encode(), b"v", [])],
                                   producer_id=producer_id, producer_epoch=epoch,
                                   base_sequence=sequence)

            assert _produce(client, unique_name, batch(0))[0] is ErrorCode.none
            proxy.cut()
            answers: dict[int, tuple[ErrorCode, int]] = {}
            sending = threading.Thread(target=lambda: answers.update({1: _produce(
                client, unique_name, batch(1))}))
            sending.start()
            time.sleep(1.0)
            proxy.heal()  # the held append is dropped with its connection: it never ran
            sending.join(30)
            assert answers[1][0] is ErrorCode.kafka_storage_error
            assert _produce(client, unique_name, batch(2))[0] is ErrorCode.kafka_storage_error
            assert _produce(client, unique_name, batch(1))[0] is ErrorCode.none
            assert _produce(client, unique_name, batch(2))[0] is ErrorCode.none
        stored = redis.Redis.from_url(fresh_redis_url).xrange(
            f"korvet:{{{unique_name}:0}}:stream") or []
        assert [(fields or {}).get(KEY) for _, fields in stored] == [b"r0", b"r1", b"r2"]
    finally:
        broker.stop()
        proxy.stop()
