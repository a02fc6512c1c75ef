"""The admin tools operators run, against Korvet: Kafka 4.3.1's own kafka-delete-records,
kafka-log-dirs, kafka-topics --describe and kafka-transactions describe-producers (from
the pinned jars), checked against what Redis then holds and what clients then read.

One broker for the module, logging every request (DEBUG), so a test can also say which
API a tool called (Kafka 4's kafka-topics --describe asks DescribeTopicPartitions).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.jvm.java_clients import KafkaJavaTools
from korvet.protocol.kbuild import make, nested
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import fetch_request, list_offsets, xlen
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = [pytest.mark.clients, pytest.mark.kafka, pytest.mark.slow]

RECORDS = 100
EARLIEST, LATEST = -2, -1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    process = KorvetProcess(tmp_path_factory.mktemp("admin-tools"),
                            extra_args=["--log-level", "DEBUG", "--redis-appendfsync", "off"])
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def tools(broker: KorvetProcess) -> KafkaJavaTools:
    return KafkaJavaTools(broker.bootstrap, timeout=120)


def produce(broker: KorvetProcess, topic: str, partitions: int) -> dict[int, list[int]]:
    """RECORDS records to each partition with an idempotent producer; their offsets."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def delivered(err: object, message: object) -> None:
        assert err is None, err
        offsets[message.partition()].append(message.offset())  # type: ignore[attr-defined]

    for i in range(RECORDS * partitions):
        producer.produce(topic, value=b"record %d" % i, partition=i % partitions,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    return {p: sorted(found) for p, found in offsets.items()}


def run(tools: KafkaJavaTools, main: str, *args: str) -> str:
    return tools.run(f"org.apache.kafka.tools.{main}",
                     ["--bootstrap-server", tools.bootstrap, *args]).stdout


def apis_called_since(broker: KorvetProcess, mark: int) -> list[str]:
    assert broker.log_path is not None
    text = broker.log_path.read_text(errors="replace")[mark:]
    return re.findall(r"korvet\.listener: \S+ (\w+) v\d+ correlation", text)


def log_size(broker: KorvetProcess) -> int:
    assert broker.log_path is not None
    return len(broker.log_path.read_text(errors="replace"))


def values_from(broker: KorvetProcess, topic: str, partition: int,
                expected: int) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, partition, EARLIEST)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
        time.sleep(0.5)
        values.extend(m.value() for m in consumer.consume(100, 0.5) if m.error() is None)
        return values
    finally:
        consumer.close()


def test_kafka_delete_records_removes_records_and_every_api_agrees(
        broker: KorvetProcess, tools: KafkaJavaTools, unique_name: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, unique_name, 2)
    offsets = produce(broker, unique_name, 2)
    with WireClient(broker.bootstrap) as client:
        high_watermark_1 = list_offsets(client, unique_name, 1, LATEST)[0]
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": unique_name, "partition": 0, "offset": offsets[0][40]},
        {"topic": unique_name, "partition": 1, "offset": -1}]}))
    out = run(tools, "DeleteRecordsCommand", "--offset-json-file", str(plan))
    low = {int(p): int(w) for p, w in re.findall(
        rf"partition: {re.escape(unique_name)}-(\d+)\s+low_watermark: (\d+)", out)}
    assert low == {0: offsets[0][40], 1: high_watermark_1}, out
    # The records below the new log start are gone from Redis.
    assert xlen(broker, unique_name, 0) == RECORDS - 40
    assert xlen(broker, unique_name, 1) == 0
    with WireClient(broker.bootstrap) as client:
        assert list_offsets(client, unique_name, 0, EARLIEST)[0] == offsets[0][40]
        assert list_offsets(client, unique_name, 1, EARLIEST)[0] == high_watermark_1
        below = client.request(fetch_request(unique_name, 0, offsets[0][39]))
        part = below.responses[0].partitions[0]
        assert part.error_code == ErrorCode.offset_out_of_range
        assert part.log_start_offset == offsets[0][40]
    # A consumer from the earliest offset reads exactly what is left.
    assert values_from(broker, unique_name, 0, RECORDS - 40) == [
        b"record %d" % (2 * i) for i in range(40, RECORDS)]
    assert values_from(broker, unique_name, 1, 0) == []
    # Appends go on after the new log start.
    more = produce(broker, unique_name, 2)
    assert more[1][0] >= high_watermark_1
    assert len(values_from(broker, unique_name, 1, RECORDS)) == RECORDS


def delete_records(client: WireClient, topic: str,
                   entries: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    cls = load_request_schema(21, 2)
    request = make(cls, timeout=30_000, topics=(make(
        nested(cls, "DeleteRecordsTopic"), name=topic, partitions=tuple(
            make(nested(cls, "DeleteRecordsPartition"), partition_index=p, offset=o)
            for p, o in entries)),))
    response = client.request(request)
    return [(p.partition_index, p.error_code.value, p.low_watermark)
            for p in response.topics[0].partitions]


def test_delete_records_errors_are_kafkas(broker: KorvetProcess, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, 1)
    offsets = produce(broker, unique_name, 1)[0]
    with WireClient(broker.bootstrap) as client:
        end = list_offsets(client, unique_name, 0, LATEST)[0]
        assert delete_records(client, unique_name, [(0, end + 1)]) == [
            (0, ErrorCode.offset_out_of_range.value, -1)]
        assert delete_records(client, unique_name, [(0, -2)]) == [
            (0, ErrorCode.offset_out_of_range.value, -1)]
        assert delete_records(client, unique_name, [(5, 0)]) == [
            (5, ErrorCode.unknown_topic_or_partition.value, -1)]
        # below the log start: nothing moves, the answer is the log start
        start = list_offsets(client, unique_name, 0, EARLIEST)[0]
        assert delete_records(client, unique_name, [(0, 0)]) == [(0, 0, start)]
        assert delete_records(client, unique_name, [(0, offsets[10])]) == [(0, 0, offsets[10])]
        assert delete_records(client, unique_name, [(0, offsets[5])]) == [(0, 0, offsets[10])]
        assert xlen(broker, unique_name, 0) == RECORDS - 10


def test_kafka_log_dirs_reports_each_partitions_size_from_redis(
        broker: KorvetProcess, tools: KafkaJavaTools, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(500):
        producer.produce(unique_name, value=b"x" * 1000, partition=0, key=b"%d" % i)
    assert producer.flush(30) == 0
    out = run(tools, "LogDirsCommand", "--describe", "--topic-list", unique_name)
    report = json.loads(out.strip().splitlines()[-1])
    (entry,) = report["brokers"]
    assert entry["broker"] == 0
    (log_dir,) = entry["logDirs"]
    assert log_dir["error"] is None
    assert log_dir["logDir"].startswith("redis://127.0.0.1:")
    assert log_dir["logDir"].endswith("?keyspace=korvet")
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{unique_name}-0", f"{unique_name}-1"}
    # 500 KB of values: Redis' estimate of the stream is of that order; an empty one is 0.
    assert 400_000 < sizes[f"{unique_name}-0"] < 2_000_000
    assert sizes[f"{unique_name}-1"] == 0
    redis_says = subprocess.run(["redis-cli", "-u", broker.redis_url, "MEMORY", "USAGE",
                                 f"korvet:{{{unique_name}:0}}:stream"],
                                capture_output=True, text=True, check=True).stdout
    assert int(redis_says) == sizes[f"{unique_name}-0"]


def test_kafka_topics_describe_goes_through_describe_topic_partitions(
        broker: KorvetProcess, tools: KafkaJavaTools, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, 5)
    mark = log_size(broker)
    out = run(tools, "TopicCommand", "--describe", "--topic", unique_name,
              "--partition-size-limit-per-response", "2")
    assert "DescribeTopicPartitions" in apis_called_since(broker, mark)
    header = [line for line in out.splitlines() if line.startswith(f"Topic: {unique_name}\t")]
    assert len(header) == 1 and "PartitionCount: 5" in header[0] and "ReplicationFactor: 1" in header[0]
    rows = re.findall(rf"Topic: {re.escape(unique_name)}\tPartition: (\d+)\tLeader: 0\tReplicas: 0\tIsr: 0",
                      out)
    assert sorted(int(p) for p in rows) == [0, 1, 2, 3, 4], out


def test_kafka_transactions_describe_producers_shows_the_idempotent_producer(
        broker: KorvetProcess, tools: KafkaJavaTools, unique_name: str) -> None:
    create_topic(broker.bootstrap, unique_name, 1)
    produce(broker, unique_name, 1)
    out = run(tools, "TransactionsCommand", "describe-producers", "--topic", unique_name,
              "--partition", "0")
    rows = [line.split() for line in out.strip().splitlines()[1:]]
    assert len(rows) == 1, out
    producer_id, epoch, coordinator_epoch, last_sequence, last_timestamp, txn_start = rows[0]
    assert int(producer_id) > 0 and epoch == "0" and coordinator_epoch == "-1"
    assert last_sequence == str(RECORDS - 1)
    assert abs(int(last_timestamp) - time.time() * 1000) < 120_000
    assert txn_start == "None"


def test_leader_election_reassignment_and_transaction_listings_answer_as_kafka(
        broker: KorvetProcess, tools: KafkaJavaTools, unique_name: str) -> None:
    """The routine checks of an operator, answered as Apache Kafka 4.3.1 answers them on one
    node (outputs observed with the same tools against it): every partition already has its
    one replica as leader, nothing is being reassigned, no transaction exists."""
    create_topic(broker.bootstrap, unique_name, 2)

    def elect(*args: str) -> subprocess.CompletedProcess[str]:
        return tools.run("org.apache.kafka.tools.LeaderElectionCommand",
                         ["--bootstrap-server", tools.bootstrap, *args], check=False)

    for kind in ("preferred", "unclean"):
        done = elect("--election-type", kind, "--topic", unique_name, "--partition", "1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"Valid replica already elected for partitions {unique_name}-1"
    every = elect("--election-type", "preferred", "--all-topic-partitions")
    assert (every.returncode, every.stdout.strip()) == (0, ""), every.stderr
    for topic, partition, says in ((unique_name + "-none", "0", "No such topic as"),
                                   (unique_name, "7", "No such partition as")):
        failed = elect("--election-type", "preferred", "--topic", topic, "--partition", partition)
        assert failed.returncode == 1
        assert (f"Error completing leader election (PREFERRED) for partition: {topic}-{partition}: "
                "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                f"{says} {topic}") in failed.stdout, failed.stdout
    listed = tools.run("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                       ["--bootstrap-server", tools.bootstrap, "--list"])
    assert listed.stdout.strip() == "No partition reassignments found."
    transactions = run(tools, "TransactionsCommand", "list")
    assert transactions.strip().split() == ["TransactionalId", "Coordinator", "ProducerId",
                                            "TransactionState"]
