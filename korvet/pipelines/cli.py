"""`korvet pipeline`: run the windowed-aggregates Spark pipeline against a broker."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from korvet.pipelines.spark_session import SparkSettings, SparkSetupError
from korvet.pipelines.windowed_aggregates import (
    BatchProgress,
    PipelineConfig,
    PipelineError,
    Trigger,
    parse_interval,
)


def add_parser(commands: Any) -> None:
    pipeline = commands.add_parser(
        "pipeline",
        help="run the Spark Structured Streaming pipeline (JSON events -> windowed aggregates)",
        description=(
            "Read JSON events ({\"event_id\", \"key\", \"amount\", \"event_time\"}; amount a whole "
            "number: Spark reads it as BIGINT, and a value it cannot read so counts as no "
            "amount) from a topic "
            "with Spark's Kafka connector, aggregate them per key in tumbling event-time "
            "windows with a watermark, and write each final window to Parquet and to another "
            "topic (Kafka sink). Both outputs are checkpointed under --checkpoint: running the "
            "command again goes on where the last run stopped. Needs the spark extra and the "
            "'spark' jars (korvet jars fetch spark). See docs/spark.md."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    pipeline.add_argument("--bootstrap", default="127.0.0.1:9092",
                          help="bootstrap servers of the broker (Korvet or Kafka)")
    pipeline.add_argument("--input-topic", required=True, help="topic with the JSON events")
    pipeline.add_argument("--output-topic", required=True,
                          help="topic the aggregates are written to (must exist or be auto-created)")
    pipeline.add_argument("--output-path", required=True, type=Path,
                          help="folder of the Parquet output (read it with Spark: "
                               "its _spark_metadata says which files count)")
    pipeline.add_argument("--checkpoint", required=True, type=Path,
                          help="checkpoint folder (one sub-folder per output)")
    pipeline.add_argument("--trigger", default="available-now",
                          help="'available-now' (process what is there, then stop) or "
                               "'processing-time:INTERVAL' (a micro-batch every INTERVAL, "
                               "e.g. processing-time:5s)")
    pipeline.add_argument("--window", default="10 seconds", help="tumbling window length")
    pipeline.add_argument("--watermark", default="30 seconds",
                          help="how far the watermark trails the latest event time")
    pipeline.add_argument("--run-seconds", type=float, default=None,
                          help="processing-time: stop after this long (default: until Ctrl-C); "
                               "available-now: give up after this long")
    pipeline.add_argument("--starting-offsets", default="earliest",
                          help="where a first run starts: earliest, latest or Spark's JSON "
                               "offsets (a checkpoint always wins)")
    pipeline.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                          help="a Kafka client setting for the source and the sink, "
                               "e.g. security.protocol=SSL; repeatable")
    pipeline.add_argument("--master", default="local[2]", help="Spark master")
    pipeline.add_argument("--shuffle-partitions", type=int, default=2,
                          help="spark.sql.shuffle.partitions (state store partitions); fixed "
                               "by the checkpoint after the first run")
    pipeline.add_argument("--work-dir", type=Path, default=None,
                          help="Spark's Ivy and warehouse folder (default: a temporary folder)")
    pipeline.set_defaults(func=run_pipeline)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    options: dict[str, str] = {}
    for item in args.kafka_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PipelineError(f"--kafka-option: {item!r} is not KEY=VALUE")
        options[key.removeprefix("kafka.")] = value
    if args.run_seconds is not None and args.run_seconds <= 0:
        raise PipelineError("--run-seconds must be positive")
    return PipelineConfig(
        bootstrap=args.bootstrap,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        output_path=args.output_path.resolve(),
        checkpoint=args.checkpoint.resolve(),
        trigger=Trigger.parse(args.trigger),
        window=parse_interval(args.window, "--window"),
        watermark=parse_interval(args.watermark, "--watermark"),
        starting_offsets=args.starting_offsets,
        kafka_options=options,
    )


def _print_progress(batch: BatchProgress) -> None:
    print(f"korvet pipeline: {batch.describe()}", file=sys.stderr, flush=True)


def run_pipeline(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except PipelineError as exc:
        print(f"korvet pipeline: {exc}", file=sys.stderr)
        return 2
    from korvet.pipelines import spark_session, windowed_aggregates

    settings = SparkSettings(master=args.master, shuffle_partitions=args.shuffle_partitions,
                             work_dir=args.work_dir.resolve() if args.work_dir else None)
    print(f"korvet pipeline: starting Spark ({settings.master}); {config.input_topic} -> "
          f"{config.output_path} and {config.output_topic}, trigger {config.trigger.describe()}, "
          f"window {config.window}, watermark {config.watermark}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        spark = spark_session.start_session(settings)
    except SparkSetupError as exc:
        print(f"korvet pipeline: {exc}", file=sys.stderr)
        return 2
    print(f"korvet pipeline: Spark started in {time.monotonic() - started:.1f} s",
          file=sys.stderr, flush=True)
    try:
        summary = windowed_aggregates.run(spark, config, run_seconds=args.run_seconds,
                                          on_progress=_print_progress)
    except PipelineError as exc:
        print(f"korvet pipeline: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("korvet pipeline: interrupted; both queries stopped", file=sys.stderr)
        return 130
    finally:
        spark.stop()
    print(f"{'output':<8} {'batches':>8} {'input rows':>11} {'rows written':>13}")
    for sink in windowed_aggregates.SINKS:
        written = summary.rows_written[sink] if sink == "kafka" else "-"
        print(f"{sink:<8} {summary.batches[sink]:>8} {summary.input_rows[sink]:>11} {written!s:>13}")
    print(f"ran {summary.seconds:.1f} s", file=sys.stderr)
    if not summary.finished:
        print(f"korvet pipeline: not all available data was processed within "
              f"{args.run_seconds} s; run again to go on from the checkpoint", file=sys.stderr)
        return 3
    return 0
