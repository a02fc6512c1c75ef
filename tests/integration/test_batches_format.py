"""The ``batches`` storage format (korvet.storage.format=batches) through real clients.

One stream entry per produced batch, stored as sent: records round-trip byte for byte through
librdkafka and kafka-python (compressed too), a fetch from inside a batch returns that batch
(the client skips its first records), ListOffsets by time, DeleteRecords and retention land
inside or between batches, idempotent retries are deduplicated, and the format is fixed at
creation. All on the one shared broker of the run.
"""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.protocol.kbuild import make
from korvet.protocol.records import Record, build_batch
from tests.conftest import KorvetProcess
from tests.integration import clients
from tests.integration.test_broker_behaviour import (
    fetch_request,
    list_offsets,
    produce_request,
    xlen,
)
from tests.integration.test_clients import assert_round_trip
from tests.support.examples import examples
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

BATCHES = {"korvet.storage.format": "batches"}


def create(broker: KorvetProcess, name: str, partitions: int = 1,
           configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  config={**BATCHES, **(configs or {})})])[name].result(30)


def produce(client: WireClient, topic: str, payload: bytes) -> tuple[ErrorCode, int]:
    response = client.request(produce_request(topic, {0: payload}))
    part = response.responses[0].partition_responses[0]
    return ErrorCode(part.error_code), int(part.base_offset)


def stamped(count: int, base: int, step: int = 1, tag: str = "r") -> list[Record]:
    return [Record(base + i * step, f"{tag}{i}".encode(), f"value-{tag}{i}".encode() * 3, [])
            for i in range(count)]


def consume_from(broker: KorvetProcess, topic: str, offset: int, expected: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, offset)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert not msg.error(), msg.error()
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(("codec_rdkafka", "codec_python"), [("none", None), ("lz4", "gzip"),
                                                             ("zstd", "snappy")])
def test_clients_round_trip_a_batches_topic(korvet: KorvetProcess, unique_name: str,
                                            codec_rdkafka: str, codec_python: str | None) -> None:
    create(korvet, unique_name, partitions=2)
    records = clients.make_records(400, 2)
    first, second = records[:200], records[200:]
    told = clients.confluent_produce(korvet.bootstrap, unique_name, first,
                                     extra={"compression.type": codec_rdkafka})
    told += clients.kafka_python_produce(korvet.bootstrap, unique_name, second,
                                         extra={"compression_type": codec_python})
    entries = xlen(korvet, unique_name, 0) + xlen(korvet, unique_name, 1)
    assert 2 <= entries < 100, f"{entries} stream entries for 400 records: not one per batch"
    assert_round_trip(records, told,
                      clients.confluent_consume(korvet.bootstrap, unique_name, 2, len(records)))
    assert_round_trip(records, told,
                      clients.kafka_python_consume(korvet.bootstrap, unique_name, 2, len(records)))


def test_fetch_from_inside_a_batch_returns_the_whole_batch(korvet: KorvetProcess,
                                                           unique_name: str) -> None:
    create(korvet, unique_name)
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        error, base = produce(client, unique_name, build_batch(stamped(10, now)))
        assert error is ErrorCode.none
        error, second = produce(client, unique_name, build_batch(stamped(5, now, tag="s")))
        assert error is ErrorCode.none and second >= base + 10
        response = client.request(fetch_request(unique_name, 0, base + 4))
    raw = bytes(response.responses[0].partitions[0].records)
    # Kafka's answer: the batch holding the offset, from its own base offset.
    assert int.from_bytes(raw[:8], "big") == base
    assert int.from_bytes(raw[57:61], "big") == 10
    got = consume_from(korvet, unique_name, base + 4, 11)
    assert [m.offset() for m in got] == [base + i for i in range(4, 10)] + [
        second + i for i in range(5)]
    assert [m.key() for m in got[:2]] == [b"r4", b"r5"]


def test_a_small_partition_max_bytes_still_returns_one_whole_batch(korvet: KorvetProcess,
                                                                   unique_name: str) -> None:
    create(korvet, unique_name)
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        _, base = produce(client, unique_name, build_batch(stamped(50, now)))
        produce(client, unique_name, build_batch(stamped(50, now, tag="s")))
        tiny = client.request(fetch_request(unique_name, 0, base, partition_max_bytes=10))
        both = client.request(fetch_request(unique_name, 0, base))
    one = bytes(tiny.responses[0].partitions[0].records)
    assert int.from_bytes(one[8:12], "big") + 12 == len(one), "KIP-74: exactly one whole batch"
    assert len(bytes(both.responses[0].partitions[0].records)) == 2 * len(one)


def test_list_offsets_by_timestamp_inside_and_between_batches(korvet: KorvetProcess,
                                                              unique_name: str) -> None:
    create(korvet, unique_name)
    base = int(time.time() * 1000) - 20_000
    with WireClient(korvet.bootstrap) as client:
        _, first = produce(client, unique_name, build_batch(stamped(5, base, 1000)))
        _, second = produce(client, unique_name,
                            build_batch(stamped(5, base + 5000, 1000, "s"), compression=2))
        assert list_offsets(client, unique_name, 0, base + 2500) == (first + 3, base + 3000)
        assert list_offsets(client, unique_name, 0, base + 4001) == (second, base + 5000)
        assert list_offsets(client, unique_name, 0, base + 7000) == (second + 2, base + 7000)
        assert list_offsets(client, unique_name, 0, base + 60_000) == (-1, -1)
        assert list_offsets(client, unique_name, 0, -3) == (second + 4, base + 9000)
        assert list_offsets(client, unique_name, 0, -1)[0] == second + 5
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": "times"})
    try:
        found = consumer.offsets_for_times([TopicPartition(unique_name, 0, base + 1500)], 10)
    finally:
        consumer.close()
    assert found[0].offset == first + 2


def test_delete_records_inside_a_batch(korvet: KorvetProcess, unique_name: str) -> None:
    create(korvet, unique_name)
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        _, first = produce(client, unique_name, build_batch(stamped(10, now)))
        _, second = produce(client, unique_name, build_batch(stamped(10, now, tag="s")))
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    done = admin.delete_records([TopicPartition(unique_name, 0, second + 3)])
    assert next(iter(done.values())).result(30).low_watermark == second + 3
    assert xlen(korvet, unique_name) == 1, "the batch before the new start stayed"
    with WireClient(korvet.bootstrap) as client:
        assert list_offsets(client, unique_name, 0, -2)[0] == second + 3
        gone = client.request(fetch_request(unique_name, 0, first + 5))
        assert gone.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
        assert list_offsets(client, unique_name, 0, -3)[0] == second + 9
    got = consume_from(korvet, unique_name, second + 3, 7)
    assert [m.key() for m in got] == [f"s{i}".encode() for i in range(3, 10)]


def test_retention_removes_whole_batches(korvet: KorvetProcess, unique_name: str) -> None:
    create(korvet, unique_name, configs={"korvet.retention.records": "25"})
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        bases = [produce(client, unique_name, build_batch(stamped(10, now, tag=f"b{n}-")))[1]
                 for n in range(5)]
        assert xlen(korvet, unique_name) == 3, "25 records of 10-record batches: 3 entries"
        # The log starts one past the last removed record (as with the records format).
        start = list_offsets(client, unique_name, 0, -2)[0]
        assert start == bases[1] + 10
        gone = client.request(fetch_request(unique_name, 0, bases[1] + 9))
        assert gone.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    assert consume_from(korvet, unique_name, start, 1)[0].key() == b"b2-0"
    timed = unique_name + "-ms"
    # a checkpoint of the time index after every batch: dense retention removes whole
    # stretches of it, as Kafka removes whole segments
    create(korvet, timed, configs={"retention.ms": "1000", "index.interval.bytes": "1"})
    with WireClient(korvet.bootstrap) as client:
        # a minute in the past and in the future: gone and kept by timestamp (dense) and by
        # append time (time), however slow the machine
        _, expired = produce(client, timed, build_batch(stamped(10, now - 60_000)))
        time.sleep(1.5)
        _, kept = produce(client, timed, build_batch(stamped(3, int(time.time() * 1000) + 60_000)))
        assert xlen(korvet, timed) == 1
        assert list_offsets(client, timed, 0, -2)[0] == expired + 10
        assert [m.offset() for m in consume_from(korvet, timed, expired + 10, 3)] == [
            kept, kept + 1, kept + 2]


def _init_producer_id(client: WireClient) -> tuple[int, int]:
    cls = load_request_schema(22, 4)
    response = client.request(make(cls, transactional_id=None,
                                   transaction_timeout=datetime.timedelta(seconds=60),
                                   producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def test_idempotent_retries_are_stored_once(korvet: KorvetProcess, unique_name: str) -> None:
    create(korvet, unique_name)
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        producer_id, epoch = _init_producer_id(client)
        first = build_batch(stamped(4, now), producer_id=producer_id, producer_epoch=epoch,
                            base_sequence=0)
        second = build_batch(stamped(3, now, tag="s"), producer_id=producer_id,
                             producer_epoch=epoch, base_sequence=4)
        sent = [produce(client, unique_name, payload) for payload in (first, first, second,
                                                                     second, first)]
        gap = build_batch(stamped(1, now, tag="g"), producer_id=producer_id,
                          producer_epoch=epoch, base_sequence=9)
        refused, _ = produce(client, unique_name, gap)
    assert [error for error, _ in sent] == [ErrorCode.none] * 5
    assert sent[1][1] == sent[0][1] and sent[3][1] == sent[2][1] and sent[4][1] == sent[0][1]
    assert refused is ErrorCode.out_of_order_sequence_number
    assert xlen(korvet, unique_name) == 2
    got = consume_from(korvet, unique_name, sent[0][1], 7)
    assert [m.key() for m in got] == [b"r0", b"r1", b"r2", b"r3", b"s0", b"s1", b"s2"]


def test_idempotent_librdkafka_producer_and_a_consumer_group(korvet: KorvetProcess,
                                                             unique_name: str) -> None:
    create(korvet, unique_name, partitions=2)
    producer = Producer({"bootstrap.servers": korvet.bootstrap, "enable.idempotence": True,
                         "compression.type": "lz4", "linger.ms": 5})
    for i in range(300):
        producer.produce(unique_name, key=f"k{i}".encode(), value=b"v" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([unique_name])
    keys: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(keys) < 300 and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                assert not msg.error(), msg.error()
                key = msg.key()
                assert key is not None
                keys.add(key)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(unique_name, p) for p in range(2)], 10)
        high = [consumer.get_watermark_offsets(TopicPartition(unique_name, p), 10)[1]
                for p in range(2)]
    finally:
        consumer.close()
    assert keys == {f"k{i}".encode() for i in range(300)}
    assert [c.offset for c in committed] == high, "the group's position is not at the end"


def _config_error(future: Any) -> str:
    with pytest.raises(KafkaException) as caught:
        future.result(30)
    error = caught.value.args[0]
    assert error.name() == "INVALID_CONFIG", error
    return str(error.str())


def test_the_format_is_fixed_at_creation(korvet: KorvetProcess, unique_name: str) -> None:
    create(korvet, unique_name)
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, unique_name, incremental_configs=[
        ConfigEntry("korvet.storage.format", "records",
                    incremental_operation=AlterConfigOpType.SET)])
    message = _config_error(admin.incremental_alter_configs([resource])[resource])
    assert "korvet.storage.format cannot change" in message and "'batches'" in message
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, unique_name)])
    entries = next(iter(described.values())).result(30)
    assert entries["korvet.storage.format"].value == "batches"
    bad = unique_name + "-bad"
    assert "korvet.storage.format" in _config_error(admin.create_topics([NewTopic(
        bad, 1, config={"korvet.storage.format": "pages"})])[bad])
    clash = unique_name + "-clash"
    assert "log.append.timestamp.header" in _config_error(admin.create_topics([NewTopic(
        clash, 1, config={**BATCHES, "log.append.timestamp.header": "true"})])[clash])
    plain = unique_name + "-plain"
    admin.create_topics([NewTopic(plain, 1)])[plain].result(30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, plain)])
    assert next(iter(described.values())).result(30)["korvet.storage.format"].value == "records"


def test_log_append_time_topic_stamps_the_stored_batch(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    create(korvet, unique_name, configs={"message.timestamp.type": "LogAppendTime"})
    old = int(time.time() * 1000) - 50_000
    before = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        error, base = produce(client, unique_name, build_batch(stamped(3, old)))
    assert error is ErrorCode.none
    got = consume_from(korvet, unique_name, base, 3)
    stamps = {m.timestamp() for m in got}
    assert len(stamps) == 1
    kind, stamp = stamps.pop()
    assert kind == 2 and before <= stamp <= int(time.time() * 1000)  # 2: LogAppendTime


# --- the two formats side by side ------------------------------------------------------------

def _fetched(client: WireClient, topic: str, offset: int, max_bytes: int
             ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of the records a fetch returns at or after ``offset``
    (a client drops those before it), decoded by kafka-python's own codec."""
    from kafka.record import MemoryRecords

    response = client.request(fetch_request(topic, 0, offset, partition_max_bytes=max_bytes))
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    records = MemoryRecords(bytes(part.records or b""))
    got = []
    while (batch := records.next_batch()) is not None:
        for r in batch:
            if r.offset >= offset:
                got.append((r.offset, r.timestamp, r.key, r.value))
    return got


produces = st.lists(st.tuples(st.integers(1, 30), st.sampled_from([0, 1, 2, 3, 4])),
                    min_size=1, max_size=6)


@given(produces, st.data())
@settings(max_examples=examples(0.1), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_both_formats_return_the_same_records(korvet: KorvetProcess, unique_name: str,
                                              plan: list[tuple[int, int]],
                                              data: st.DataObject) -> None:
    """Any produces (sizes, codecs) into a records topic and a batches topic; a fetch from
    the n-th record with any byte budget returns, after the client's skipping, the same
    records (keys, values, timestamps) from the same position in both, offsets in step."""
    suffix = uuid.uuid4().hex[:6]
    names = {"records": f"{unique_name}-r-{suffix}", "batches": f"{unique_name}-b-{suffix}"}
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    for fmt, name in names.items():
        admin.create_topics([NewTopic(name, 1, config={"korvet.storage.format": fmt})])[
            name].result(30)
    now = int(time.time() * 1000)
    offsets: dict[str, list[int]] = {fmt: [] for fmt in names}
    with WireClient(korvet.bootstrap) as client:
        for n, (size, codec) in enumerate(plan):
            payload = build_batch(stamped(size, now - 1000 + n * 37, 3, f"p{n}-"),
                                  compression=codec)
            for fmt, name in names.items():
                error, base = produce(client, name, payload)
                assert error is ErrorCode.none
                offsets[fmt] += [base + i for i in range(size)]
        total = len(offsets["records"])
        start = data.draw(st.integers(0, total - 1), label="from record")
        budget = data.draw(st.integers(1, 4000), label="partition max bytes")
        seen = {fmt: _fetched(client, names[fmt], offsets[fmt][start], budget)
                for fmt in names}
    for fmt in names:
        assert seen[fmt], f"{fmt}: nothing returned (KIP-74: something must come)"
        assert [o for o, *_ in seen[fmt]] == offsets[fmt][start:start + len(seen[fmt])]
    common = min(len(seen["records"]), len(seen["batches"]))
    assert [r[1:] for r in seen["records"][:common]] == [r[1:] for r in seen["batches"][:common]]


def test_the_broker_default_format_applies_to_new_topics_only(tmp_path: Path,
                                                              unique_name: str) -> None:
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--topics-storage-format", "batches"])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        plain = unique_name + "-default"
        kept = unique_name + "-records"
        for future in admin.create_topics([NewTopic(plain, 1), NewTopic(kept, 1, config={
                "korvet.storage.format": "records"})]).values():
            future.result(30)
        now = int(time.time() * 1000)
        with WireClient(broker.bootstrap) as client:
            for name in (plain, kept):
                assert produce(client, name, build_batch(stamped(10, now)))[0] is ErrorCode.none
        assert xlen(broker, plain) == 1 and xlen(broker, kept) == 10
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in (plain, kept)]
        described = [f.result(30)["korvet.storage.format"].value
                     for f in admin.describe_configs(resources).values()]
        assert sorted(described) == ["batches", "records"]
    finally:
        broker.stop()
