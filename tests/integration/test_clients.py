"""Real Kafka clients produce to and fetch from Korvet; what they read back is what they wrote.

For every client: 10,000 keyed records with headers (including a repeated header
name) over 3 partitions, read back byte-exact at the offsets the producer was
told, with timestamps and headers intact. The Java console producer, idempotent
by default, is run through a proxy that loses produce responses, and the log must
hold every record exactly once. ``redis-cli XRANGE`` shows the records.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from korvet.core.offsets import DENSE, EntryId
from korvet.jvm.java_clients import KafkaJavaTools, ProduceRecord
from tests.conftest import KorvetProcess
from tests.integration import clients
from tests.integration.clients import Got, Rec
from tests.integration.faults import ResponseDroppingProxy

pytestmark = [pytest.mark.clients, pytest.mark.slow]

COUNT = 10_000
PARTITIONS = 3


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    futures[topic].result(30)


def assert_round_trip(records: Sequence[Rec], told: Sequence[tuple[int, int]],
                      got: Sequence[Got]) -> None:
    assert len(got) == len(records), f"read {len(got)} records, produced {len(records)}"
    by_position = {(g.partition, g.offset): g for g in got}
    assert len(by_position) == len(got), "a (partition, offset) was read twice"
    for index, (record, (partition, offset)) in enumerate(zip(records, told, strict=True)):
        assert partition == record.partition, f"record {index} went to partition {partition}"
        read = by_position.get((partition, offset))
        assert read is not None, f"record {index} not found at {partition}/{offset}"
        assert read.key == record.key, f"record {index}: key {read.key!r}"
        assert read.value == record.value, f"record {index}: value differs"
        assert read.headers == record.headers, f"record {index}: headers {read.headers!r}"
        assert read.timestamp == record.timestamp, f"record {index}: timestamp {read.timestamp}"
    for partition in range(PARTITIONS):
        offsets = [offset for p, offset in told if p == partition]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
            f"offsets in partition {partition} are not strictly increasing")


Producer = Callable[[str, str, Sequence[Rec]], list[tuple[int, int]]]
Consumer = Callable[[str, str, int, int], list[Got]]

CLIENTS: dict[str, tuple[Producer, Consumer]] = {
    "confluent-kafka": (clients.confluent_produce, clients.confluent_consume),
    "kafka-python": (clients.kafka_python_produce, clients.kafka_python_consume),
    "aiokafka": (clients.aiokafka_produce, clients.aiokafka_consume),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_round_trip(client: str, korvet: KorvetProcess, unique_name: str) -> None:
    produce, consume = CLIENTS[client]
    create_topic(korvet.bootstrap, unique_name)
    records = clients.make_records(COUNT, PARTITIONS)
    told = produce(korvet.bootstrap, unique_name, records)
    got = consume(korvet.bootstrap, unique_name, PARTITIONS, COUNT)
    assert_round_trip(records, told, got)


def test_clients_read_each_others_records(korvet: KorvetProcess, unique_name: str) -> None:
    """What librdkafka wrote, kafka-python and aiokafka read identically."""
    create_topic(korvet.bootstrap, unique_name)
    records = clients.make_records(2_000, PARTITIONS)
    told = clients.confluent_produce(korvet.bootstrap, unique_name, records)
    for consume in (clients.kafka_python_consume, clients.aiokafka_consume):
        assert_round_trip(records, told, consume(korvet.bootstrap, unique_name, PARTITIONS, 2_000))


def test_kcat_round_trip(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name)
    records = clients.make_records(COUNT, PARTITIONS, text_only=True)
    clients.kcat_produce(korvet.bootstrap, unique_name, records)
    got = clients.kcat_consume(korvet.bootstrap, unique_name, PARTITIONS)
    assert len(got) == COUNT
    by_partition: dict[int, list[Got]] = {}
    for g in got:
        by_partition.setdefault(g.partition, []).append(g)
    kcat_headers = (("idx", b"kcat"), ("dup", b"first"), ("dup", b"second"))
    for partition, read in by_partition.items():
        expected = [r for r in records if r.partition == partition]
        assert [(g.key, g.value) for g in read] == [(r.key, r.value) for r in expected]
        assert all(g.headers == kcat_headers for g in read)
        offsets = [g.offset for g in read]
        assert offsets == sorted(set(offsets)), "kcat saw offsets out of order or twice"
    # kcat prints no delivery offsets: confluent-kafka must read the same records at the same ones.
    confluent = clients.confluent_consume(korvet.bootstrap, unique_name, PARTITIONS, COUNT)
    assert sorted((g.partition, g.offset, g.key, g.value) for g in confluent) == sorted(
        (g.partition, g.offset, g.key, g.value) for g in got)


def test_redis_cli_shows_the_records(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    records = [Rec(0, b"k1", b"hello", (("h", b"v"),), 1_700_000_000_123),
               Rec(0, None, b"no key", (), 1_700_000_000_124)]
    told = clients.confluent_produce(korvet.bootstrap, unique_name, records)
    raw = subprocess.run(["redis-cli", "-u", korvet.redis_url, "--raw", "XRANGE",
                          f"korvet:{{{unique_name}:0}}:stream", "-", "+"],
                         capture_output=True, text=True, check=True, timeout=30).stdout.split("\n")
    codec = DENSE  # dense offsets, the default of new topics: offset o is the entry o-1
    ids = [line for line in raw if line and line[0].isdigit() and "-" in line]
    assert [codec.encode_id(EntryId.parse(i)) for i in ids] == [offset for _, offset in told]
    first = raw[raw.index(ids[0]) + 1: raw.index(ids[1])]
    assert first == ["timestamp", "1700000000123", "key", "k1", "value", "hello", "header.h", "v"]
    second = raw[raw.index(ids[1]) + 1:]
    assert second[:4] == ["timestamp", "1700000000124", "value", "no key"]
    assert "key" not in second  # a null key is an absent field, not an empty one


def _java_records(count: int) -> list[ProduceRecord]:
    return [ProduceRecord(value=f"value-{i}", key=f"key-{i}",
                          headers=(("idx", str(i)), ("dup", "first"), ("dup", "second")))
            for i in range(count)]


@pytest.mark.kafka
def test_java_console_round_trip(korvet: KorvetProcess, unique_name: str, tmp_path: Path) -> None:
    create_topic(korvet.bootstrap, unique_name)
    tools = KafkaJavaTools(korvet.bootstrap, timeout=180)
    started = int(time.time() * 1000)
    produced = _java_records(COUNT)
    tools.console_produce(unique_name, produced, properties={"acks": "all"}, timeout=180)
    finished = int(time.time() * 1000)
    codec = DENSE  # dense offsets, the default of new topics: offset o is the entry o-1
    stored: dict[int, list[int]] = {}  # partition -> the offsets of its stored entries
    for partition in range(PARTITIONS):
        ids = subprocess.run(["redis-cli", "-u", korvet.redis_url, "--raw", "XRANGE",
                              f"korvet:{{{unique_name}:{partition}}}:stream", "-", "+"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        stored[partition] = [codec.encode_id(EntryId.parse(i)) for i in ids
                             if i and i[0].isdigit() and "-" in i
                             and i.replace("-", "").isdigit()]
    seen = []
    for partition in range(PARTITIONS):
        # As many records as the partition holds: the consumer stops once it has printed
        # them all instead of waiting out its idle timeout.
        result = tools.console_consume(unique_name, max_messages=len(stored[partition]),
                                       partition=partition, idle_timeout_ms=5000, timeout=180)
        seen.extend(result.records)
    assert len(seen) == COUNT
    by_key = {r.key: r for r in seen}
    for record in produced:
        read = by_key[record.key]
        assert read.value == record.value
        assert read.headers == record.headers
        assert read.timestamp_type == "CreateTime"
        assert read.timestamp is not None and started - 1000 <= read.timestamp <= finished + 1000
    # The offsets the Java consumer printed are exactly the stored entry ids.
    for partition in range(PARTITIONS):
        assert sorted(r.offset for r in seen if r.partition == partition) == stored[partition]


@pytest.mark.kafka
def test_idempotent_java_producer_with_forced_retries_stores_no_duplicates(
        tmp_path: Path, unique_name: str) -> None:
    proxy = ResponseDroppingProxy(drop_every=4, max_drops=8).start()
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--advertised-port", str(proxy.port)])
    try:
        broker.start()
        proxy.upstream_port = broker.port
        bootstrap = f"127.0.0.1:{proxy.port}"
        create_topic(bootstrap, unique_name)
        tools = KafkaJavaTools(bootstrap, timeout=300)
        produced = _java_records(3_000)
        tools.console_produce(
            unique_name, produced,
            properties={"enable.idempotence": "true", "acks": "all", "retries": "100",
                        "batch.size": "2048", "linger.ms": "5", "retry.backoff.ms": "50",
                        "max.in.flight.requests.per.connection": "5"},
            timeout=300,
        )
        assert proxy.dropped > 0, "the proxy never lost a response: no retry was forced"
        keys: Counter[str] = Counter()
        for partition in range(PARTITIONS):
            stored = subprocess.run(["redis-cli", "-u", broker.redis_url, "XLEN",
                                     f"korvet:{{{unique_name}:{partition}}}:stream"],
                                    capture_output=True, text=True, check=True)
            keys["__len__"] += int(stored.stdout.strip())
            # Every entry the partition holds (duplicates too): the consumer stops once it
            # has printed them all instead of waiting out its idle timeout.
            result = tools.console_consume(unique_name, max_messages=int(stored.stdout.strip()),
                                           partition=partition, idle_timeout_ms=20000, timeout=180)
            keys.update(r.key for r in result.records if r.key is not None)
        assert keys.pop("__len__") == len(produced), "the partitions hold duplicates or gaps"
        duplicates = [k for k, n in keys.items() if n > 1]
        assert not duplicates, f"{len(duplicates)} records stored twice, e.g. {duplicates[:3]}"
        assert set(keys) == {r.key for r in produced}
    finally:
        broker.stop()
        proxy.stop()
