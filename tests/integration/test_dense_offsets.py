"""Topics whose offsets count records (korvet.offset.scheme=dense, spec/DenseLog.tla): the
first record of a partition is offset 0 and each record takes the next, in both storage
formats, through the wire, Kafka's clients and kcat; a Redis user sees offset o at the entry
id o-1. A time topic beside them keeps its sparse offsets."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.conftest import SECOND_BROKER, KorvetProcess
from tests.integration import clients
from tests.integration.test_broker_behaviour import (
    batch,
    fetch_request,
    list_offsets,
    produce_request,
    produce_through_both,
)
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

FORMATS = ["records", "batches"]


def create_dense(bootstrap: str, topic: str, storage_format: str = "records", *,
                 partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"korvet.offset.scheme": "dense", "korvet.storage.format": storage_format,
              **(configs or {})}
    admin.create_topics([NewTopic(topic, num_partitions=partitions, config=config)])[topic].result(30)


def redis(broker: KorvetProcess, *args: str) -> str:
    out = subprocess.run(["redis-cli", "-u", broker.redis_url, *args], capture_output=True,
                         check=True).stdout
    return out.decode(errors="replace")  # a stored batch's bytes are not text


def _fetched(response: Any) -> list[tuple[int, bytes]]:
    from aiokafka.record._crecords import DefaultRecordBatch

    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, part.error_code
    data = bytes(part.records or b"")
    found: list[tuple[int, bytes]] = []
    while data:
        length = int.from_bytes(data[8:12], "big")
        record_batch = DefaultRecordBatch(data[:12 + length])
        found.extend((r.offset, r.key) for r in record_batch)
        data = data[12 + length:]
    return found


@pytest.mark.parametrize("storage_format", FORMATS)
def test_offsets_count_records_from_zero(korvet: KorvetProcess, unique_name: str,
                                         storage_format: str) -> None:
    create_dense(korvet.bootstrap, unique_name, storage_format)
    with WireClient(korvet.bootstrap) as client:
        assert list_offsets(client, unique_name, 0, -2)[0] == 0
        assert list_offsets(client, unique_name, 0, -1)[0] == 0
        bases = []
        for start in (0, 3, 10):
            count = {0: 3, 3: 7, 10: 10}[start]
            response = client.request(produce_request(unique_name, {0: batch(count, start=start)}))
            result = response.responses[0].partition_responses[0]
            assert result.error_code == ErrorCode.none
            bases.append(int(result.base_offset))
        assert bases == [0, 3, 10]
        assert list_offsets(client, unique_name, 0, -2)[0] == 0
        assert list_offsets(client, unique_name, 0, -1)[0] == 20
        whole = _fetched(client.request(fetch_request(unique_name, 0, 0)))
        assert [offset for offset, _ in whole] == list(range(20))
        assert [key for _, key in whole] == [f"k{i}".encode() for i in range(20)]
        # a fetch from inside a stored batch gets that batch, and the client skips the front
        inside = [(o, k) for o, k in _fetched(client.request(fetch_request(unique_name, 0, 5)))
                  if o >= 5]
        assert inside[0] == (5, b"k5")
    ids = redis(korvet, "XRANGE", f"korvet:{{{unique_name}:0}}:stream", "-", "+").split()
    wanted = [f"{o}-1" for o in (range(20) if storage_format == "records" else (0, 3, 10))]
    assert [i for i in ids if i in wanted] == wanted, "offset o is the entry id o-1"


def test_a_time_topic_keeps_its_offsets(korvet: KorvetProcess, unique_name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=1,
                                  config={"korvet.offset.scheme": "time"})])[unique_name].result(30)
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: batch(3)}))
    assert int(response.responses[0].partition_responses[0].base_offset) > 2**40


@pytest.mark.parametrize("storage_format", FORMATS)
def test_kcat_reads_the_last_n_records(korvet: KorvetProcess, unique_name: str,
                                       storage_format: str) -> None:
    """`kcat -o -5` counts back five records from the end: on a time topic it got one."""
    create_dense(korvet.bootstrap, unique_name, storage_format)
    with WireClient(korvet.bootstrap) as client:
        for start in range(0, 20, 4):
            client.request(produce_request(unique_name, {0: batch(4, start=start)}))
    out = subprocess.run(["kcat", "-b", korvet.bootstrap, "-t", unique_name, "-p", "0", "-C",
                          "-o", "-5", "-e", "-f", "%o %k\n"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    assert [line for line in out if line] == [f"{o} k{o}" for o in range(15, 20)]


def test_a_group_lag_is_the_unread_records(korvet: KorvetProcess, unique_name: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_dense(korvet.bootstrap, unique_name)
    records = [clients.Rec(0, f"k{i}".encode(), b"v", (), int(time.time() * 1000))
               for i in range(20)]
    told = clients.confluent_produce(korvet.bootstrap, unique_name, records)
    assert [o for _, o in told] == list(range(20))
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(unique_name, 0, 15)], asynchronous=False)
        committed = consumer.committed([TopicPartition(unique_name, 0)], timeout=10)[0].offset
        _, high = consumer.get_watermark_offsets(TopicPartition(unique_name, 0), timeout=10)
    finally:
        consumer.close()
    assert high - committed == 5


@pytest.mark.kafka
def test_kafkas_tools_count_records(korvet: KorvetProcess, unique_name: str) -> None:
    """kafka-consumer-groups --describe shows as LAG the records not yet read, and
    kafka-get-offsets answers earliest, latest and by time in record counts, as on Kafka
    (on a time topic the lag of five unread records was tens of thousands)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from korvet.jvm.java_clients import KafkaJavaTools

    create_dense(korvet.bootstrap, unique_name, "batches", partitions=2)
    start = int(time.time() * 1000) - 60_000
    records = [clients.Rec(i % 2, f"k{i}".encode(), b"v", (), start + i * 1000) for i in range(40)]
    clients.confluent_produce(korvet.bootstrap, unique_name, records)
    consumer = Consumer({"bootstrap.servers": korvet.bootstrap, "group.id": unique_name,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(unique_name, 0, 15),
                                 TopicPartition(unique_name, 1, 20)], asynchronous=False)
    finally:
        consumer.close()
    tools = KafkaJavaTools(korvet.bootstrap, timeout=120)
    rows = sorted(tools.describe_group(unique_name), key=lambda row: row.partition or 0)
    assert [(r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        (0, 15, 20, 5), (1, 20, 20, 0)]
    assert tools.get_offsets(unique_name, -2) == {0: 0, 1: 0}
    assert tools.get_offsets(unique_name, -1) == {0: 20, 1: 20}
    # Record i is at partition i % 2, offset i // 2: the first at or after record 25's time
    # is record 26 on partition 0 (offset 13) and record 25 on partition 1 (offset 12).
    assert tools.get_offsets(unique_name, start + 25_000) == {0: 13, 1: 12}
    assert tools.get_offsets(unique_name, -3) == {0: 19, 1: 19}
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    next(iter(admin.delete_records([TopicPartition(unique_name, 1, 7)]).values())).result(30)
    assert tools.get_offsets(unique_name, -2) == {0: 0, 1: 7}


@pytest.mark.parametrize("storage_format", FORMATS)
def test_delete_records_and_size_retention_move_the_log_start(
        korvet: KorvetProcess, unique_name: str, storage_format: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_dense(korvet.bootstrap, unique_name, storage_format)
    with WireClient(korvet.bootstrap) as client:
        for start in range(0, 20, 5):
            client.request(produce_request(unique_name, {0: batch(5, start=start)}))
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    deleted = admin.delete_records([TopicPartition(unique_name, 0, 12)])
    assert next(iter(deleted.values())).result(30).low_watermark == 12
    with WireClient(korvet.bootstrap) as client:
        assert list_offsets(client, unique_name, 0, -2)[0] == 12
        gone = client.request(fetch_request(unique_name, 0, 11)).responses[0].partitions[0]
        assert gone.error_code == ErrorCode.offset_out_of_range
        kept = [o for o, _ in _fetched(client.request(fetch_request(unique_name, 0, 12)))
                if o >= 12]
        assert kept == list(range(12, 20))
    limited = unique_name + "-limited"
    create_dense(korvet.bootstrap, limited, storage_format,
                 configs={"korvet.retention.records": "5"})
    with WireClient(korvet.bootstrap) as client:
        for start in range(0, 20, 5):
            client.request(produce_request(limited, {0: batch(5, start=start)}))
        assert list_offsets(client, limited, 0, -2)[0] == 15
        assert list_offsets(client, limited, 0, -1)[0] == 20


def test_list_offsets_by_time_finds_the_first_record_at_or_after(
        korvet: KorvetProcess, unique_name: str) -> None:
    create_dense(korvet.bootstrap, unique_name)
    base = int(time.time() * 1000) - 60_000
    with WireClient(korvet.bootstrap) as client:
        for i, stamp in enumerate((base, base + 10, base + 5, base + 20)):
            client.request(produce_request(unique_name, {0: batch(1, start=i, timestamp=stamp)}))
        assert list_offsets(client, unique_name, 0, base + 6) == (1, base + 10)
        assert list_offsets(client, unique_name, 0, base + 11) == (3, base + 20)
        assert list_offsets(client, unique_name, 0, base + 21) == (-1, -1)
        assert list_offsets(client, unique_name, 0, -3) == (3, base + 20)


def test_two_brokers_append_gap_free_and_without_duplicates(
        multi_korvet: KorvetProcess, tmp_path: Path, unique_name: str) -> None:
    korvet = multi_korvet  # both brokers with --multi-broker
    second = KorvetProcess(tmp_path / "second",
                           extra_args=["--redis-url", korvet.redis_url, *SECOND_BROKER])
    second.start()
    try:
        create_dense(korvet.bootstrap, unique_name)
        results = produce_through_both(korvet, second, unique_name)
        offsets = sorted(o for told in results.values() for _, o in told)
        assert offsets == list(range(4000)), "the two brokers' offsets are not 0..3999"
    finally:
        second.stop()


def test_the_scheme_is_fixed_when_the_topic_is_created(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    create_dense(korvet.bootstrap, unique_name)
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, unique_name, incremental_configs=[
        ConfigEntry("korvet.offset.scheme", "time",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match=r"korvet\.offset\.scheme cannot change"):
        admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, unique_name)])
    entries = next(iter(described.values())).result(30)
    assert entries["korvet.offset.scheme"].value == "dense"


@pytest.mark.parametrize("storage_format", FORMATS)
def test_list_offsets_by_time_searches_the_time_index(korvet: KorvetProcess, unique_name: str,
                                                      storage_format: str) -> None:
    """With a checkpoint after every batch (index.interval.bytes=1) the search goes through
    the time index: for every time, the answer is the first record at or after the log start
    whose timestamp is at or after it (Kafka's), timestamps out of order included, before and
    after DeleteRecords moved the log start past some checkpoints."""
    import random

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_dense(korvet.bootstrap, unique_name, storage_format,
                 configs={"index.interval.bytes": "1"})
    rng = random.Random(31)
    base = int(time.time() * 1000) - 600_000
    stamps: list[int] = []
    with WireClient(korvet.bootstrap) as client:
        for _ in range(30):
            count = rng.randint(1, 3)
            batch_stamps = [base + rng.randint(0, 300) * 10 for _ in range(count)]
            for i, stamp in enumerate(batch_stamps):
                client.request(produce_request(unique_name, {0: batch(
                    1, start=len(stamps) + i, timestamp=stamp)}))
            stamps.extend(batch_stamps)
    checkpoints = int(redis(korvet, "XLEN", f"korvet:{{{unique_name}:0}}:times"))
    assert checkpoints == len(stamps), "a checkpoint after every append"

    def expected(at: int, start: int) -> tuple[int, int]:
        for offset in range(start, len(stamps)):
            if stamps[offset] >= at:
                return offset, stamps[offset]
        return -1, -1

    probes = sorted({base - 1, base + 3000, *(s + d for s in stamps[::3] for d in (-5, 0, 5))})
    with WireClient(korvet.bootstrap) as client:
        for at in probes:
            assert list_offsets(client, unique_name, 0, at) == expected(at, 0), at
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    next(iter(admin.delete_records([TopicPartition(unique_name, 0, 40)]).values())).result(30)
    assert int(redis(korvet, "XLEN", f"korvet:{{{unique_name}:0}}:times")) < checkpoints
    with WireClient(korvet.bootstrap) as client:
        for at in probes:
            assert list_offsets(client, unique_name, 0, at) == expected(at, 40), at


@pytest.mark.parametrize("storage_format", FORMATS)
def test_time_retention_removes_records_older_than_retention(
        korvet: KorvetProcess, unique_name: str, storage_format: str) -> None:
    """retention.ms on a dense topic: the records below the last checkpoint older than the
    cutoff go (Kafka's rule: by the records' timestamps, whole stretches); a consumer at the
    old high watermark stays in range."""
    create_dense(korvet.bootstrap, unique_name, storage_format,
                 configs={"retention.ms": "1000", "index.interval.bytes": "1"})
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(5)}))
        caught_up = list_offsets(client, unique_name, 0, -1)[0]
        assert caught_up == 5
        time.sleep(1.5)
        client.request(produce_request(unique_name, {0: batch(2, start=100)}))
        assert list_offsets(client, unique_name, 0, -2)[0] == 5
        response = client.request(fetch_request(unique_name, 0, caught_up))
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    assert part.log_start_offset == 5
    assert part.records
    stream = redis(korvet, "XRANGE", f"korvet:{{{unique_name}:0}}:stream", "-", "+")
    assert "0-1" not in stream.split() and "5-1" in stream.split()
