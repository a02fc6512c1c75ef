"""Apache Kafka 4.3.1, its Java tools and Spark's Kafka connector, all from the pinned jars.

One Kafka (KRaft, single node, free loopback ports) serves the whole module. Records
go in through one client and come out through another, so each test checks that a
tool a user would run (console producer, kafka-consumer-groups, the perf tools) really
sees the broker's data. Spark's connector reading what the console producer wrote runs in
tests/integration/test_spark_pipeline.py, on that module's SparkSession (a second session
here would cost a JVM start). A missing Java or jar is an error here, never a skip: the
set-up (`korvet jars fetch`) must provide them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from korvet.jvm import maven
from korvet.jvm.java_clients import ConsoleRecord, KafkaJavaTools, ProduceRecord
from korvet.jvm.kafka_server import KafkaServer
from tests.support.console_records import CONSOLE_PRODUCER_PROPERTIES, CONSOLE_RECORDS, console_records

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOPIC = "jvm-tools-keyed"
RECORDS = CONSOLE_RECORDS


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    # No initial rebalance delay: the group tests would otherwise wait 3 s per join.
    server = KafkaServer(tmp_path_factory.mktemp("kafka"), group_initial_rebalance_delay_ms=0)
    with server:
        print(f"\nApache Kafka on {server.bootstrap}: storage format {server.format_seconds:.1f} s, "
              f"start until serving {server.startup_seconds:.1f} s", file=sys.stderr)
        yield server
    assert not server.running


@pytest.fixture(scope="module")
def tools(kafka: KafkaServer) -> KafkaJavaTools:
    return KafkaJavaTools(kafka.bootstrap, timeout=120)


@pytest.fixture(scope="module")
def produced(tools: KafkaJavaTools) -> list[ProduceRecord]:
    """1,000 keyed records with headers, sent by the Java console producer (idempotent, acks=all)."""
    records = console_records()
    tools.console_produce(TOPIC, records, properties=CONSOLE_PRODUCER_PROPERTIES)
    return records


def consume_all(bootstrap: str, topic: str, count: int, *, timeout: float = 60.0) -> list[Any]:
    """Read ``count`` records of partition 0 from the start with confluent-kafka (no group)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "unused-assign-only",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    })
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(messages) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=1.0):
                assert message.error() is None, message.error()
                messages.append(message)
        return messages
    finally:
        consumer.close()


def test_kafka_runs_on_a_free_loopback_port_and_lists_itself(kafka: KafkaServer) -> None:
    host, port = kafka.bootstrap.split(":")
    assert host == "127.0.0.1"
    assert int(port) != 9092
    assert kafka.running
    assert kafka.startup_seconds is not None
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    metadata = admin.list_topics(timeout=10)
    brokers = {(str(b.host), int(b.port)) for b in metadata.brokers.values()}
    assert brokers == {("127.0.0.1", int(port))}
    assert metadata.cluster_id == kafka.cluster_id
    config = kafka.config_path.read_text()
    assert f"log.dirs={kafka.data_dir}" in config
    assert "process.roles=broker,controller" in config


def test_console_producer_records_read_back_by_confluent_kafka(
    kafka: KafkaServer, produced: list[ProduceRecord]
) -> None:
    messages = consume_all(kafka.bootstrap, TOPIC, RECORDS)
    assert len(messages) == RECORDS
    assert [m.offset() for m in messages] == list(range(RECORDS))
    assert {m.partition() for m in messages} == {0}
    for message, sent in zip(messages, produced, strict=True):
        assert message.key() == (sent.key or "").encode()
        assert message.value() == (sent.value or "").encode()
        assert message.headers() == [(name, (value or "").encode()) for name, value in sent.headers]


def test_console_consumer_prints_what_confluent_kafka_produced(
    kafka: KafkaServer, tools: KafkaJavaTools
) -> None:
    topic = "jvm-tools-from-librdkafka"
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    producer.produce(topic, key=b"k0", value="plain é".encode(), headers=[("h", b"x,y")])
    producer.produce(topic, key=None, value=None, headers=[("a", b"1"), ("nul", None)])
    producer.produce(topic, key=b"k2", value=b"tab\tand, comma", timestamp=1_700_000_000_123)
    assert producer.flush(30) == 0

    result = tools.console_consume(topic, max_messages=3, group="jvm-tools-console")
    records = result.records
    assert [(r.partition, r.offset) for r in records] == [(0, 0), (0, 1), (0, 2)]
    assert records[0] == ConsoleRecord("CreateTime", records[0].timestamp, 0, 0,
                                       (("h", "x,y"),), "k0", "plain é")
    assert (records[1].key, records[1].value, records[1].headers) == (None, None, (("a", "1"), ("nul", None)))
    assert (records[2].key, records[2].value, records[2].headers) == ("k2", "tab\tand, comma", ())
    assert records[2].timestamp == 1_700_000_000_123
    assert "jvm-tools-console" in tools.list_groups()


def test_consumer_groups_describe_shows_zero_lag_after_a_commit(
    kafka: KafkaServer, tools: KafkaJavaTools, produced: list[ProduceRecord]
) -> None:
    group = "jvm-tools-lag"
    consumer = Consumer({
        "bootstrap.servers": kafka.bootstrap,
        "group.id": group,
        "client.id": "lag-checker",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < len(produced) and time.monotonic() < deadline:
            seen += len([m for m in consumer.consume(num_messages=500, timeout=1.0) if m.error() is None])
        assert seen == len(produced)
        consumer.commit(asynchronous=False)

        rows = tools.describe_group(group)
        assert len(rows) == 1
        row = rows[0]
        assert (row.group, row.topic, row.partition) == (group, TOPIC, 0)
        assert (row.current_offset, row.log_end_offset, row.lag) == (RECORDS, RECORDS, 0)
        # The consumer is still in the group, so the tool names it.
        assert row.client_id == "lag-checker"
        assert row.consumer_id is not None and row.consumer_id.startswith("lag-checker")
        assert row.host is not None and "127.0.0.1" in row.host
    finally:
        consumer.close()
    assert group in tools.list_groups()


def test_producer_performance_reports_a_throughput(tools: KafkaJavaTools) -> None:
    produced = tools.producer_performance(
        "jvm-tools-perf", num_records=3000, record_size=100, properties={"acks": "all"}
    )
    assert produced.records == 3000
    assert produced.records_per_sec > 0
    assert produced.max_latency_ms >= produced.avg_latency_ms > 0
    assert produced.p50_ms <= produced.p99_ms

    consumed = tools.consumer_performance("jvm-tools-perf", num_records=3000)
    assert consumed.records == 3000
    assert consumed.mb_consumed == pytest.approx(3000 * 100 / 1024 / 1024, rel=0.01)
    assert consumed.records_per_sec > 0


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def artifact_of_jar_name(file_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the artifactId, dropping the version)."""
    stem = file_name.removesuffix(".jar")
    parts = stem.split("-")
    for cut in range(1, len(parts)):
        if parts[cut][:1].isdigit():
            return "-".join(parts[:cut])
    return stem


@pytest.mark.spark
def test_spark_set_adds_only_what_pyspark_lacks() -> None:
    import pyspark

    shipped = {artifact_of_jar_name(p.name) for p in pyspark_jars_dir().glob("*.jar")}
    assert "spark-core_2.13" in shipped  # the folder is where we think it is
    ours = {a.artifact: a for a in maven.read_lock("spark")}
    assert not set(ours) & shipped, "a spark-set jar duplicates one in pyspark/jars"
    assert ours["spark-sql-kafka-0-10_2.13"].version == pyspark.__version__
    assert {"kafka-clients", "commons-pool2", "spark-token-provider-kafka-0-10_2.13"} <= set(ours)
