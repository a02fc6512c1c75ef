"""Spark Structured Streaming on Korvet, through Spark's own Kafka connector.

The shipped pipeline (korvet.pipelines.windowed_aggregates) runs against a real
Korvet broker (the session's ``korvet`` fixture, embedded Redis) in one local[2]
SparkSession shared by the module. Events are JSON records produced by
confluent-kafka with known per-window aggregates; each test compares what a user
would look at -- the Parquet output, the records on the sink topic, the rows of a
batch read -- exactly with what the events imply.

New topics have dense offsets (0, 1, 2, ... per partition, the default); every offset used
here still comes from the producer's delivery reports, never from counting, so the tests
hold for a `time` topic too, except the one that counts on rate limits.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from korvet.jvm.java_clients import KafkaJavaTools, ProduceRecord
from korvet.jvm.kafka_server import KafkaServer
from korvet.pipelines import spark_session
from korvet.pipelines.windowed_aggregates import (
    BatchProgress,
    PipelineConfig,
    PipelineRun,
    Trigger,
    TriggerKind,
    run,
    start,
)
from tests.conftest import KORVET, KorvetProcess
from tests.support.console_records import CONSOLE_PRODUCER_PROPERTIES, console_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WINDOW_MS = 10_000
WATERMARK_MS = 30_000
KEYS = ("sensor-a", "sensor-b", "sensor-c")
# Event time (inside the JSON), far from the wall clock: the pipeline must not care.
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PARTITIONS = 2


# -- events and what they imply ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    key: str
    amount: int
    event_time_ms: int

    def value(self) -> bytes:
        stamp = datetime.fromtimestamp(self.event_time_ms / 1000, UTC)
        text = stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.event_time_ms % 1000:03d}Z"
        return json.dumps({"event_id": self.event_id, "key": self.key, "amount": self.amount,
                           "event_time": text}).encode()


def wave(name: str, first_ms: int, span_ms: int, count: int, seed: int) -> list[Event]:
    """``count`` events at random times in [EPOCH + first_ms, + span_ms), in random order."""
    rng = random.Random(seed)
    return [
        Event(f"{name}-{i}", rng.choice(KEYS), rng.randrange(-50, 1000),
              EPOCH_MS + first_ms + rng.randrange(span_ms))
        for i in range(count)
    ]


def clock(name: str, at_ms: int) -> Event:
    """An event whose only purpose is to move the watermark past the earlier windows."""
    return Event(f"{name}-clock", KEYS[0], 1, EPOCH_MS + at_ms)


Window = tuple[int, str]  # (window start ms, key)


@dataclass(frozen=True, slots=True)
class Aggregate:
    events: int
    amount_sum: int
    amount_min: int
    amount_max: int


def final_windows(events: list[Event]) -> dict[Window, Aggregate]:
    """The windows Spark must have written: those that end at or before the watermark."""
    watermark = max(e.event_time_ms for e in events) - WATERMARK_MS
    grouped: dict[Window, list[int]] = {}
    for e in events:
        start_ms = e.event_time_ms - e.event_time_ms % WINDOW_MS
        grouped.setdefault((start_ms, e.key), []).append(e.amount)
    return {
        window: Aggregate(len(amounts), sum(amounts), min(amounts), max(amounts))
        for window, amounts in grouped.items()
        if window[0] + WINDOW_MS <= watermark
    }


# -- broker helpers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivered:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


def as_delivered(message: Any) -> Delivered:
    partition, offset, value = message.partition(), message.offset(), message.value()
    assert partition is not None and offset is not None and value is not None
    return Delivered(partition, offset, message.timestamp()[1], message.key(), value)


def create_topics(bootstrap: str, *names: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1)
                                   for n in names])
    for future in futures.values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes, int | None]]
            ) -> list[Delivered]:
    """Send (partition, key, value, timestamp or None) records; return the delivery reports."""
    delivered: list[Delivered] = []
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append(as_delivered(message))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for partition, key, value, timestamp in records:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=report,
                         timestamp=timestamp or 0)
    assert producer.flush(60) == 0
    assert not errors, errors
    assert len(delivered) == len(records)
    return sorted(delivered, key=lambda d: (d.partition, d.offset))


def produce_events(bootstrap: str, topic: str, events: list[Event]) -> list[Delivered]:
    # Spread over both partitions, so each query reads two offset ranges.
    return produce(bootstrap, topic, [(i % PARTITIONS, e.key.encode(), e.value(), None)
                                      for i, e in enumerate(events)])


def read_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS,
               timeout: float = 60.0) -> list[Delivered]:
    """Everything on a topic, read from the start to the high watermark with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records: list[Delivered] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition() or 0)
                    continue
                assert error is None, error
                record = as_delivered(message)
                records.append(record)
                if record.offset + 1 >= ends[record.partition]:
                    done.add(record.partition)
        assert len(done) == partitions, f"read {len(records)} records of {topic} before the deadline"
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


# -- Spark helpers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    started = time.monotonic()
    session = spark_session.start_session(spark_session.SparkSettings(
        app_name="korvet-spark-pipeline-test", work_dir=tmp_path_factory.mktemp("spark")))
    print(f"\nSparkSession (local[2], Kafka connector) started in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    yield session
    session.stop()


def parquet_windows(spark: SparkSession, path: Path) -> list[tuple[Window, Aggregate]]:
    """Every row of the pipeline's Parquet output, as committed in its _spark_metadata log."""
    if not (path / "_spark_metadata").is_dir():
        return []
    from pyspark.sql import functions as F

    rows = spark.read.parquet(str(path)).select(
        F.unix_millis("window_start").alias("start"), F.unix_millis("window_end").alias("end"),
        "key", "events", "amount_sum", "amount_min", "amount_max").collect()
    for row in rows:
        assert row.end - row.start == WINDOW_MS
    return sorted(((row.start, row.key), Aggregate(row.events, row.amount_sum, row.amount_min,
                                                   row.amount_max)) for row in rows)


def instant(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def sink_windows(records: list[Delivered]) -> list[tuple[Window, Aggregate]]:
    """The sink topic's records as windows; checks each record's key and JSON shape."""
    found = []
    for record in records:
        row = json.loads(record.value)
        assert set(row) == {"window_start", "window_end", "key", "events", "amount_sum",
                            "amount_min", "amount_max"}
        assert record.key == row["key"].encode()
        start_ms = int(datetime.strptime(row["window_start"], "%Y-%m-%dT%H:%M:%S.%f%z")
                       .timestamp() * 1000)
        assert row["window_start"] == instant(start_ms)
        assert row["window_end"] == instant(start_ms + WINDOW_MS)
        found.append(((start_ms, row["key"]), Aggregate(row["events"], row["amount_sum"],
                                                        row["amount_min"], row["amount_max"])))
    return sorted(found)


def expected(events: list[Event]) -> list[tuple[Window, Aggregate]]:
    return sorted(final_windows(events).items())


@dataclass
class Scenario:
    """One pipeline deployment: its topics, folders and the events sent so far."""

    bootstrap: str
    root: Path
    name: str

    def __post_init__(self) -> None:
        self.input_topic = f"{self.name}-events"
        self.output_topic = f"{self.name}-windows"
        self.events: list[Event] = []
        self.delivered: list[Delivered] = []
        create_topics(self.bootstrap, self.input_topic, self.output_topic)

    def config(self, trigger: Trigger) -> PipelineConfig:
        return PipelineConfig(
            bootstrap=self.bootstrap, input_topic=self.input_topic,
            output_topic=self.output_topic, output_path=self.root / "parquet",
            checkpoint=self.root / "checkpoint", trigger=trigger,
            window=f"{WINDOW_MS // 1000} seconds", watermark=f"{WATERMARK_MS // 1000} seconds")

    def send(self, events: list[Event]) -> list[Delivered]:
        delivered = produce_events(self.bootstrap, self.input_topic, events)
        self.events += events
        self.delivered += delivered
        return delivered

    def end_offsets(self) -> dict[str, int]:
        """Partition -> offset after its last record, from the delivery reports."""
        ends: dict[str, int] = {}
        for d in self.delivered:
            ends[str(d.partition)] = max(ends.get(str(d.partition), 0), d.offset + 1)
        return ends


AVAILABLE_NOW = Trigger(TriggerKind.AVAILABLE_NOW)


def run_available_now(spark: SparkSession, scenario: Scenario) -> list[BatchProgress]:
    batches: list[BatchProgress] = []
    started = time.monotonic()
    summary = run(spark, scenario.config(AVAILABLE_NOW), run_seconds=300,
                  on_progress=batches.append)
    print(f"\navailable-now run of {scenario.name}: {time.monotonic() - started:.1f} s, "
          f"{summary.batches} batches", file=sys.stderr)
    assert summary.finished
    return batches


def input_rows(batches: list[BatchProgress], sink: str) -> int:
    return sum(b.input_rows for b in batches if b.sink == sink)


# -- the pipeline, trigger availableNow ----------------------------------------------------

# Phase 1: 40 s of event time, then a clock event at 100 s: the watermark reaches 70 s,
# so the four windows [0, 40 s) of every key are final; the clock's own window is not.
PHASE_1 = [*wave("p1", 0, 40_000, 150, seed=1), clock("p1", 100_000)]
# Phase 2, after a restart: events from 110 s on (after the watermark of 70 s, so none is
# late), and a clock at 220 s: the windows [100 s, 170 s) become final, including the
# window of phase 1's clock, which the first run left in the checkpoint's state store.
PHASE_2 = [*wave("p2", 110_000, 60_000, 150, seed=2), clock("p2", 220_000)]


@dataclass
class FirstRun:
    scenario: Scenario
    batches: list[BatchProgress]
    parquet: list[tuple[Window, Aggregate]]
    sink: list[Delivered]
    end_offsets: dict[str, int]  # of the input topic after phase 1


@pytest.fixture(scope="module")
def first_run(spark: SparkSession, korvet: KorvetProcess,
              tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    scenario = Scenario(korvet.bootstrap, tmp_path_factory.mktemp("available-now"),
                        f"available-now-{uuid.uuid4().hex[:8]}")
    scenario.send(PHASE_1)
    batches = run_available_now(spark, scenario)
    return FirstRun(scenario, batches, parquet_windows(spark, scenario.root / "parquet"),
                    read_topic(korvet.bootstrap, scenario.output_topic), scenario.end_offsets())


def test_available_now_writes_exactly_the_final_windows_to_parquet(first_run: FirstRun) -> None:
    want = expected(PHASE_1)
    assert len(want) == 4 * len(KEYS)  # every key has events in each of the four windows
    assert first_run.parquet == want
    # Both queries read every event once, and stopped at the producer's last offsets.
    for sink in ("parquet", "kafka"):
        assert input_rows(first_run.batches, sink) == len(PHASE_1)
        last = [b for b in first_run.batches if b.sink == sink][-1]
        assert last.end_offsets == {first_run.scenario.input_topic: first_run.end_offsets}
        assert last.watermark == instant(EPOCH_MS + 100_000 - WATERMARK_MS)


def test_available_now_writes_the_same_windows_to_the_sink_topic(first_run: FirstRun) -> None:
    assert sink_windows(first_run.sink) == expected(PHASE_1)
    # Keyed records: all windows of a key went to the same partition.
    partitions_of_key: dict[bytes | None, set[int]] = {}
    for record in first_run.sink:
        partitions_of_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())


def test_restart_from_the_checkpoint_loses_and_repeats_nothing(
    spark: SparkSession, korvet: KorvetProcess, first_run: FirstRun
) -> None:
    scenario = first_run.scenario
    ends_before = first_run.end_offsets
    scenario.send(PHASE_2)
    batches = run_available_now(spark, scenario)

    everything = expected(PHASE_1 + PHASE_2)
    assert len(everything) > len(expected(PHASE_1))
    # The window of phase 1's clock event was kept in the checkpoint's state and is final now.
    assert ((EPOCH_MS + 100_000, KEYS[0]), Aggregate(1, 1, 1, 1)) in everything
    assert parquet_windows(spark, scenario.root / "parquet") == everything
    assert sink_windows(read_topic(korvet.bootstrap, scenario.output_topic)) == everything
    for sink in ("parquet", "kafka"):
        mine = [b for b in batches if b.sink == sink]
        # The restart began where the first run ended, and read only the new events.
        assert mine[0].start_offsets == {scenario.input_topic: ends_before}
        assert mine[-1].end_offsets == {scenario.input_topic: scenario.end_offsets()}
        assert input_rows(batches, sink) == len(PHASE_2)


# -- the pipeline, a processing-time trigger -----------------------------------------------


def wait_for_windows(spark: SparkSession, pipeline: PipelineRun, scenario: Scenario,
                     want: list[tuple[Window, Aggregate]], timeout: float = 180.0) -> None:
    """Until both outputs hold ``want`` (or more), while the queries run."""
    deadline = time.monotonic() + timeout
    parquet: list[tuple[Window, Aggregate]] = []
    sink: list[tuple[Window, Aggregate]] = []
    while time.monotonic() < deadline:
        failure = pipeline.failure()
        assert failure is None, failure
        parquet = parquet_windows(spark, scenario.root / "parquet")
        sink = sink_windows(read_topic(scenario.bootstrap, scenario.output_topic))
        if len(parquet) >= len(want) and len(sink) >= len(want):
            return
        time.sleep(1.0)
    pytest.fail(f"after {timeout:.0f} s the pipeline wrote {len(parquet)} Parquet rows and "
                f"{len(sink)} sink records; {len(want)} expected")


def test_processing_time_run_stopped_and_restarted_loses_and_repeats_nothing(
    spark: SparkSession, korvet: KorvetProcess, tmp_path: Path
) -> None:
    scenario = Scenario(korvet.bootstrap, tmp_path, f"processing-time-{uuid.uuid4().hex[:8]}")
    trigger = Trigger.parse("processing-time:1s")
    started = time.monotonic()
    pipeline = start(spark, scenario.config(trigger))
    try:
        # Events arrive while the queries run, in two parts a few micro-batches apart. The
        # first part is the earlier half of event time: the watermark it sets (its latest
        # event - 30 s) is below every event of the second part, so none of those is late.
        by_time = sorted(PHASE_1, key=lambda e: e.event_time_ms)
        time.sleep(2)
        scenario.send(by_time[:75])
        time.sleep(3)
        scenario.send(by_time[75:])
        wait_for_windows(spark, pipeline, scenario, expected(PHASE_1))
    finally:
        pipeline.stop()
    print(f"\nprocessing-time run 1: {time.monotonic() - started:.1f} s", file=sys.stderr)
    assert parquet_windows(spark, scenario.root / "parquet") == expected(PHASE_1)
    assert sink_windows(read_topic(korvet.bootstrap, scenario.output_topic)) == expected(PHASE_1)

    # Stopped: more events arrive, then the same pipeline starts again from its checkpoint.
    ends_before = scenario.end_offsets()
    scenario.send(PHASE_2)
    started = time.monotonic()
    restarted = start(spark, scenario.config(trigger))
    batches: list[BatchProgress] = []
    try:
        wait_for_windows(spark, restarted, scenario, expected(PHASE_1 + PHASE_2))
    finally:
        restarted.stop(on_progress=batches.append)
    print(f"processing-time run 2: {time.monotonic() - started:.1f} s", file=sys.stderr)

    everything = expected(PHASE_1 + PHASE_2)
    assert parquet_windows(spark, scenario.root / "parquet") == everything
    assert sink_windows(read_topic(korvet.bootstrap, scenario.output_topic)) == everything
    for sink in ("parquet", "kafka"):
        mine = [b for b in batches if b.sink == sink]
        assert mine, f"the {sink} query reported no batch"
        assert mine[0].start_offsets == {scenario.input_topic: ends_before}
        assert input_rows(batches, sink) == len(PHASE_2)


# -- Spark's batch reader: offsets and timestamps ------------------------------------------

BATCH_RECORDS = 120
STEP_MS = 100


@dataclass
class BatchTopic:
    bootstrap: str
    topic: str
    records: list[Delivered]
    first_ms: int

    def partition(self, p: int) -> list[Delivered]:
        return [r for r in self.records if r.partition == p]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    with KafkaServer(tmp_path_factory.mktemp("kafka")) as server:
        yield server


@pytest.fixture(scope="module", params=["korvet", "kafka"])
def batch_topic(request: pytest.FixtureRequest) -> BatchTopic:
    """120 records on two partitions, CreateTime 100 ms apart, ten minutes in the past."""
    broker = request.getfixturevalue(request.param)
    bootstrap: str = broker.bootstrap
    topic = f"batch-read-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, topic)
    # Whole seconds, so the timestamps below fall between records, not on them.
    first_ms = (int(time.time()) - 600) * 1000
    records = produce(bootstrap, topic, [
        (i % PARTITIONS, f"k{i}".encode(), f"record {i}".encode(), first_ms + i * STEP_MS)
        for i in range(BATCH_RECORDS)
    ])
    for p in range(PARTITIONS):
        stamps = [r.timestamp_ms for r in records if r.partition == p]
        assert stamps == sorted(stamps)  # CreateTime grows with the offset in each partition
    return BatchTopic(bootstrap, topic, records, first_ms)


def batch_read(spark: SparkSession, topic: BatchTopic, **options: str) -> list[Delivered]:
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", topic.bootstrap)
              .option("subscribe", topic.topic))
    for name, value in options.items():
        reader = reader.option(name, value)
    from pyspark.sql import functions as F

    rows = reader.load().select("topic", "partition", "offset",
                                F.unix_millis("timestamp").alias("ms"), "key", "value").collect()
    assert {row.topic for row in rows} <= {topic.topic}
    return sorted((Delivered(row.partition, row.offset, row.ms, bytes(row.key), bytes(row.value))
                   for row in rows), key=lambda r: (r.partition, r.offset))


def test_batch_read_with_json_offsets(spark: SparkSession, batch_topic: BatchTopic) -> None:
    p0, p1 = batch_topic.partition(0), batch_topic.partition(1)
    started = time.monotonic()
    # A middle slice of partition 0 (endingOffsets is exclusive); partition 1 to its end.
    rows = batch_read(spark, batch_topic,
                      startingOffsets=json.dumps({batch_topic.topic: {"0": p0[10].offset,
                                                                      "1": p1[25].offset}}),
                      endingOffsets=json.dumps({batch_topic.topic: {"0": p0[30].offset,
                                                                    "1": -1}}))
    assert rows == p0[10:30] + p1[25:]
    # -2 (earliest) to a real offset, and the same through 'earliest'/'latest'.
    rows = batch_read(spark, batch_topic,
                      startingOffsets=json.dumps({batch_topic.topic: {"0": -2, "1": -2}}),
                      endingOffsets=json.dumps({batch_topic.topic: {"0": p0[5].offset,
                                                                    "1": p1[0].offset}}))
    assert rows == p0[:5]
    assert batch_read(spark, batch_topic, startingOffsets="earliest",
                      endingOffsets="latest") == batch_topic.records
    print(f"\nbatch reads with JSON offsets: {time.monotonic() - started:.1f} s", file=sys.stderr)


def test_batch_read_with_timestamps(spark: SparkSession, batch_topic: BatchTopic) -> None:
    first = batch_topic.first_ms
    started = time.monotonic()

    def between(p: int | None, start_ms: int, end_ms: int) -> list[Delivered]:
        return [r for r in batch_topic.records
                if (p is None or r.partition == p) and start_ms <= r.timestamp_ms < end_ms]

    # One timestamp for all partitions: records with start <= CreateTime < end.
    start_ms, end_ms = first + 2_050, first + 7_050
    rows = batch_read(spark, batch_topic, startingTimestamp=str(start_ms),
                      endingTimestamp=str(end_ms))
    assert rows == between(None, start_ms, end_ms)
    assert len(rows) == 50

    # One timestamp per partition; an ending timestamp after every record means "latest".
    after_all = first + BATCH_RECORDS * STEP_MS + 60_000
    rows = batch_read(
        spark, batch_topic,
        startingOffsetsByTimestamp=json.dumps({batch_topic.topic: {"0": first + 1_000,
                                                                   "1": first + 9_950}}),
        endingOffsetsByTimestamp=json.dumps({batch_topic.topic: {"0": first + 3_000,
                                                                 "1": after_all}}))
    assert rows == between(0, first + 1_000, first + 3_000) + between(1, first + 9_950, after_all)
    assert len(rows) == 10 + 10
    print(f"\nbatch reads with timestamps: {time.monotonic() - started:.1f} s", file=sys.stderr)


def test_max_offsets_per_trigger_reads_the_topic_in_the_expected_micro_batches(
        spark: SparkSession, batch_topic: BatchTopic, tmp_path: Path) -> None:
    """maxOffsetsPerTrigger=30 over 120 records on two partitions: four micro-batches of 30
    rows, as on Kafka, because offsets count records (dense, the default of new topics).
    On a time topic the same query read 10,000 empty offsets a batch, for ever."""
    batches: list[tuple[int, int]] = []

    def count(frame: Any, batch_id: int) -> None:
        batches.append((batch_id, frame.count()))

    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", batch_topic.bootstrap)
              .option("subscribe", batch_topic.topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "30").load())
    query = (stream.writeStream.foreachBatch(count)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(240)
    assert sorted(batches) == [(0, 30), (1, 30), (2, 30), (3, 30)]
    progress = query.lastProgress
    assert progress is not None
    end = progress["sources"][0]["endOffset"]  # JSON text in PySpark's progress
    ends = (json.loads(end) if isinstance(end, str) else end)[batch_topic.topic]
    assert {int(p): o for p, o in ends.items()} == {0: 60, 1: 60}


# -- what Kafka's Java console producer wrote, through the connector -------------------------


@pytest.fixture(scope="module")
def console_produced(kafka: KafkaServer) -> tuple[str, list[ProduceRecord]]:
    """1,000 keyed records with headers on Apache Kafka, sent by its Java console producer
    (idempotent, acks=all) to a topic it creates (one partition)."""
    topic = f"console-produced-{uuid.uuid4().hex[:8]}"
    records = console_records()
    KafkaJavaTools(kafka.bootstrap, timeout=120).console_produce(
        topic, records, properties=CONSOLE_PRODUCER_PROPERTIES)
    return topic, records


def test_pyspark_reads_the_topic_with_the_kafka_connector(
        spark: SparkSession, kafka: KafkaServer, console_produced: tuple[str, list[ProduceRecord]]
) -> None:
    topic, produced = console_produced
    started = time.monotonic()
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
    )
    rows = sorted(frame.collect(), key=lambda row: int(row.offset))
    print(f"\nconsole producer's records read with headers: {time.monotonic() - started:.1f} s",
          file=sys.stderr)

    assert len(rows) == len(produced)
    for row, (offset, sent) in zip(rows, enumerate(produced), strict=True):
        assert (row.topic, row.partition, row.offset) == (topic, 0, offset)
        assert bytes(row.key) == (sent.key or "").encode()
        assert bytes(row.value) == (sent.value or "").encode()
        assert [(h.key, bytes(h.value)) for h in row.headers] == [
            (name, (value or "").encode()) for name, value in sent.headers
        ]


# -- the command ---------------------------------------------------------------------------


def test_korvet_pipeline_command_runs_the_pipeline(
    spark: SparkSession, korvet: KorvetProcess, tmp_path: Path
) -> None:
    scenario = Scenario(korvet.bootstrap, tmp_path, f"command-{uuid.uuid4().hex[:8]}")
    scenario.send(PHASE_1)
    started = time.monotonic()
    result = subprocess.run(
        [*KORVET, "pipeline", "--bootstrap", korvet.bootstrap,
         "--input-topic", scenario.input_topic, "--output-topic", scenario.output_topic,
         "--output-path", str(tmp_path / "parquet"), "--checkpoint", str(tmp_path / "checkpoint"),
         "--trigger", "available-now", "--window", "10s", "--watermark", "30 seconds",
         "--run-seconds", "300", "--work-dir", str(tmp_path / "spark")],
        capture_output=True, text=True, timeout=600, check=False)
    print(f"\nkorvet pipeline (its own Spark): {time.monotonic() - started:.1f} s", file=sys.stderr)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "korvet pipeline: parquet: batch 0, 151 input rows" in result.stderr
    table = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    assert table == {"parquet": ["2", "151", "-"], "kafka": ["2", "151", "12"]}
    assert parquet_windows(spark, tmp_path / "parquet") == expected(PHASE_1)
    assert sink_windows(read_topic(korvet.bootstrap, scenario.output_topic)) == expected(PHASE_1)


@pytest.mark.parametrize(("flag", "value"), [("--trigger", "every 5s"), ("--window", "ten"),
                                             ("--watermark", "0s"), ("--kafka-option", "acks")])
def test_korvet_pipeline_rejects_bad_options_before_starting_spark(flag: str, value: str) -> None:
    result = subprocess.run(
        [*KORVET, "pipeline", "--input-topic", "a", "--output-topic", "b", "--output-path", "p",
         "--checkpoint", "c", flag, value], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(f"korvet pipeline: {flag}")
    assert "Spark" not in result.stderr


@pytest.mark.parametrize(("text", "trigger"), [
    ("available-now", Trigger(TriggerKind.AVAILABLE_NOW)),
    ("processing-time:5s", Trigger(TriggerKind.PROCESSING_TIME, "5 seconds")),
    ("processing-time=500ms", Trigger(TriggerKind.PROCESSING_TIME, "500 milliseconds")),
    ("2 minutes", Trigger(TriggerKind.PROCESSING_TIME, "2 minutes")),
    ("1 hour", Trigger(TriggerKind.PROCESSING_TIME, "1 hours")),
])
def test_trigger_option(text: str, trigger: Trigger) -> None:
    assert Trigger.parse(text) == trigger
