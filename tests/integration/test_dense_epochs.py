"""A dense topic's partition epochs (spec/DenseLog.tla, KIP-320): each Redis life starts a new
epoch at the first write to it; Metadata, Fetch, ListOffsets and OffsetForLeaderEpoch speak
it as Kafka's leader epoch; and a consumer that read records Redis then lost goes back to
where the logs diverge and reads the records written since, instead of skipping them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.process import free_port
from korvet.protocol.kbuild import make, nested
from korvet.server.embedded_redis import EmbeddedRedis
from tests.conftest import KorvetProcess
from tests.integration.test_admin_tools import delete_records
from tests.integration.test_broker_behaviour import batch, fetch_request, produce_request
from tests.integration.test_dense_offsets import create_dense
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients


def _metadata_epoch(client: WireClient, topic: str) -> int:
    cls = load_request_schema(3, 9)
    response = client.request(make(cls, topics=(make(nested(cls, "MetadataRequestTopic"),
                                                      name=topic),),
                                   allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False,
                                   include_cluster_authorized_operations=False))
    return int(response.topics[0].partitions[0].leader_epoch)


def _fetch(client: WireClient, topic: str, offset: int, epoch: int) -> Any:
    return client.request(fetch_request(topic, 0, offset, current_leader_epoch=epoch))


def _end_offset(client: WireClient, topic: str, epoch: int, current: int = -1) -> tuple[int, int]:
    cls = load_request_schema(23, 4)
    part = make(nested(cls, "OffsetForLeaderPartition"), partition=0,
                current_leader_epoch=current, leader_epoch=epoch)
    result = client.request(make(cls, replica_id=-1, topics=(
        make(nested(cls, "OffsetForLeaderTopic"), topic=topic, partitions=(part,)),)))
    answer = result.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none, answer.error_code
    return int(answer.leader_epoch), int(answer.end_offset)


def test_the_epoch_is_kafkas_leader_epoch_on_the_wire(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    from aiokafka.record._crecords import DefaultRecordBatch

    create_dense(korvet.bootstrap, unique_name)
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(3)}))
        epoch = _metadata_epoch(client, unique_name)
        # seconds since 2024 when the partition was first written (docs/spec/dense-offsets.md)
        assert epoch > 90_000_000
        stored = redis.Redis.from_url(korvet.redis_url).hget(
            f"korvet:{{{unique_name}:0}}:partition", "epochs")
        assert stored == f"{epoch}:0".encode()
        answered = _fetch(client, unique_name, 0, epoch).responses[0].partitions[0]
        assert answered.error_code == ErrorCode.none
        data = bytes(answered.records)
        assert len(list(DefaultRecordBatch(data))) == 3
        assert int.from_bytes(data[12:16], "big") == epoch  # the batch's partitionLeaderEpoch
        stale = _fetch(client, unique_name, 0, epoch - 1).responses[0].partitions[0]
        assert stale.error_code == ErrorCode.fenced_leader_epoch
        newer = _fetch(client, unique_name, 0, epoch + 1).responses[0].partitions[0]
        assert newer.error_code == ErrorCode.unknown_leader_epoch
        assert _end_offset(client, unique_name, epoch) == (epoch, 3)
        # older than the first (Kafka: the epoch asked, ending where the first begins)
        assert _end_offset(client, unique_name, epoch - 1) == (epoch - 1, 0)
        assert _end_offset(client, unique_name, epoch + 1) == (-1, -1)  # newer: none
        # the log start past the older epoch's end: Kafka's trimmed cache ends it there
        assert delete_records(client, unique_name, [(0, 2)]) == [(0, 0, 2)]
        assert _end_offset(client, unique_name, epoch - 1) == (epoch - 1, 2)
        assert _end_offset(client, unique_name, epoch) == (epoch, 3)


def test_a_fetch_naming_its_last_epoch_is_told_where_the_logs_diverge(
        korvet: KorvetProcess, unique_name: str) -> None:
    """Fetch v12's last_fetched_epoch (a follower's, or any fetcher's that keeps it): the
    partition answers where the fetcher's log and its own part, as Kafka's leader does
    (diverging_epoch: the epoch and its end offset; no records, at once even on a long
    poll), reads on when they agree, and refuses an epoch it never had."""
    create_dense(korvet.bootstrap, unique_name)
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(3)}))
        epoch = _metadata_epoch(client, unique_name)

        def fetch(offset: int, last: int) -> Any:
            started = time.monotonic()
            answered = client.request(fetch_request(
                unique_name, 0, offset, current_leader_epoch=epoch, last_fetched_epoch=last,
                max_wait_ms=5000)).responses[0].partitions[0]
            return answered, time.monotonic() - started

        agreed, _ = fetch(1, epoch)  # read up to 0 in this epoch: it reads on
        assert agreed.error_code == ErrorCode.none and len(bytes(agreed.records)) > 0
        assert (agreed.diverging_epoch.epoch, agreed.diverging_epoch.end_offset) == (-1, -1)
        past, waited = fetch(5, epoch)  # past the end of its own epoch: the end is 3
        assert past.error_code == ErrorCode.none and not past.records
        assert (past.diverging_epoch.epoch, past.diverging_epoch.end_offset) == (epoch, 3)
        assert int(past.high_watermark) == 3 and waited < 4, "a divergence waits for nothing"
        # an epoch older than the partition's first (a log before a lost history): it ended
        # where the first begins, 0
        older, _ = fetch(2, epoch - 5)
        assert (older.diverging_epoch.epoch, older.diverging_epoch.end_offset) == (epoch - 5, 0)
        never, _ = fetch(2, epoch + 1)  # newer than the partition's: no end to give
        assert never.error_code == ErrorCode.offset_out_of_range


def test_a_consumer_waiting_at_the_end_of_an_empty_partition_reads_its_first_records(
        korvet: KorvetProcess, unique_name: str) -> None:
    """A consumer that subscribes before anything is produced (auto.offset.reset=latest, the
    default) is positioned at offset 0 with epoch 0, the epoch Metadata and ListOffsets give
    a partition never written. The first write starts the partition's real epoch (seconds
    since 2024): the consumer is fenced, validates its position with epoch 0 and must be
    told it stands (OffsetForLeaderEpoch answers (0, 0), as Kafka's leader epoch cache does
    for an epoch older than its first), then read every record from offset 0. Answered
    (-1, -1) instead, librdkafka logged "Partition log truncation detected", reset to
    latest and skipped the first ten records."""
    from confluent_kafka import Consumer, Producer

    create_dense(korvet.bootstrap, unique_name)
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "auto.offset.reset": "latest",
                         "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.subscribe([unique_name])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "no partition assigned within 60 s"
        settled = time.monotonic() + 3  # it asks for the end offset and fetches there
        while time.monotonic() < settled:
            assert consumer.poll(0.2) is None
        producer = Producer({"bootstrap.servers": korvet.bootstrap})
        for i in range(10):
            producer.produce(unique_name, value=f"first-{i}".encode())
        assert producer.flush(30) == 0
        read = _values(consumer, 10, timeout=30)
        assert [(o, v) for o, v in read] == [(i, f"first-{i}".encode()) for i in range(10)], (
            "the consumer skipped the first records written to the partition")
    finally:
        consumer.close()


def _values(consumer: Any, want: int, timeout: float = 60) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=100, timeout=0.5):
            if msg.error():
                continue  # librdkafka reports the truncation it handles as an event
            got.append((msg.offset(), msg.value()))
    return got


def test_a_consumer_past_a_cut_goes_back_and_reads_what_was_written_since(tmp_path: Path) -> None:
    """Redis loses its last ten records (they are cut from the partition and Redis restarts,
    as a restart that lost its unfsynced writes leaves it); new records take offsets 10 on. A
    consumer that had read up to offset 19 is fenced by the new epoch, asks where its epoch
    ended (offset 10) and reads the new records from there: none of them is skipped."""
    from confluent_kafka import Consumer, TopicPartition

    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always", port=free_port())
    url = server.start()
    broker = KorvetProcess(tmp_path / "broker", extra_args=["--redis-url", url])
    broker.start()
    consumer = None
    try:
        topic = "cut-tail"
        create_dense(broker.bootstrap, topic)
        keys = [f"korvet:{{{topic}:0}}:{part}" for part in ("stream", "partition", "times")]
        with WireClient(broker.bootstrap) as client:
            for i in range(10):
                client.request(produce_request(topic, {0: _valued(f"old-{i}")}))
        direct = redis.Redis.from_url(url)
        kept = {key: dumped for key in keys if (dumped := direct.dump(key)) is not None}
        with WireClient(broker.bootstrap) as client:
            for i in range(10, 20):
                client.request(produce_request(topic, {0: _valued(f"old-{i}")}))
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cut-tail",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = _values(consumer, 20)
        assert [o for o, _ in read] == list(range(20))
        # It fetches nothing while Redis is cut and restarted (a fetch then would find its
        # position past the end: OFFSET_OUT_OF_RANGE, and a reset by its policy), so that its
        # next fetch meets the new epoch.
        consumer.pause([TopicPartition(topic, 0)])

        # the cut: the partition as it was after ten records, in a Redis that restarted
        for key in keys:
            direct.delete(key)
        for key, dumped in kept.items():
            direct.restore(key, 0, dumped)
        direct.close()
        server.stop()
        server.start()
        with WireClient(broker.bootstrap) as client:
            bases = []
            for i in range(15):
                response = _retry(client, produce_request(topic, {0: _valued(f"new-{i}")}))
                bases.append(int(response.responses[0].partition_responses[0].base_offset))
        assert bases == list(range(10, 25)), "new records take the lost records' offsets"
        consumer.resume([TopicPartition(topic, 0)])

        fresh = _values(consumer, 15)
        assert [v for _, v in fresh] == [f"new-{i}".encode() for i in range(15)], (
            "the consumer skipped records written after the cut")
        assert [o for o, _ in fresh] == list(range(10, 25))
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()
        server.stop()


def _valued(value: str) -> bytes:
    from korvet.protocol.records import Record, build_batch

    return build_batch([Record(int(time.time() * 1000), None, value.encode(), [])])


def _retry(client: WireClient, request: Any, seconds: float = 30) -> Any:
    """A produce retried while the broker meets the restarted Redis (retriable errors)."""
    deadline = time.monotonic() + seconds
    while True:
        response = client.request(request)
        code = response.responses[0].partition_responses[0].error_code
        if code == ErrorCode.none or time.monotonic() > deadline:
            assert code == ErrorCode.none, code
            return response
        time.sleep(0.2)
