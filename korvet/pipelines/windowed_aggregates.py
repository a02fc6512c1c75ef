"""The windowed-aggregates pipeline: JSON events on a Korvet topic to per-window totals.

Input, one JSON object per record value of ``input_topic``::

    {"event_id": "e-17", "key": "sensor-3", "amount": 42,
     "event_time": "2025-01-01T00:00:07.250Z"}

Output, one row per (window, key) once the window is final::

    window_start, window_end, key, events, amount_sum, amount_min, amount_max

written by two streaming queries, each with its own checkpoint under ``checkpoint``:

* ``parquet``: Spark's file sink into ``output_path`` (exactly once: a file counts
  only once its batch is in ``output_path/_spark_metadata``, so read the folder
  with Spark, not file by file);
* ``kafka``: Spark's Kafka sink into ``output_topic``, one record per row, key =
  the event key, value = the row as JSON (at least once: a batch that fails
  half-way is written again when it is retried).

Semantics, all Spark's own:

* Event time is the JSON's ``event_time`` (ISO 8601, UTC), not the record's
  Kafka timestamp. Windows are tumbling, ``window`` long, aligned to the epoch.
* The watermark trails the largest event time seen by ``watermark``; append mode
  writes a window's row once, when the watermark passes the window's end, i.e.
  after an event later than ``window_end + watermark`` has been read. Rows never
  change afterwards; the last windows wait for later events (or for the next run).
* Events older than the watermark when they arrive (late) are dropped, as are
  values that are not JSON of the shape above or lack ``key`` or ``event_time``.
* Each query reads the input topic itself and keeps its read position and its
  window state in its checkpoint: a restart goes on from the last committed
  batch, so a stop and restart neither loses nor repeats events.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

EVENT_SCHEMA_DDL = "event_id STRING, key STRING, amount BIGINT, event_time TIMESTAMP"
OUTPUT_COLUMNS = ("window_start", "window_end", "key", "events", "amount_sum", "amount_min",
                  "amount_max")
SINKS = ("parquet", "kafka")

_INTERVAL = re.compile(r"^\s*\d+(\.\d+)?\s*(ms|milliseconds?|s|seconds?|min|minutes?|h|hours?)\s*$")
_SHORT_UNITS = {"ms": "milliseconds", "s": "seconds", "min": "minutes", "h": "hours"}


class PipelineError(RuntimeError):
    """A pipeline setting is wrong, or a query failed; the message says which."""


class TriggerKind(Enum):
    AVAILABLE_NOW = "available-now"
    PROCESSING_TIME = "processing-time"


@dataclass(frozen=True, slots=True)
class Trigger:
    kind: TriggerKind
    interval: str = ""  # Spark interval string, for PROCESSING_TIME

    @classmethod
    def parse(cls, text: str) -> Trigger:
        """``available-now``, ``processing-time:5 seconds``, ``processing-time=2s`` or ``2s``."""
        value = text.strip()
        if value == TriggerKind.AVAILABLE_NOW.value:
            return cls(TriggerKind.AVAILABLE_NOW)
        for separator in (":", "="):
            prefix = TriggerKind.PROCESSING_TIME.value + separator
            if value.startswith(prefix):
                value = value[len(prefix):]
                break
        return cls(TriggerKind.PROCESSING_TIME, parse_interval(value, "--trigger"))

    def describe(self) -> str:
        name = str(self.kind.value)
        return name if self.kind is TriggerKind.AVAILABLE_NOW else f"{name}:{self.interval}"


def parse_interval(text: str, what: str) -> str:
    """A Spark interval string (``10 seconds``) from ``10 seconds``, ``10s``, ``500ms`` ...."""
    if not _INTERVAL.match(text):
        raise PipelineError(f"{what}: {text!r} is not an interval such as '10 seconds' or '500ms'")
    match = re.match(r"^\s*([\d.]+)\s*([a-z]+)\s*$", text)
    assert match is not None
    number, unit = match.groups()
    unit = _SHORT_UNITS.get(unit, unit)
    if not unit.endswith("s"):
        unit += "s"
    if float(number) <= 0:
        raise PipelineError(f"{what}: {text!r} must be longer than zero")
    return f"{number} {unit}"


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    bootstrap: str
    input_topic: str
    output_topic: str
    output_path: Path
    checkpoint: Path
    trigger: Trigger = field(default_factory=lambda: Trigger(TriggerKind.AVAILABLE_NOW))
    window: str = "10 seconds"
    watermark: str = "30 seconds"
    # Where a first run (no checkpoint yet) starts; a checkpoint always wins.
    starting_offsets: str = "earliest"
    # More Kafka client settings for both queries, without the "kafka." prefix.
    kafka_options: Mapping[str, str] = field(default_factory=dict)

    def checkpoint_of(self, sink: str) -> Path:
        return self.checkpoint / sink


def kafka_source_options(config: PipelineConfig) -> dict[str, str]:
    options = {
        "kafka.bootstrap.servers": config.bootstrap,
        "subscribe": config.input_topic,
        "startingOffsets": config.starting_offsets,
        # Spark's default, stated: a gap that is not explained by the log's start offset
        # fails the query instead of being skipped.
        "failOnDataLoss": "true",
    }
    options.update({f"kafka.{k}": v for k, v in config.kafka_options.items()})
    return options


def windowed_aggregates(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    """The streaming DataFrame of final per-window aggregates (columns ``OUTPUT_COLUMNS``)."""
    from pyspark.sql import functions as F

    raw = spark.readStream.format("kafka").options(**kafka_source_options(config)).load()
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA_DDL).alias("e"))
        .select("e.*")
        .where(F.col("key").isNotNull() & F.col("event_time").isNotNull())
    )
    return (
        events.withWatermark("event_time", config.watermark)
        .groupBy(F.window("event_time", config.window), F.col("key"))
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.coalesce(F.sum("amount"), F.lit(0)).cast("bigint").alias("amount_sum"),
            F.min("amount").alias("amount_min"),
            F.max("amount").alias("amount_max"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            *OUTPUT_COLUMNS[2:],
        )
    )


def _as_kafka_records(aggregates: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return aggregates.select(
        F.col("key").cast("string").alias("key"),
        F.to_json(F.struct(*OUTPUT_COLUMNS)).alias("value"),
    )


def _with_trigger(writer: Any, trigger: Trigger) -> Any:
    if trigger.kind is TriggerKind.AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger.interval)


def start(spark: SparkSession, config: PipelineConfig) -> PipelineRun:
    """Start both queries; they run until ``stop()`` (or, with available-now, finish)."""
    aggregates = windowed_aggregates(spark, config)
    parquet_writer = (
        aggregates.writeStream.queryName(f"korvet-windows-parquet-{config.input_topic}")
        .format("parquet")
        .outputMode("append")
        .option("path", str(config.output_path))
        .option("checkpointLocation", str(config.checkpoint_of("parquet")))
    )
    kafka_writer = (
        _as_kafka_records(aggregates)
        .writeStream.queryName(f"korvet-windows-kafka-{config.input_topic}")
        .format("kafka")
        .outputMode("append")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("topic", config.output_topic)
        .option("checkpointLocation", str(config.checkpoint_of("kafka")))
    )
    for key, value in config.kafka_options.items():
        kafka_writer = kafka_writer.option(f"kafka.{key}", value)
    queries: dict[str, StreamingQuery] = {}
    try:
        queries["parquet"] = _with_trigger(parquet_writer, config.trigger).start()
        queries["kafka"] = _with_trigger(kafka_writer, config.trigger).start()
    except Exception:
        for query in queries.values():
            query.stop()
        raise
    return PipelineRun(config, queries)


Offsets = dict[str, dict[str, int]]  # topic -> partition -> offset, as Spark writes them


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One finished micro-batch of one of the two queries."""

    sink: str
    batch_id: int
    input_rows: int
    watermark: str
    rows_written: int  # -1 when the sink does not count (the file sink)
    start_offsets: Offsets
    end_offsets: Offsets

    @classmethod
    def from_spark(cls, sink: str, progress: Mapping[str, Any]) -> BatchProgress:
        start: Offsets = {}
        end: Offsets = {}
        for source in progress.get("sources") or []:
            for target, name in ((start, "startOffset"), (end, "endOffset")):
                for topic, partitions in _offsets_json(source.get(name)).items():
                    target.setdefault(topic, {}).update(partitions)
        written = int((progress.get("sink") or {}).get("numOutputRows", -1))
        watermark = str((progress.get("eventTime") or {}).get("watermark", ""))
        return cls(sink, int(progress["batchId"]), int(progress.get("numInputRows", 0)),
                   watermark, written, start, end)

    def describe(self) -> str:
        written = f", {self.rows_written} rows written" if self.rows_written >= 0 else ""
        return (f"{self.sink}: batch {self.batch_id}, {self.input_rows} input rows{written}, "
                f"watermark {self.watermark or '-'}")


def _offsets_json(value: Any) -> Offsets:
    # A first batch has no start: pyspark reports None, or the string "None" in recentProgress.
    if value is None or value in ("None", "null", ""):
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


@dataclass
class PipelineRun:
    """The two running queries of one pipeline start."""

    config: PipelineConfig
    queries: dict[str, StreamingQuery]
    _reported: dict[str, int] = field(default_factory=dict)

    def new_progress(self) -> list[BatchProgress]:
        """Progress of the batches that finished since the last call, oldest first."""
        found: list[BatchProgress] = []
        for sink, query in self.queries.items():
            seen = self._reported.get(sink, -1)
            for progress in query.recentProgress:
                batch = BatchProgress.from_spark(sink, _progress_dict(progress))
                if batch.batch_id > seen:
                    found.append(batch)
                    seen = batch.batch_id
            self._reported[sink] = seen
        return found

    def failure(self) -> str | None:
        for sink, query in self.queries.items():
            error = query.exception()
            if error is not None:
                return f"the {sink} query failed: {error}"
        return None

    @property
    def active(self) -> bool:
        return any(q.isActive for q in self.queries.values())

    def wait(self, timeout: float | None = None,
             on_progress: Callable[[BatchProgress], None] | None = None) -> bool:
        """Wait until both queries ended (available-now) or ``timeout``; True when they ended.

        Raises ``PipelineError`` when a query failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.active and self.failure() is None:
            if deadline is not None and time.monotonic() >= deadline:
                break
            running = next(q for q in self.queries.values() if q.isActive)
            with contextlib.suppress(Exception):  # a failure is reported below
                running.awaitTermination(1)
            self._report(on_progress)
        self._report(on_progress)
        failure = self.failure()
        if failure:
            for query in self.queries.values():
                query.stop()
            raise PipelineError(failure)
        return not self.active

    def stop(self, idle_timeout: float = 30.0,
             on_progress: Callable[[BatchProgress], None] | None = None) -> None:
        """Stop both queries, each between two batches when it can.

        A batch that is stopped half-way is run again at the next start: the Parquet
        sink ignores its partial files, but the Kafka sink would write its records
        twice. So each query is stopped once it is not running a trigger, or after
        ``idle_timeout`` seconds in any case.
        """
        for query in self.queries.values():
            deadline = time.monotonic() + idle_timeout
            while query.isActive and time.monotonic() < deadline:
                if not query.status.get("isTriggerActive", False):
                    break
                time.sleep(0.05)
            query.stop()
        self._report(on_progress)
        failure = self.failure()
        if failure:
            raise PipelineError(failure)

    def _report(self, on_progress: Callable[[BatchProgress], None] | None) -> None:
        batches = self.new_progress()
        if on_progress is not None:
            for batch in batches:
                on_progress(batch)


def _progress_dict(progress: Any) -> Mapping[str, Any]:
    # pyspark returns dicts from recentProgress, StreamingQueryProgress objects elsewhere.
    if isinstance(progress, Mapping):
        return progress
    parsed: Mapping[str, Any] = json.loads(progress.json)
    return parsed


@dataclass(frozen=True, slots=True)
class RunSummary:
    batches: dict[str, int]
    input_rows: dict[str, int]
    rows_written: dict[str, int]
    finished: bool
    seconds: float


def run(spark: SparkSession, config: PipelineConfig, *, run_seconds: float | None = None,
        on_progress: Callable[[BatchProgress], None] | None = None) -> RunSummary:
    """Run the pipeline: with available-now until all data present at start is processed
    (``run_seconds`` bounds it), with a processing-time trigger for ``run_seconds``
    (until interrupted when None), then stop cleanly."""
    started = time.monotonic()
    batches: dict[str, int] = dict.fromkeys(SINKS, 0)
    inputs: dict[str, int] = dict.fromkeys(SINKS, 0)
    written: dict[str, int] = dict.fromkeys(SINKS, 0)

    def count(batch: BatchProgress) -> None:
        batches[batch.sink] += 1
        inputs[batch.sink] += batch.input_rows
        written[batch.sink] += max(0, batch.rows_written)
        if on_progress is not None:
            on_progress(batch)

    pipeline = start(spark, config)
    finished = False
    try:
        finished = pipeline.wait(run_seconds, count)
    finally:
        if pipeline.active:
            pipeline.stop(on_progress=count)
    if config.trigger.kind is TriggerKind.PROCESSING_TIME:
        finished = True  # it ran for as long as it was asked to
    return RunSummary(batches, inputs, written, finished, time.monotonic() - started)
